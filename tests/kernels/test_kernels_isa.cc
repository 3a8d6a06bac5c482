// Every SIMD table the CPU can run, function by function, against the scalar
// reference on seeded random data.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kquants.h"
#include "test_util.h"

namespace kx::test {
namespace {

using cpu::KernelTable;
using cpu::TypeKernels;

constexpr GgmlType kTypes[] = {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kF16,  GgmlType::kBF16,
                               GgmlType::kF32,  GgmlType::kQ4_0, GgmlType::kQ5_0, GgmlType::kQ5_1,
                               GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                               GgmlType::kQ6_K};
constexpr Isa kSimdIsas[] = {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr float kPoison = -7.77e33f;  // written nowhere by a correct kernel
constexpr int kGuard = 16;            // sentinel floats after every output

std::vector<int64_t> SizesFor(GgmlType type) {
  // 1, 2, odd super-blocks; the model's n_ff; past several 16-super-block
  // chunks of the lane-order Q4_K / Q5_K / Q6_K kernels (y written, then added to).
  if (IsKQuant(type)) return {256, 512, 768, 1536, 12800};
  if (IsQuantized(type)) return {32, 64, 96, 576, 1536};  // 1, 2, odd and the model's blocks
  return {1, 7, 16, 33, 576};
}

// Output buffer: `used` floats poisoned, then kGuard sentinels.
std::vector<float> Poisoned(size_t used) { return std::vector<float>(used + kGuard, kPoison); }

void CheckGuard(const std::vector<float>& y, size_t used) {
  for (size_t i = used; i < y.size(); ++i) REQUIRE(y[i] == kPoison);
}

// Activations of ±3, so every q is ±32767: random signs (sign 0), else all of `sign`.
std::vector<float> ExtremeActs(int64_t n, float sign, std::mt19937_64& rng) {
  std::vector<float> x(n);
  for (float& v : x) v = sign != 0.0f ? 3.0f * sign : (rng() & 1) ? 3.0f : -3.0f;
  return x;
}

// k's matvec of `rows` rows of `w` with `x` quantized, each output against the float64 dot
// of the weights and activations as stored, within DotErrorBound.
void CheckMatvecExact(const TypeKernels& k, const std::vector<uint8_t>& w, int64_t rows,
                      const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t rb = RowBytes(k.type, n);
  std::vector<uint8_t> act(k.act_bytes(n));
  k.quantize_act(x.data(), n, act.data());
  std::vector<float> y = Poisoned(rows);
  k.matvec(w.data(), rb, n, rows, act.data(), y.data());
  CheckGuard(y, rows);
  for (int64_t r = 0; r < rows; ++r) {
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += WeightAt(k.type, w.data() + r * rb, i) * ActAt(k.type, act.data(), i);
    }
    REQUIRE(std::fabs(y[r] - exact) <= DotErrorBound(k.type, w.data() + r * rb, n, act.data()));
  }
}

TEST_CASE("kernel tables report their ISA and cover the supported types", "[kernels][isa]") {
  const KernelTable* scalar = cpu::KernelsFor(Isa::kScalar);
  REQUIRE(scalar != nullptr);
  CHECK(scalar->isa == Isa::kScalar);
  for (GgmlType t : kTypes) CHECK(cpu::IsSupportedWeightType(t));
  // Types outside issue 3's list stay unsupported (the model loader refuses them by name).
  CHECK_FALSE(cpu::IsSupportedWeightType(GgmlType::kIQ4_NL));
  CHECK_FALSE(cpu::IsSupportedWeightType(GgmlType::kTQ1_0));
  CHECK_FALSE(cpu::IsSupportedWeightType(GgmlType::kQ8_1));
  CHECK(scalar->For(static_cast<GgmlType>(1000)) == nullptr);
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    const bool runnable = static_cast<int>(isa) <= static_cast<int>(GetCpuFeatures().BestIsa());
    CHECK((t != nullptr) == runnable);
    if (t == nullptr) continue;
    CHECK(t->isa == isa);
    for (GgmlType ty : kTypes) {
      const TypeKernels* k = t->For(ty);
      REQUIRE(k != nullptr);
      CHECK(k->type == ty);
    }
  }
  CHECK(cpu::Kernels().isa == SelectedIsa());
}

TEST_CASE("quantize_act and dequantize are identical on every ISA", "[kernels][isa]") {
  auto rng = SeededRng(101);
  const KernelTable* ref = cpu::KernelsFor(Isa::kScalar);
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : kTypes) {
      for (int64_t n : SizesFor(ty)) {
        INFO(IsaName(isa) << " " << TypeName(ty) << " n=" << n);
        const TypeKernels* k = t->For(ty);
        const TypeKernels* r = ref->For(ty);
        REQUIRE(k->act_bytes(n) == r->act_bytes(n));
        const std::vector<float> x = RandomActs(n, rng);
        std::vector<uint8_t> a(k->act_bytes(n) + kGuard, 0xA5), b(a);
        k->quantize_act(x.data(), n, a.data());
        r->quantize_act(x.data(), n, b.data());
        REQUIRE(a == b);  // byte-identical, sentinels included
        for (int g = 0; g < kGuard; ++g) REQUIRE(a[k->act_bytes(n) + g] == 0xA5);
        // Dequantization is exact in every implementation.
        const std::vector<uint8_t> w = RandomRows(ty, n, 1, rng);
        std::vector<float> d0 = Poisoned(n), d1 = Poisoned(n);
        k->dequantize(w.data(), d0.data(), n);
        r->dequantize(w.data(), d1.data(), n);
        REQUIRE(std::memcmp(d0.data(), d1.data(), d0.size() * sizeof(float)) == 0);
        CheckGuard(d0, n);
      }
    }
  }
}

