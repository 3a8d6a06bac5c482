// Measured memory read bandwidth: the ceiling a streaming kernel (matvec over
// weights read once) is compared with in benchmarks.
//
//   double gbps = kx::cpu::MeasureReadBandwidthGBps(256ull << 20, 1, 5);
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "base/timer.h"

namespace kx::cpu {

// Read bandwidth in GB/s (1e9 bytes/s): the median of `repeats` timed
// sum-reductions over a buffer of `working_set_bytes` (whole cache lines; at
// least 64 KiB), after one untimed warm-up pass. With n_threads > 1 the buffer
// is split into contiguous shares that n_threads threads read at the same
// time (the wall time of the slowest counts): the ceiling for kernels that
// split rows across threads. Uses the widest vector loads the CPU runs, on a buffer in 2 MiB
// pages where THP is not off (as kairox holds the weights).
// Allocates the buffer and starts threads; not for hot paths.
double MeasureReadBandwidthGBps(uint64_t working_set_bytes, int n_threads, int repeats);

// Runs fn(i) on n_threads threads (the calling thread is thread 0) started
// together after all exist, and returns the seconds from the start signal
// until the last one finished. For benchmarks: it creates threads.
template <class Fn>
double TimeConcurrently(int n_threads, const Fn& fn) {
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 1; i < n_threads; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(i);
    });
  }
  Stopwatch sw;
  go.store(true, std::memory_order_release);
  fn(0);
  for (std::thread& t : threads) t.join();
  return sw.ElapsedSeconds();
}

}  // namespace kx::cpu
