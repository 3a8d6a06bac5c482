// Measured memory read bandwidth: the ceiling a streaming kernel (matvec over
// weights read once) is compared with in benchmarks.
//
//   double gbps = kx::cpu::MeasureReadBandwidthGBps(256ull << 20, 1, 5);
#pragma once

#include <cstdint>

namespace kx::cpu {

// Single-threaded read bandwidth in GB/s (1e9 bytes/s): the median of
// `repeats` timed sum-reductions over a buffer of `working_set_bytes` (a
// multiple of 64 bytes is used; at least 64 KiB), after one untimed warm-up
// pass. Uses the widest vector loads the CPU runs. Allocates the buffer; not
// for hot paths. The thread-count hint is accepted for a later multi-threaded
// version and ignored now.
double MeasureReadBandwidthGBps(uint64_t working_set_bytes, int n_threads_hint_ignored_for_now,
                                int repeats);

}  // namespace kx::cpu