// The SIMD quantizers (AVX-512's is vectorized) on the inputs where a
// different operation order would show: all-zero, NaN, ±inf, subnormal and
// huge blocks, values landing exactly on a half step, and -0.
TEST_CASE("quantize_act is identical on every ISA at the edges", "[kernels][isa]") {
  auto rng = SeededRng(102);
  const KernelTable* ref = cpu::KernelsFor(Isa::kScalar);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float sub = std::numeric_limits<float>::denorm_min();
  std::vector<std::vector<float>> blocks;
  blocks.push_back(std::vector<float>(32, 0.0f));
  blocks.push_back(std::vector<float>(32, -0.0f));
  std::vector<float> b = RandomActs(32, rng);
  b[3] = nan;
  blocks.push_back(b);
  b = RandomActs(32, rng);
  b[7] = inf;
  blocks.push_back(b);
  b = RandomActs(32, rng);
  b[0] = -inf;
  b[1] = inf;
  blocks.push_back(b);
  blocks.push_back(std::vector<float>(32, nan));
  b.assign(32, sub);
  b[5] = -3 * sub;
  blocks.push_back(b);
  b = RandomActs(32, rng);
  for (float& v : b) v *= 3e37f;
  blocks.push_back(b);
  // amax 32767 → d = 1: k + 0.5 lands on a tie, rounded to even.
  b.assign(32, 0.0f);
  b[0] = 32767.0f;
  for (int i = 1; i < 32; ++i) b[i] = static_cast<float>(i * 97 % 2000) - 1000.5f;
  blocks.push_back(b);
  std::vector<float> x;
  for (const auto& blk : blocks) x.insert(x.end(), blk.begin(), blk.end());
  const auto n = static_cast<int64_t>(x.size());
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K}) {
      INFO(IsaName(isa) << " " << TypeName(ty));
      const TypeKernels* k = t->For(ty);
      const TypeKernels* r = ref->For(ty);
      const int64_t m = ty == GgmlType::kQ4_K ? 256 : n;  // K-quants take 256-element rows
      std::vector<uint8_t> a(k->act_bytes(m) + kGuard, 0xA5), c(a);
      k->quantize_act(x.data(), m, a.data());
      r->quantize_act(x.data(), m, c.data());
      REQUIRE(a == c);
    }
  }
}

