// Prefill matmul microbenchmark: GMAC/s of each ISA's matmul on a model's
// prefill shapes (--shapes qwen: Qwen2.5-1.5B Q4_K_M's Q4_K gate/up and QKV,
// Q6_K down; gemma: Gemma 3 270M Q4_K_M's Q5_0 gate/up and Q, Q8_0 V, Q6_K
// down; smollm: SmolLM2-135M Q4_1) for a batch of columns, one thread, against the same ISA's
// matvec run per column and in calls of 4 columns (below kGemmMinCols: the lane / block tiles that
// ran every matmul before kquant_gemm.h / legacy_gemm.h), and against the ceiling of the dot
// instruction the ISA's kernels use (16-bit products: vpdpwssd zmm, 32 MACs
// per instruction; vpmaddwd + vpaddd zmm, 32; vpmaddwd + vpaddd ymm, 16),
// measured here on independent accumulators.
//
//   bench_matmul [--cols N] [--repeats N] [--isa ISA] [--shapes qwen|gemma|smollm]
#include <immintrin.h>

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

// The ceiling: the dot instruction's own throughput, measured on 12
// independent accumulators (no loads, no dependencies beyond each
// accumulator's chain), in MACs per second; the median of many ~1 ms runs.
// The accumulators start from different values and each is laundered through
// an empty asm every step: with equal starts GCC merged the 12 identical chains
// into one (CSE), and the probe timed one chain's latency while counting 12
// chains' MACs — ~1.35× the real ymm ceiling (90 vs 67 GMAC/s here).
// Each probe is compiled for its ISA by a target attribute and runs only where
// the CPU has that ISA (the caller checks).
#define KX_DOT_CHAINS(T, OP)                                                                  \
  for (int64_t i = 0; i < n; ++i) {                                                           \
    a0 = OP(a0, x), a1 = OP(a1, x), a2 = OP(a2, x), a3 = OP(a3, x), a4 = OP(a4, x);           \
    a5 = OP(a5, x), a6 = OP(a6, x), a7 = OP(a7, x), a8 = OP(a8, x), a9 = OP(a9, x);           \
    a10 = OP(a10, x), a11 = OP(a11, x);                                                       \
    asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));            \
    asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(x)); \
  }                                                                                           \
  asm volatile("" ::"v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5), "v"(a6), "v"(a7),   \
               "v"(a8), "v"(a9), "v"(a10), "v"(a11))
constexpr int kChains = 12;

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void ProbeVnni(int64_t n) {
  __m512i x = _mm512_set1_epi32(0x00030005);
  __m512i a0 = _mm512_set1_epi32(1), a1 = _mm512_set1_epi32(2), a2 = _mm512_set1_epi32(3),
          a3 = _mm512_set1_epi32(4), a4 = _mm512_set1_epi32(5), a5 = _mm512_set1_epi32(6),
          a6 = _mm512_set1_epi32(7), a7 = _mm512_set1_epi32(8), a8 = _mm512_set1_epi32(9),
          a9 = _mm512_set1_epi32(10), a10 = _mm512_set1_epi32(11), a11 = _mm512_set1_epi32(12);
#define KX_OP(a, v) _mm512_dpwssd_epi32(a, v, v)
  KX_DOT_CHAINS(__m512i, KX_OP);
#undef KX_OP
}
// vpmaddwd + vpaddd; the product depends on the accumulator, so it is not
// hoisted: latency 6 per chain, 12 chains allow 2 pairs per cycle.
__attribute__((target("avx512f,avx512bw"))) void ProbeAvx512(int64_t n) {
  __m512i x = _mm512_set1_epi32(0x00030005);
  __m512i a0 = _mm512_set1_epi32(1), a1 = _mm512_set1_epi32(2), a2 = _mm512_set1_epi32(3),
          a3 = _mm512_set1_epi32(4), a4 = _mm512_set1_epi32(5), a5 = _mm512_set1_epi32(6),
          a6 = _mm512_set1_epi32(7), a7 = _mm512_set1_epi32(8), a8 = _mm512_set1_epi32(9),
          a9 = _mm512_set1_epi32(10), a10 = _mm512_set1_epi32(11), a11 = _mm512_set1_epi32(12);
#define KX_OP(a, v) _mm512_add_epi32(a, _mm512_madd_epi16(a, v))
  KX_DOT_CHAINS(__m512i, KX_OP);
#undef KX_OP
}
__attribute__((target("avx2"))) void ProbeAvx2(int64_t n) {
  __m256i x = _mm256_set1_epi32(0x00030005);
  __m256i a0 = _mm256_set1_epi32(1), a1 = _mm256_set1_epi32(2), a2 = _mm256_set1_epi32(3),
          a3 = _mm256_set1_epi32(4), a4 = _mm256_set1_epi32(5), a5 = _mm256_set1_epi32(6),
          a6 = _mm256_set1_epi32(7), a7 = _mm256_set1_epi32(8), a8 = _mm256_set1_epi32(9),
          a9 = _mm256_set1_epi32(10), a10 = _mm256_set1_epi32(11), a11 = _mm256_set1_epi32(12);
#define KX_OP(a, v) _mm256_add_epi32(a, _mm256_madd_epi16(a, v))
  KX_DOT_CHAINS(__m256i, KX_OP);
#undef KX_OP
}
#undef KX_DOT_CHAINS

double PeakGmacs(Isa isa) {
  constexpr int64_t kIters = 40'000;
  void (*probe)(int64_t) = isa == Isa::kAvx512Vnni ? &ProbeVnni
                           : isa == Isa::kAvx512   ? &ProbeAvx512
                                                   : &ProbeAvx2;
  const double macs_per_op = isa == Isa::kAvx2 ? 16.0 : 32.0;  // 16-bit pairs per instruction
  std::vector<double> g;
  for (int r = 0; r < 201; ++r) {
    Stopwatch sw;
    probe(kIters);
    g.push_back(static_cast<double>(kIters * kChains) * macs_per_op / sw.ElapsedSeconds() * 1e-9);
  }
  return Median(g);
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
  // Alternating per slice of rows (256 × 1536 weights × 64 columns of work or
  // 32 rows: well under a scheduler time slice, so on a shared machine most
  // samples run undisturbed; the median of many): the full call, 4-column
  // calls, matvec per column (8 columns).
  constexpr int64_t kSmall = 4, kMatvecCols = 8;
  constexpr int64_t kSliceMacs = int64_t{256} * 1536 * 64;
  const int64_t kSliceRows =
      std::min(s.rows, std::max<int64_t>(32, kSliceMacs / (s.n * ncols) / 32 * 32));
  std::vector<double> mm, m4, mv;  // seconds per row and column
  k.matmul(w.data(), row_bytes, s.n, s.rows, acts.data(), stride, ncols, y.data(), s.rows);
  for (int r = 0; r < repeats; ++r) {
    for (int64_t r0 = 0; r0 + kSliceRows <= s.rows; r0 += kSliceRows) {
      const uint8_t* ws = w.data() + r0 * row_bytes;
      const double per = static_cast<double>(kSliceRows * ncols);
      Stopwatch sw;
      k.matmul(ws, row_bytes, s.n, kSliceRows, acts.data(), stride, ncols, y.data() + r0, s.rows);
      mm.push_back(sw.ElapsedSeconds() / per);
      sw.Reset();
      for (int64_t c = 0; c < ncols; c += kSmall) {
        k.matmul(ws, row_bytes, s.n, kSliceRows, acts.data() + c * stride, stride,
                 std::min(kSmall, ncols - c), y.data() + c * s.rows + r0, s.rows);
      }
      m4.push_back(sw.ElapsedSeconds() / per);
      sw.Reset();
      const int64_t nv = std::min(ncols, kMatvecCols);
      for (int64_t c = 0; c < nv; ++c) {
        k.matvec(ws, row_bytes, s.n, kSliceRows, acts.data() + c * stride,
                 y.data() + c * s.rows + r0);
      }
      mv.push_back(sw.ElapsedSeconds() / static_cast<double>(kSliceRows * nv));
    }
  }
  const double macs = static_cast<double>(s.n);  // per row and column
  const double g_mm = macs / Median(mm) * 1e-9, g_m4 = macs / Median(m4) * 1e-9,
               g_mv = macs / Median(mv) * 1e-9;
  std::printf("| %s | %s | %s | %lld | %.1f | %.1f | %.1f | %.1f | %.1f %% | %.1f %% |\n",
              IsaName(isa), TypeName(s.type), s.name, static_cast<long long>(ncols), g_mm, g_m4,
              g_mv, peak_gmacs, 100.0 * g_mm / peak_gmacs, 100.0 * g_m4 / peak_gmacs);
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  int64_t ncols = 64;
  int repeats = 7;
  const char* only_isa = nullptr;
  std::string shapes = "qwen";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cols" && i + 1 < argc) {
      ncols = std::atoll(argv[++i]);
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--isa" && i + 1 < argc) {
      only_isa = argv[++i];
    } else if (a == "--shapes" && i + 1 < argc) {
      shapes = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--cols N] [--repeats N] [--isa ISA] [--shapes qwen|gemma|smollm]\n",
                   argv[0]);
      return 2;
    }
  }
  // Rows × n (n: the input width).
  const std::vector<Shape> kQwen = {{"8960x1536", GgmlType::kQ4_K, 8960, 1536},
                                    {"1536x8960", GgmlType::kQ6_K, 1536, 8960},
                                    {"1536x8960", GgmlType::kQ4_K, 1536, 8960},
                                    {"1536x1536", GgmlType::kQ4_K, 1536, 1536}};
  // Gemma's 640 is not a multiple of 256: gate, up, Q, K are Q5_0 and V Q8_0.
  const std::vector<Shape> kGemma = {{"2048x640", GgmlType::kQ5_0, 2048, 640},
                                     {"1024x640", GgmlType::kQ5_0, 1024, 640},
                                     {"256x640", GgmlType::kQ8_0, 256, 640},
                                     {"640x2048", GgmlType::kQ6_K, 640, 2048}};
  const std::vector<Shape> kSmol = {{"1536x576", GgmlType::kQ4_1, 1536, 576},
                                    {"576x1536", GgmlType::kQ4_1, 576, 1536}};
  const std::vector<Shape>* chosen = shapes == "qwen"     ? &kQwen
                                     : shapes == "gemma"  ? &kGemma
                                     : shapes == "smollm" ? &kSmol
                                                          : nullptr;
  if (ncols < 1 || repeats < 1 || chosen == nullptr) return 2;
  std::printf(
      "CPU: %s; ceiling: the ISA's dot instruction on independent accumulators "
      "(vpdpwssd zmm; vpmaddwd + vpaddd zmm; vpmaddwd + vpaddd ymm), measured here\n\n",
      GetCpuFeatures().brand.c_str());
  std::printf(
      "| isa | type | shape | cols | matmul GMAC/s | 4-col calls GMAC/s | matvec GMAC/s | "
      "ceiling GMAC/s | matmul of ceiling | 4-col of ceiling |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (cpu::KernelsFor(isa) == nullptr) continue;
    if (only_isa != nullptr && std::strcmp(only_isa, IsaName(isa)) != 0) continue;
    const double peak = PeakGmacs(isa);
    for (const Shape& s : *chosen) Run(isa, s, ncols, repeats, peak);
  }
  return 0;
}

}  // namespace
}  // namespace kx

int main(int argc, char** argv) { return kx::Main(argc, argv); }
