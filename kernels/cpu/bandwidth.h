// Measured memory read bandwidth: the ceiling a streaming kernel (matvec over
// weights read once) is compared with in benchmarks.
//
//   double gbps = kx::cpu::MeasureReadBandwidthGBps(256ull << 20, 1, 5);
#pragma once

#include <cstdint>

namespace kx::cpu {

// Read bandwidth in GB/s (1e9 bytes/s): the median of `repeats` timed
// sum-reductions over a buffer of `working_set_bytes` (whole cache lines; at
// least 64 KiB), after one untimed warm-up pass. With n_threads > 1 the buffer
// is split into contiguous shares that n_threads threads read at the same
// time (the wall time of the slowest counts): the ceiling for kernels that
// split rows across threads. Uses the widest vector loads the CPU runs.
// Allocates the buffer and starts threads; not for hot paths.
double MeasureReadBandwidthGBps(uint64_t working_set_bytes, int n_threads, int repeats);

}  // namespace kx::cpu