// TypeKernels::quantize_act's contract: activations are per 32-element block, end to end, so
// a vector prepared in pieces (as the decode graph prepares FFN down's input, a piece per
// thread) has the bytes of the vector prepared whole.
TEST_CASE("quantize_act in 32-element pieces writes the whole vector's bytes", "[kernels][isa]") {
  auto rng = SeededRng(103);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : kTypes) {
      const int64_t n = 768;  // three K-quant super-blocks
      INFO(IsaName(isa) << " " << TypeName(ty));
      const TypeKernels* k = t->For(ty);
      REQUIRE(k->act_bytes(n) == static_cast<size_t>(n / cpu::kQ16ABlock) * k->act_bytes(32));
      const std::vector<float> x = RandomActs(n, rng);
      std::vector<uint8_t> whole(k->act_bytes(n) + kGuard, 0xA5), pieces(whole);
      k->quantize_act(x.data(), n, whole.data());
      for (int64_t b = 0; b < n;) {
        const int64_t e = std::min<int64_t>(n, b + cpu::kQ16ABlock * (1 + rng() % 9));
        k->quantize_act(x.data() + b, e - b, pieces.data() + k->act_bytes(b));
        b = e;
      }
      REQUIRE(whole == pieces);  // sentinels included
    }
  }
}

// matvec and matmul vs the scalar matvec. Tolerance: DotErrorBound (both sides
// round within it, so the difference is bounded by twice it). matmul's column
// c must equal the same ISA's matvec on column c bit for bit (every row is
// computed by the same per-row code whatever the tiling), except the matmul
// on many columns (HasGemm; test_kquant_gemm.cc), which is held to the bound.
TEST_CASE("matvec and matmul match the scalar reference", "[kernels][isa]") {
  auto rng = SeededRng(202);
  const KernelTable* ref = cpu::KernelsFor(Isa::kScalar);
  const int64_t kRowCounts[] = {1, 3, 4, 5, 7, 13};
  const int64_t kColCounts[] = {1, 2, 5, 9};
  std::vector<const KernelTable*> tables = {ref};
  for (Isa isa : kSimdIsas) {
    if (const KernelTable* t = cpu::KernelsFor(isa)) tables.push_back(t);
  }
  for (const KernelTable* t : tables) {
    for (GgmlType ty : kTypes) {
      const TypeKernels* k = t->For(ty);
      const TypeKernels* r = ref->For(ty);
      for (int64_t n : SizesFor(ty)) {
        for (int64_t rows : kRowCounts) {
          INFO(IsaName(t->isa) << " " << TypeName(ty) << " n=" << n << " rows=" << rows);
          const size_t rb = RowBytes(ty, n);
          const std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);
          const std::vector<float> x = RandomActs(n, rng);
          std::vector<uint8_t> act(k->act_bytes(n));
          k->quantize_act(x.data(), n, act.data());

          std::vector<float> y = Poisoned(rows), y_ref = Poisoned(rows);
          k->matvec(w.data(), rb, n, rows, act.data(), y.data());
          r->matvec(w.data(), rb, n, rows, act.data(), y_ref.data());
          CheckGuard(y, rows);
          for (int64_t i = 0; i < rows; ++i) {
            const double bound = 2 * DotErrorBound(ty, w.data() + i * rb, n, act.data());
            REQUIRE(std::isfinite(y[i]));
            REQUIRE(std::fabs(static_cast<double>(y[i]) - y_ref[i]) <= bound);
          }

          const int64_t ncols = kColCounts[rng() % std::size(kColCounts)];
          const size_t stride = k->act_bytes(n) + 8 * (rng() % 3);  // padded strides too
          const int64_t ldy = rows + static_cast<int64_t>(rng() % 3);
          std::vector<uint8_t> acts(stride * ncols);
          std::vector<std::vector<float>> xs;
          for (int64_t c = 0; c < ncols; ++c) {
            xs.push_back(RandomActs(n, rng));
            k->quantize_act(xs.back().data(), n, acts.data() + c * stride);
          }
          std::vector<float> ym = Poisoned(ldy * ncols);
          k->matmul(w.data(), rb, n, rows, acts.data(), stride, ncols, ym.data(), ldy);
          CheckGuard(ym, ldy * ncols);
          // Matmuls on kGemmMinCols columns or more sum in another order
          // (kquant_gemm.h, legacy_gemm.h): against the reference instead.
          const bool gemm = t->isa != Isa::kScalar && HasGemm(ty) && ncols >= cpu::kGemmMinCols;
          for (int64_t c = 0; c < ncols; ++c) {
            const uint8_t* act_c = acts.data() + c * stride;
            std::vector<float> yc = Poisoned(rows);
            (gemm ? r : k)->matvec(w.data(), rb, n, rows, act_c, yc.data());
            for (int64_t i = 0; i < rows; ++i) {
              if (gemm) {
                const double bound = 2 * DotErrorBound(ty, w.data() + i * rb, n, act_c);
                REQUIRE(std::fabs(static_cast<double>(ym[c * ldy + i]) - yc[i]) <= bound);
              } else {
                REQUIRE(ym[c * ldy + i] == yc[i]);
              }
            }
            for (int64_t i = rows; i < ldy; ++i) REQUIRE(ym[c * ldy + i] == kPoison);  // gaps
          }
        }
      }
    }
  }
}

