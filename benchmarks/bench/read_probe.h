// Multi-threaded memory read bandwidth, measured the way a decode step reads
// its weights: n threads, each streaming its own share of one working set,
// all at once. (kx::cpu::MeasureReadBandwidthGBps is single-threaded.)
#pragma once

#include <cstdint>

namespace kx::bench {

// GB/s (1e9 bytes/s) for reading `working_set_bytes` split across
// `n_threads` threads that run concurrently: the median of `repeats` timed
// regions, each several passes long when the set is small (so that timer and
// barrier costs vanish), after one untimed warm-up pass. Uses 64-byte vector
// loads where the CPU has AVX-512, 32-byte with AVX2. Keeps its buffer
// between calls (grown as needed); not thread-safe.
double MeasureConcurrentReadGBps(uint64_t working_set_bytes, int n_threads, int repeats);

}  // namespace kx::bench
