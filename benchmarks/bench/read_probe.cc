#include "bench/read_probe.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "base/cpu_features.h"
#include "base/timer.h"

namespace kx::bench {
namespace {

constexpr uint64_t kLineBytes = 64;
// Bytes one thread reads per loop iteration (4 independent accumulators of
// 64 bytes); every share is a multiple of it.
constexpr uint64_t kStrideBytes = 4 * kLineBytes;
// A timed region reads at least this much in total, so that a cache-resident
// set is read many times per timing and barrier costs are negligible.
constexpr uint64_t kMinBytesPerRegion = uint64_t{256} << 20;

using ReadFn = uint64_t (*)(const uint8_t* p, uint64_t bytes);

__attribute__((target("avx512f"))) uint64_t ReadAvx512(const uint8_t* p, uint64_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i < bytes; i += kStrideBytes) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  return lanes[0] ^ lanes[7];
}

__attribute__((target("avx2"))) uint64_t ReadAvx2(const uint8_t* p, uint64_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i < bytes; i += kStrideBytes) {
    for (uint64_t j = 0; j < kStrideBytes; j += 128) {
      a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + j)));
      a1 =
          _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + j + 32)));
      a2 =
          _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + j + 64)));
      a3 =
          _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + j + 96)));
    }
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}

uint64_t ReadScalar(const uint8_t* p, uint64_t bytes) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (uint64_t i = 0; i < bytes; i += 32) {
    uint64_t v[4];
    std::memcpy(v, p + i, sizeof v);
    a0 ^= v[0];
    a1 ^= v[1];
    a2 ^= v[2];
    a3 ^= v[3];
  }
  return a0 ^ a1 ^ a2 ^ a3;
}

ReadFn SelectRead() {
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx512f) return ReadAvx512;
  if (f.avx2) return ReadAvx2;
  return ReadScalar;
}

// Generation barrier for a fixed party of threads; spins politely.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void Wait() {
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      while (gen_.load(std::memory_order_acquire) == gen) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> gen_{0};
};

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

double MeasureConcurrentReadGBps(uint64_t working_set_bytes, int n_threads, int repeats) {
  static std::unique_ptr<uint8_t, FreeDeleter> buffer;
  static uint64_t capacity = 0;
  n_threads = std::max(1, n_threads);
  repeats = std::max(1, repeats);
  const uint64_t unit = kStrideBytes * static_cast<uint64_t>(n_threads);
  const uint64_t bytes = std::max(unit, working_set_bytes / unit * unit);
  if (bytes > capacity) {
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(kLineBytes, bytes)));
    if (!buffer) {
      capacity = 0;
      return 0.0;
    }
    capacity = bytes;
    std::memset(buffer.get(), 0x5A, bytes);  // fault every page in now
  }
  const uint64_t share = bytes / static_cast<uint64_t>(n_threads);
  const uint64_t passes = std::max<uint64_t>(1, kMinBytesPerRegion / bytes);
  const ReadFn read = SelectRead();

  SpinBarrier barrier(n_threads);
  std::vector<int64_t> start(static_cast<size_t>(n_threads) * repeats);
  std::vector<int64_t> stop(start.size());
  std::atomic<uint64_t> sink{0};  // keeps the reads alive
  auto worker = [&](int t) {
    const uint8_t* p = buffer.get() + share * static_cast<uint64_t>(t);
    uint64_t acc = read(p, share);  // warm-up
    for (int r = 0; r < repeats; ++r) {
      barrier.Wait();
      const size_t slot = static_cast<size_t>(r) * n_threads + t;
      start[slot] = NowNs();
      for (uint64_t pass = 0; pass < passes; ++pass) acc ^= read(p, share);
      stop[slot] = NowNs();
    }
    sink.fetch_xor(acc, std::memory_order_relaxed);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < n_threads; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (std::thread& th : threads) th.join();

  // A region lasts from the first thread's start to the last thread's stop.
  std::vector<double> gbps;
  for (int r = 0; r < repeats; ++r) {
    const auto first = start.begin() + static_cast<std::ptrdiff_t>(r) * n_threads;
    const auto last = stop.begin() + static_cast<std::ptrdiff_t>(r) * n_threads;
    const int64_t ns =
        *std::max_element(last, last + n_threads) - *std::min_element(first, first + n_threads);
    if (ns > 0) gbps.push_back(static_cast<double>(bytes * passes) / static_cast<double>(ns));
  }
  if (gbps.empty()) return 0.0;
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

}  // namespace kx::bench