// The integer range at its limit: every Q8_0 weight -128 or 127 and every
// activation ±32767 (|Σ| per block = 32·128·32767 = 2^27 in the scalar int32
// sum; 8 such products per SIMD lane). All ISAs must agree with the exact
// float64 value within DotErrorBound.
TEST_CASE("quantized matvec is exact at the extremes of the int16 range", "[kernels][isa]") {
  auto rng = SeededRng(707);
  const int64_t n = 96, rows = 5;  // 3 blocks: a pair and the odd tail
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : {GgmlType::kQ4_1, GgmlType::kQ8_0}) {
      INFO(IsaName(isa) << " " << TypeName(ty));
      const TypeKernels* k = t->For(ty);
      std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);
      const size_t block_bytes = ty == GgmlType::kQ8_0 ? 34 : 20;
      for (size_t off = 0; off < w.size(); off += block_bytes) {
        if (ty == GgmlType::kQ8_0) {
          const uint8_t v = (rng() & 1) ? 0x80 : 0x7f;
          std::memset(&w[off + 2], v, 32);
        } else {
          std::memset(&w[off + 4], 0xff, 16);  // all nibbles 15
        }
      }
      CheckMatvecExact(*k, w, rows, ExtremeActs(n, (rng() & 1) ? 1.0f : -1.0f, rng));
    }
  }
}

// K-quants at their integer limits: Q6_K's |sc·q| = 128·32 = 4096 (scales
// -128, q = -32), the largest product with ±32767 activations any type
// makes (2 per vpmaddwd lane: < 2^28; the scalar reference sums in int64);
// the others with every scale, min and quant bit set. Activations of random
// signs, then all of one sign (the largest int32 sums: AVX2 Q4_K sums 256·q·x
// over 4 products before one shift). Against float64.
TEST_CASE("K-quant matvec is exact at the extremes of the int16 range", "[kernels][isa]") {
  auto rng = SeededRng(708);
  const int64_t n = 768, rows = 5;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty :
         {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
      INFO(IsaName(isa) << " " << TypeName(ty));
      const TypeKernels* k = t->For(ty);
      const size_t bb = static_cast<size_t>(GetTypeInfo(ty).block_bytes);
      std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);  // d, dmin from here
      const std::vector<uint8_t> keep = w;
      for (size_t off = 0; off < w.size(); off += bb) {
        if (ty == GgmlType::kQ6_K) {
          std::memset(&w[off], 0x00, 192);       // ql, qh: q = -32
          std::memset(&w[off + 192], 0x80, 16);  // scales: -128
        } else {
          std::memset(&w[off], 0xff, bb);
          // Restore d (and dmin): their offsets per layout.
          const size_t d_off = ty == GgmlType::kQ2_K ? 80 : ty == GgmlType::kQ3_K ? 108 : 0;
          std::memcpy(&w[off + d_off], &keep[off + d_off], ty == GgmlType::kQ3_K ? 2 : 4);
        }
      }
      for (float sign : {0.0f, 1.0f, -1.0f}) {  // 0: random signs
        INFO("sign " << sign);
        CheckMatvecExact(*k, w, rows, ExtremeActs(n, sign, rng));
      }
    }
  }
}

