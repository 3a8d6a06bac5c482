// Ceiling probes for kairox-bench: memory read bandwidth and the matmul
// kernel's compute peak, both measured with the benchmark's own thread count.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kx::bench {

// Mean, sample standard deviation and median of a set of samples.
struct Summary {
  double mean = 0.0;
  double stddev = 0.0;
  double median = 0.0;
};
Summary Summarize(std::vector<double> samples);

// Read bandwidth (GB/s, 1e9 bytes/s) over a working set of `bytes`, split
// across `n_threads` threads reading concurrently. <= 0 when unavailable.
double ReadBandwidthGBps(uint64_t bytes, int n_threads);

// Compute peak (GFLOP/s) of the engine's Q4_1 matmul kernel on a weight
// matrix too large for the caches × kMatmulPeakColumns activation columns,
// rows split across `n_threads` threads. <= 0 when the kernel is missing.
double MatmulPeakGflops(int n_threads);
// How MatmulPeakGflops measures, for the report.
std::string MatmulPeakMethod();

// Bytes this process (all its threads) has caused to be read from storage so far: the
// `read_bytes` line of /proc/self/io (O_DIRECT reads and page-cache misses alike; reads served
// from the page cache do not count). -1 where the file is unreadable.
int64_t ProcReadBytes();

// The index of the largest value (the first of equal ones); 0 for an empty span.
int32_t ArgMax(std::span<const float> values);

}  // namespace kx::bench
