// Prefill matmul microbenchmark: GMAC/s of each ISA's matmul on the
// Qwen2.5-1.5B Q4_K_M prefill shapes (Q4_K gate/up and QKV, Q6_K down) for a
// batch of columns, one thread, against the same ISA's matvec run per
// column and in calls of 4 columns (below kGemmMinCols: the lane / block
// tiles that ran every matmul before kquant_gemm.h), and against the CPU's
// multiply-accumulate ceiling for the dot
// instruction the ISA uses (16-bit products: vpdpwssd zmm = 32 per
// instruction, vpmaddwd zmm 32, vpmaddwd ymm 16; the instruction's issue
// rate per cycle is a flag, the clock is measured here with a chain of
// dependent adds, one per cycle).
//
//   bench_matmul [--cols N] [--repeats N] [--isa ISA] [--ports N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/timer.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

namespace kx {
namespace {

struct Shape {
  const char* name;
  GgmlType type;
  int64_t rows, n;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Core cycles per second: a chain of 1-cycle dependent adds the compiler
// cannot fold (an empty asm keeps each add); the fastest of 5 runs, since
// time taken by other processes only slows a run down.
double MeasureGhz() {
  constexpr int64_t kIters = 100'000'000;
  std::vector<double> ghz;
  for (int r = 0; r < 5; ++r) {
    uint64_t x = 1;
    Stopwatch sw;
    for (int64_t i = 0; i < kIters; ++i) {
      x += static_cast<uint64_t>(i);
      asm volatile("" : "+r"(x));
    }
    ghz.push_back(static_cast<double>(kIters) / sw.ElapsedSeconds() * 1e-9);
  }
  return *std::max_element(ghz.begin(), ghz.end());
}

// Random blocks with sane scales: the kernels' speed does not depend on the
// values, but NaN/Inf halves would be unusual work for the float units.
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t rows, int64_t n, std::mt19937_64& rng) {
  const TypeInfo& ti = GetTypeInfo(type);
  const size_t bb = static_cast<size_t>(ti.block_bytes);
  std::vector<uint8_t> w(static_cast<size_t>(rows * (n / ti.block_size)) * bb);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const size_t d_off = type == GgmlType::kQ6_K ? 208 : 0;
  const int halves = type == GgmlType::kQ6_K ? 1 : 2;
  for (size_t off = 0; off < w.size(); off += bb) {
    for (int h = 0; h < halves; ++h) {
      const uint16_t d = cpu::FloatToHalf(1e-3f * static_cast<float>(1 + rng() % 8));
      std::memcpy(&w[off + d_off + 2 * h], &d, 2);
    }
  }
  return w;
}

void Run(Isa isa, const Shape& s, int64_t ncols, int repeats, double peak_gmacs) {
  const cpu::KernelTable* t = cpu::KernelsFor(isa);
  const cpu::TypeKernels& k = *t->For(s.type);
  std::mt19937_64 rng(77);
  const size_t row_bytes = static_cast<size_t>(s.n / GetTypeInfo(s.type).block_size) *
                           static_cast<size_t>(GetTypeInfo(s.type).block_bytes);
  const std::vector<uint8_t> w = RandomWeights(s.type, s.rows, s.n, rng);
  const size_t stride = k.act_bytes(s.n);
  std::vector<uint8_t> acts(stride * static_cast<size_t>(ncols));
  std::vector<float> x(static_cast<size_t>(s.n)), y(static_cast<size_t>(s.rows * ncols));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t c = 0; c < ncols; ++c) {
    for (float& v : x) v = normal(rng);
    k.quantize_act(x.data(), s.n, acts.data() + c * stride);
  }
  // Alternating: the full call, 4-column calls, matvec per column (8 of them).
  constexpr int64_t kSmall = 4, kMatvecCols = 8;
  std::vector<double> mm, m4, mv;
  k.matmul(w.data(), row_bytes, s.n, s.rows, acts.data(), stride, ncols, y.data(), s.rows);
  for (int r = 0; r < repeats; ++r) {
    Stopwatch sw;
    k.matmul(w.data(), row_bytes, s.n, s.rows, acts.data(), stride, ncols, y.data(), s.rows);
    mm.push_back(sw.ElapsedSeconds() / static_cast<double>(ncols));
    sw.Reset();
    for (int64_t c = 0; c < ncols; c += kSmall) {
      k.matmul(w.data(), row_bytes, s.n, s.rows, acts.data() + c * stride, stride,
               std::min(kSmall, ncols - c), y.data() + c * s.rows, s.rows);
    }
    m4.push_back(sw.ElapsedSeconds() / static_cast<double>(ncols));
    sw.Reset();
    const int64_t nv = std::min(ncols, kMatvecCols);
    for (int64_t c = 0; c < nv; ++c) {
      k.matvec(w.data(), row_bytes, s.n, s.rows, acts.data() + c * stride, y.data() + c * s.rows);
    }
    mv.push_back(sw.ElapsedSeconds() / static_cast<double>(nv));
  }
  // GMAC/s from seconds per column.
  const double macs = static_cast<double>(s.rows) * static_cast<double>(s.n);
  const double g_mm = macs / Median(mm) * 1e-9, g_m4 = macs / Median(m4) * 1e-9,
               g_mv = macs / Median(mv) * 1e-9;
  std::printf("| %s | %s | %s | %lld | %.1f | %.1f | %.1f | %.1f %% | %.1f %% |\n", IsaName(isa),
              TypeName(s.type), s.name, static_cast<long long>(ncols), g_mm, g_m4, g_mv,
              100.0 * g_mm / peak_gmacs, 100.0 * g_m4 / peak_gmacs);
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  int64_t ncols = 64;
  int repeats = 7;
  int ports = 2;  // dot instructions issued per cycle (2 on server cores with two 512-bit FMAs)
  const char* only_isa = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cols" && i + 1 < argc) {
      ncols = std::atoll(argv[++i]);
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--isa" && i + 1 < argc) {
      only_isa = argv[++i];
    } else if (a == "--ports" && i + 1 < argc) {
      ports = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--cols N] [--repeats N] [--isa ISA] [--ports N]\n", argv[0]);
      return 2;
    }
  }
  if (ncols < 1 || repeats < 1 || ports < 1) return 2;
  const double ghz = MeasureGhz();
  std::printf("CPU: %s; clock %.2f GHz (dependent-add chain); %d dot instructions per cycle\n\n",
              GetCpuFeatures().brand.c_str(), ghz, ports);
  std::printf(
      "| isa | type | shape | cols | matmul GMAC/s | 4-col calls GMAC/s | matvec GMAC/s | "
      "matmul of ceiling | 4-col of ceiling |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  const Shape kShapes[] = {{"8960x1536", GgmlType::kQ4_K, 8960, 1536},
                           {"1536x8960", GgmlType::kQ6_K, 1536, 8960},
                           {"1536x8960", GgmlType::kQ4_K, 1536, 8960},
                           {"1536x1536", GgmlType::kQ4_K, 1536, 1536}};
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (cpu::KernelsFor(isa) == nullptr) continue;
    if (only_isa != nullptr && std::strcmp(only_isa, IsaName(isa)) != 0) continue;
    // MACs per dot instruction: 16-bit pairs, 2 per 32-bit lane.
    const double per_instr = isa == Isa::kAvx2 ? 16.0 : 32.0;
    // Without VNNI a dot is vpmaddwd + vpaddd on the same ports: half the rate.
    const double rate = isa == Isa::kAvx512Vnni ? ports : ports / 2.0;
    const double peak = per_instr * rate * ghz;
    for (const Shape& s : kShapes) Run(isa, s, ncols, repeats, peak);
  }
  return 0;
}

}  // namespace
}  // namespace kx

int main(int argc, char** argv) { return kx::Main(argc, argv); }