// Q5_K's fifth bit (bit j of qh[b] for element 32j + b) at the limits: every scale, min
// and nibble at its maximum and qh in patterns that tell the blocks and the bytes apart
// (random; one block's bit only, for each block; alternating blocks), so a bit taken from
// the wrong block, byte or position changes q by 16 where the sums are largest. Activations
// ±32767 of random signs, then all of one sign. Against float64, every ISA.
TEST_CASE("Q5_K matvec is exact with its fifth bits at the limits", "[kernels][isa]") {
  auto rng = SeededRng(711);
  const GgmlType ty = GgmlType::kQ5_K;
  const int64_t n = 768, rows = 4;
  const size_t bb = cpu::Q5KLayout::kBlockBytes;
  for (int pattern = 0; pattern < 11; ++pattern) {  // 0: random, 1-8: block j = pattern − 1
    std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);  // d, dmin from here
    for (size_t off = 0; off < w.size(); off += bb) {
      std::memset(&w[off + 4], 0xff, 12);                     // scales, mins: 63
      std::memset(&w[off + cpu::Q5KLayout::kQs], 0xff, 128);  // nibbles: 15
      for (size_t b = 0; b < 32; ++b) {
        const uint8_t bits = pattern == 0   ? static_cast<uint8_t>(rng())
                             : pattern <= 8 ? static_cast<uint8_t>(1u << (pattern - 1))
                             : pattern == 9 ? uint8_t{0x55}
                                            : uint8_t{0xaa};
        w[off + cpu::Q5KLayout::kQh + b] = bits;
      }
    }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
      const KernelTable* t = cpu::KernelsFor(isa);
      if (t == nullptr) continue;
      const TypeKernels* k = t->For(ty);
      for (float sign : {0.0f, 1.0f, -1.0f}) {  // 0: random signs
        INFO(IsaName(isa) << " qh pattern " << pattern << " sign " << sign);
        CheckMatvecExact(*k, w, rows, ExtremeActs(n, sign, rng));
      }
    }
  }
}

