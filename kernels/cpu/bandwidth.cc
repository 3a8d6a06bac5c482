#include "kernels/cpu/bandwidth.h"

// GCC 12's AVX-512 headers build "undefined" vectors as `__m256d __Y = __Y;`,
// which -Wuninitialized flags once inlined (a false positive in the header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/cpu_features.h"
#include "base/huge_pages.h"
#include "base/timer.h"

namespace kx::cpu {
namespace {

constexpr uint64_t kLine = 64;
constexpr uint64_t kMinBytes = 64 << 10;
constexpr double kMinSampleSeconds = 0.002;

// Four independent accumulators so the adds never limit the load rate.
__attribute__((target("avx512f"))) float SumAvx512(const float* p, uint64_t n_floats) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i < n_floats; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  // Lanes summed through memory: GCC 12's _mm512_reduce_add_ps trips
  // -Wuninitialized inside a target("avx512f") function.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

__attribute__((target("avx2"))) float SumAvx2(const float* p, uint64_t n_floats) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i < n_floats; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

float SumSse(const float* p, uint64_t n_floats) {
  __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i < n_floats; i += 16) {
    a0 = _mm_add_ps(a0, _mm_load_ps(p + i));
    a1 = _mm_add_ps(a1, _mm_load_ps(p + i + 4));
    a2 = _mm_add_ps(a2, _mm_load_ps(p + i + 8));
    a3 = _mm_add_ps(a3, _mm_load_ps(p + i + 12));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

double MeasureReadBandwidthGBps(uint64_t working_set_bytes, int n_threads, int repeats) {
  n_threads = std::max(1, n_threads);
  const uint64_t bytes = std::max(kMinBytes, working_set_bytes / kLine * kLine);
  // Each thread sums its own contiguous share (whole lines, 64 floats a step).
  const uint64_t share = bytes / n_threads / (kLine * 4) * (kLine * 4);
  KX_CHECK_MSG(share > 0, "working set too small for the thread count");
  const uint64_t total = share * n_threads;
  // 2 MiB pages (where THP is not off): the weights decode streams sit in them too
  // (base/huge_pages.h), and on 4 KiB pages the probe would pay page walks they do not.
  float* buf = reinterpret_cast<float*>(AllocHugePages(total));
  KX_CHECK_MSG(buf != nullptr, "bandwidth buffer allocation failed");
  const uint64_t n_floats = total / sizeof(float);
  for (uint64_t i = 0; i < n_floats; ++i) buf[i] = static_cast<float>(i & 0xff);  // touch pages
  const Isa isa = GetCpuFeatures().BestIsa();
  std::vector<float> sinks(n_threads);
  int passes = 1;
  auto sum = [&](int ith) {
    const float* p = buf + ith * (share / sizeof(float));
    const uint64_t nf = share / sizeof(float);
    for (int k = 0; k < passes; ++k) {
      float v;
      if (isa >= Isa::kAvx512)
        v = SumAvx512(p, nf);
      else if (isa >= Isa::kAvx2)
        v = SumAvx2(p, nf);
      else
        v = SumSse(p, nf);
      sinks[ith] += v;  // keeps the sums live
    }
  };
  TimeConcurrently(n_threads, sum);  // warm-up (and caches for small sets)
  // Samples of at least kMinSampleSeconds: a cache-resident pass takes
  // microseconds, less than starting the threads.
  const double probe = TimeConcurrently(n_threads, sum);
  passes = std::max(1, static_cast<int>(kMinSampleSeconds / std::max(1e-9, probe)));
  std::vector<double> secs;
  for (int r = 0; r < std::max(1, repeats); ++r) secs.push_back(TimeConcurrently(n_threads, sum));
  volatile float sink = sinks[0];
  (void)sink;
  FreeHugePages(reinterpret_cast<const uint8_t*>(buf), total);
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  return static_cast<double>(total) * passes / median * 1e-9;
}

}  // namespace kx::cpu
