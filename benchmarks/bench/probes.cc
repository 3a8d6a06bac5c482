#include "bench/probes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "base/timer.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

namespace kx::bench {
namespace {

// The peak probe's shape: 2048 rows × 4096 inputs of Q4_1 is 5 MiB of
// weights (past L2), and 64 columns make it compute-bound like a prefill.
constexpr int64_t kMatmulRows = 2048;
constexpr int64_t kMatmulInputs = 4096;
constexpr int64_t kMatmulPeakColumns = 64;
// Timed passes per probe (after one untimed warm-up pass).
constexpr int kMatmulPasses = 3;
// Timed regions inside one bandwidth probe (it returns their median).
constexpr int kBandwidthRepeats = 3;
// Q4_1 block: half d, half m, 16 bytes of nibbles, for 32 weights.
constexpr int kQ4_1Block = 32;
constexpr size_t kQ4_1BlockBytes = 20;

// Runs fn(begin, end) on n_threads threads over [0, n) split evenly.
template <typename Fn>
void ParallelRows(int n_threads, int64_t n, Fn fn) {
  std::vector<std::thread> threads;
  const int64_t per = (n + n_threads - 1) / n_threads;
  for (int t = 0; t < n_threads; ++t) {
    const int64_t begin = std::min(n, per * t), end = std::min(n, begin + per);
    if (begin < end) threads.emplace_back(fn, begin, end);
  }
  for (std::thread& th : threads) th.join();
}

}  // namespace

Summary Summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  const double n = static_cast<double>(samples.size());
  for (double v : samples) s.mean += v;
  s.mean /= n;
  if (samples.size() > 1) {
    double ss = 0.0;
    for (double v : samples) ss += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(ss / (n - 1.0));
  }
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  s.median = samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
  return s;
}

double ReadBandwidthGBps(uint64_t bytes, int n_threads) {
  if (bytes == 0) return 0.0;
  return cpu::MeasureReadBandwidthGBps(bytes, n_threads, kBandwidthRepeats);
}

std::string MatmulPeakMethod() {
  return absl::StrFormat("Q4_1 matmul kernel, %d x %d weights x %d columns", kMatmulRows,
                         kMatmulInputs, kMatmulPeakColumns);
}

double MatmulPeakGflops(int n_threads) {
  const cpu::TypeKernels* tk = cpu::Kernels().For(GgmlType::kQ4_1);
  if (tk == nullptr || tk->matmul == nullptr) return 0.0;
  const size_t row_bytes = static_cast<size_t>(kMatmulInputs / kQ4_1Block) * kQ4_1BlockBytes;
  // Weights: random nibbles, scales and minimums of a realistic magnitude
  // (random bits in the halves could be NaN/inf and slow nothing down, but
  // would make the output meaningless).
  static std::vector<uint8_t> weights;
  static std::vector<uint8_t> act;
  static std::vector<float> dst;
  const size_t act_stride = tk->act_bytes(kMatmulInputs);
  if (weights.empty()) {
    std::mt19937_64 rng(0x5EED);
    std::uniform_real_distribution<float> scale(0.001f, 0.02f);
    weights.resize(row_bytes * static_cast<size_t>(kMatmulRows));
    for (size_t b = 0; b < weights.size(); b += kQ4_1BlockBytes) {
      const uint16_t d = cpu::FloatToHalf(scale(rng));
      const uint16_t m = cpu::FloatToHalf(-8.0f * scale(rng));
      std::memcpy(&weights[b], &d, sizeof d);
      std::memcpy(&weights[b + sizeof d], &m, sizeof m);
      for (size_t i = 2 * sizeof d; i < kQ4_1BlockBytes; ++i) {
        weights[b + i] = static_cast<uint8_t>(rng());
      }
    }
    std::normal_distribution<float> x_dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(kMatmulInputs));
    act.resize(act_stride * static_cast<size_t>(kMatmulPeakColumns));
    for (int64_t c = 0; c < kMatmulPeakColumns; ++c) {
      for (float& v : x) v = x_dist(rng);
      tk->quantize_act(x.data(), kMatmulInputs, act.data() + act_stride * static_cast<size_t>(c));
    }
    dst.resize(static_cast<size_t>(kMatmulRows * kMatmulPeakColumns));
  }
  auto pass = [&](int64_t begin, int64_t end) {
    tk->matmul(weights.data() + row_bytes * static_cast<size_t>(begin), row_bytes, kMatmulInputs,
               end - begin, act.data(), act_stride, kMatmulPeakColumns, dst.data() + begin,
               kMatmulRows);
  };
  ParallelRows(n_threads, kMatmulRows, pass);  // warm-up
  Stopwatch sw;
  ParallelRows(n_threads, kMatmulRows, [&](int64_t begin, int64_t end) {
    for (int i = 0; i < kMatmulPasses; ++i) pass(begin, end);
  });
  const double seconds = sw.ElapsedSeconds();
  const double flops = 2.0 * static_cast<double>(kMatmulRows) * static_cast<double>(kMatmulInputs) *
                       static_cast<double>(kMatmulPeakColumns) * kMatmulPasses;
  return seconds > 0.0 ? flops / seconds * 1e-9 : 0.0;
}

int64_t ProcReadBytes() {
  std::ifstream in("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return -1;
}

int32_t ArgMax(std::span<const float> values) {
  if (values.empty()) return 0;
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

}  // namespace kx::bench