// Variants that a table holds only on some CPUs (the VNNI table takes the
// VBMI Q4_1 kernels where the CPU has VBMI, the generic ones elsewhere):
// each that this CPU runs, against the scalar reference as above.
TEST_CASE("CPU-dependent kernel variants match the scalar reference", "[kernels][isa]") {
  auto rng = SeededRng(909);
  const bool vnni = cpu::KernelsFor(Isa::kAvx512Vnni) != nullptr;
  const bool vbmi = vnni && __builtin_cpu_supports("avx512vbmi");
  struct Variant {
    const char* name;
    const TypeKernels* k;
    bool runnable;
  };
  const Variant kVariants[] = {{"avx512vnni Q4_1 generic", &cpu::avx512::kQ4_1Vnni, vnni},
                               {"avx512vnni+vbmi Q4_1", &cpu::avx512::kQ4_1VnniVbmi, vbmi}};
  const TypeKernels* r = cpu::KernelsFor(Isa::kScalar)->For(GgmlType::kQ4_1);
  for (const Variant& v : kVariants) {
    if (!v.runnable) continue;
    for (int64_t n : SizesFor(GgmlType::kQ4_1)) {
      for (int64_t rows : {1, 4, 5, 9}) {
        INFO(v.name << " n=" << n << " rows=" << rows);
        const size_t rb = RowBytes(GgmlType::kQ4_1, n);
        const std::vector<uint8_t> w = RandomRows(GgmlType::kQ4_1, n, rows, rng);
        const int64_t ncols = 1 + static_cast<int64_t>(rng() % 7);
        const size_t stride = v.k->act_bytes(n);
        std::vector<uint8_t> acts(stride * ncols);
        for (int64_t c = 0; c < ncols; ++c) {
          const std::vector<float> x = RandomActs(n, rng);
          v.k->quantize_act(x.data(), n, acts.data() + c * stride);
        }
        std::vector<float> ym = Poisoned(rows * ncols);
        v.k->matmul(w.data(), rb, n, rows, acts.data(), stride, ncols, ym.data(), rows);
        CheckGuard(ym, rows * ncols);
        for (int64_t c = 0; c < ncols; ++c) {
          const uint8_t* act = acts.data() + c * stride;
          std::vector<float> y = Poisoned(rows), y_ref = Poisoned(rows);
          v.k->matvec(w.data(), rb, n, rows, act, y.data());
          r->matvec(w.data(), rb, n, rows, act, y_ref.data());
          CheckGuard(y, rows);
          for (int64_t i = 0; i < rows; ++i) {
            REQUIRE(std::fabs(static_cast<double>(y[i]) - y_ref[i]) <=
                    2 * DotErrorBound(GgmlType::kQ4_1, w.data() + i * rb, n, act));
            REQUIRE(ym[c * rows + i] == y[i]);
          }
        }
      }
    }
  }
}

// The VNNI table's Q4_K and Q5_K run on q bytes and byte-split activations (vpdpbusd,
// avx512/kquant_lanes_vnni.h), the AVX-512 table's on int16 words; its Q6_K on vpdpwssd, the
// AVX-512 one on vpmaddwd + vpaddd. The same int32 lanes and float steps, so every result
// must be bit-identical — on random rows, and at the limits (every 4-, 5- or 6-bit q at its
// maximum, every activation ±32767: low bytes 0x01 / 0xff).
TEST_CASE("VNNI Q4_K, Q5_K and Q6_K equal the AVX-512 ones bit for bit", "[kernels][isa]") {
  const KernelTable* vnni = cpu::KernelsFor(Isa::kAvx512Vnni);
  if (vnni == nullptr) {
    WARN("no AVX-512 VNNI on this CPU: the byte kernel is not built into any table here");
    return;
  }
  auto rng = SeededRng(910);
  for (GgmlType ty : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const TypeKernels* kb = vnni->For(ty);
    const TypeKernels* kw = cpu::KernelsFor(Isa::kAvx512)->For(ty);
    for (int64_t n : SizesFor(ty)) {
      for (int extreme = 0; extreme < 2; ++extreme) {
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
        const int64_t ncols = 1 + static_cast<int64_t>(rng() % 7);  // below kGemmMinCols
        INFO(TypeName(ty) << " n=" << n << " rows=" << rows << " ncols=" << ncols
                          << " extreme=" << extreme);
        const size_t rb = RowBytes(ty, n);
        std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);
        if (extreme && ty == GgmlType::kQ4_K) {
          for (size_t off = 0; off < w.size(); off += cpu::Q4KLayout::kBlockBytes) {
            std::memset(&w[off + cpu::Q4KLayout::kQs], 0xff, 128);
          }
        } else if (extreme && ty == GgmlType::kQ5_K) {
          for (size_t off = 0; off < w.size(); off += cpu::Q5KLayout::kBlockBytes) {
            std::memset(&w[off + cpu::Q5KLayout::kQh], 0xff, 32 + 128);  // qh, qs: every q = 31
          }
        } else if (extreme) {
          for (size_t off = 0; off < w.size(); off += cpu::Q6KLayout::kBlockBytes) {
            std::memset(&w[off + cpu::Q6KLayout::kQl], 0xff, 192);  // ql, qh: every q = 63
          }
        }
        const size_t stride = kb->act_bytes(n);
        REQUIRE(stride == kw->act_bytes(n));
        std::vector<uint8_t> acts(stride * ncols);
        for (int64_t c = 0; c < ncols; ++c) {
          std::vector<float> x = RandomActs(n, rng);
          // ±3 in blocks whose max is 3: q = ±32767 (low byte 0xff / 0x01).
          if (extreme) {
            for (auto& v : x) v = (rng() & 1) ? 3.0f : -3.0f;
          }
          kb->quantize_act(x.data(), n, acts.data() + c * stride);
        }
        std::vector<float> yb = Poisoned(rows * ncols), yw = Poisoned(rows * ncols);
        kb->matmul(w.data(), rb, n, rows, acts.data(), stride, ncols, yb.data(), rows);
        kw->matmul(w.data(), rb, n, rows, acts.data(), stride, ncols, yw.data(), rows);
        CheckGuard(yb, rows * ncols);
        for (int64_t i = 0; i < rows * ncols; ++i) REQUIRE(yb[i] == yw[i]);
        std::vector<float> y1 = Poisoned(rows);
        kb->matvec(w.data(), rb, n, rows, acts.data(), y1.data());
        CheckGuard(y1, rows);
        for (int64_t i = 0; i < rows; ++i) REQUIRE(y1[i] == yw[i]);
      }
    }
  }
}

// A row's result must not depend on how rows are split (threads offset w, y).
TEST_CASE("matvec rows are independent of the split", "[kernels][isa]") {
  auto rng = SeededRng(303);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : kTypes) {
      INFO(IsaName(isa) << " " << TypeName(ty));
      const int64_t n = IsKQuant(ty) ? 768 : 576, rows = 11;
      const size_t rb = RowBytes(ty, n);
      const TypeKernels* k = t->For(ty);
      const std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);
      const std::vector<float> x = RandomActs(n, rng);
      std::vector<uint8_t> act(k->act_bytes(n));
      k->quantize_act(x.data(), n, act.data());
      std::vector<float> whole(rows), split(rows);
      k->matvec(w.data(), rb, n, rows, act.data(), whole.data());
      for (int64_t r0 = 0; r0 < rows;) {
        const int64_t cnt = std::min<int64_t>(rows - r0, 1 + static_cast<int64_t>(rng() % 6));
        k->matvec(w.data() + r0 * rb, rb, n, cnt, act.data(), split.data() + r0);
        r0 += cnt;
      }
      REQUIRE(whole == split);
    }
  }
}

// Vector kernels. dot: the DotErrorBound argument with k = n + 16. axpy: the
// scalar rounds α·x then the sum (2 roundings), SIMD fuses them (1), so they
// differ by ≤ 2u·(|y| + |α·x|) per element. f32_to_f16 is exact on all ISAs.
TEST_CASE("vector kernels match the scalar reference", "[kernels][isa]") {
  auto rng = SeededRng(404);
  const cpu::VecKernels& r = cpu::KernelsFor(Isa::kScalar)->vec;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    const cpu::VecKernels& v = t->vec;
    for (int64_t n : {1, 5, 8, 15, 16, 17, 31, 33, 64, 100, 1000}) {
      INFO(IsaName(isa) << " n=" << n);
      std::vector<float> a(n), b(n), y0(n);
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; ++i) {
        a[i] = normal(rng);
        b[i] = normal(rng);
        y0[i] = normal(rng);
        h[i] = cpu::FloatToHalf(normal(rng));
      }
      double abs16 = 0, abs32 = 0;
      for (int64_t i = 0; i < n; ++i) {
        abs16 += std::fabs(cpu::HalfToFloat(h[i]) * b[i]);
        abs32 += std::fabs(a[i] * b[i]);
      }
      const double k = static_cast<double>(n + 16);
      CHECK(std::fabs(v.dot_f16_f32(h.data(), b.data(), n) -
                      r.dot_f16_f32(h.data(), b.data(), n)) <= 2 * 2 * k * kF32Eps * abs16 + 1e-30);
      CHECK(std::fabs(v.dot_f32(a.data(), b.data(), n) - r.dot_f32(a.data(), b.data(), n)) <=
            2 * 2 * k * kF32Eps * abs32 + 1e-30);

      const float alpha = normal(rng);
      std::vector<float> ya = y0, yr = y0;
      ya.resize(n + kGuard, kPoison);
      v.axpy_f16(alpha, h.data(), ya.data(), n);
      r.axpy_f16(alpha, h.data(), yr.data(), n);
      CheckGuard(ya, n);
      for (int64_t i = 0; i < n; ++i) {
        const double ax = std::fabs(static_cast<double>(alpha) * cpu::HalfToFloat(h[i]));
        REQUIRE(std::fabs(ya[i] - yr[i]) <= 2 * kF32Eps * (std::fabs(y0[i]) + ax) * 2 + 1e-30);
      }

      std::vector<float> src(n);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits = static_cast<uint32_t>(rng());  // any pattern: NaN, inf, subnormal
        if (i % 2) bits = std::bit_cast<uint32_t>(normal(rng) * 1e4f);
        std::memcpy(&src[i], &bits, sizeof bits);
      }
      std::vector<uint16_t> hv(n + kGuard, 0xBEEF), hr(n);
      v.f32_to_f16(src.data(), hv.data(), n);
      r.f32_to_f16(src.data(), hr.data(), n);
      for (int64_t i = 0; i < n; ++i) REQUIRE(hv[i] == hr[i]);
      for (int g = 0; g < kGuard; ++g) REQUIRE(hv[n + g] == 0xBEEF);
    }
  }
}

TEST_CASE("multi-row F16 dot and axpy equal their single-row forms", "[kernels][isa]") {
  auto rng = SeededRng(405);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    const cpu::VecKernels& v = t->vec;
    for (int64_t n : {1, 17, 64, 128}) {
      for (int64_t n_rows : {1, 3, 70}) {
        INFO(IsaName(isa) << " n=" << n << " rows=" << n_rows);
        const size_t stride = static_cast<size_t>(n) + 7;  // rows of a wider KV cache line
        std::vector<uint16_t> rows(stride * n_rows);
        for (auto& h : rows) h = cpu::FloatToHalf(normal(rng));
        std::vector<float> x(n), coeff(n_rows), y0(n);
        for (auto& e : x) e = normal(rng);
        for (auto& e : coeff) e = normal(rng);
        for (auto& e : y0) e = normal(rng);

        std::vector<float> dots(n_rows + kGuard, kPoison);
        v.dot_f16_rows(rows.data(), stride, n_rows, x.data(), n, dots.data());
        CheckGuard(dots, n_rows);
        for (int64_t r = 0; r < n_rows; ++r) {
          REQUIRE(dots[r] == v.dot_f16_f32(rows.data() + r * stride, x.data(), n));
        }
        std::vector<float> y_multi = y0, y_single = y0;
        y_multi.resize(n + kGuard, kPoison);
        v.axpy_f16_rows(coeff.data(), rows.data(), stride, n_rows, y_multi.data(), n);
        CheckGuard(y_multi, n);
        for (int64_t r = 0; r < n_rows; ++r) {
          v.axpy_f16(coeff[r], rows.data() + r * stride, y_single.data(), n);
        }
        for (int64_t i = 0; i < n; ++i) REQUIRE(y_multi[i] == y_single[i]);
      }
    }
  }
}

}  // namespace
}  // namespace kx::test
