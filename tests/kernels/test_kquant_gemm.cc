// The matmul for many columns with rows in vector lanes (K-quants:
// kernels/cpu/kquant_gemm.h; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: legacy_gemm.h), on every
// SIMD table this CPU runs (KernelsFor(isa): AVX2, AVX-512, AVX-512 VNNI on
// one machine): against the scalar reference within its error bound, on row,
// column and width counts that cover the tile, panel and decode-chunk edges;
// the results independent of how rows and columns are split; exact at the
// int32 limit (Q6_K's |sc·q| = 4096, Q8_0's -128, with ±32767 activations).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/cpu/internal.h"
#include "test_util.h"

namespace kx::test {
namespace {

using cpu::KernelTable;
using cpu::TypeKernels;

constexpr GgmlType kGemmTypes[] = {GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                   GgmlType::kQ6_K, GgmlType::kQ4_0, GgmlType::kQ5_0,
                                   GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_1};

// Widths: K-quants 1, 3, 6 super-blocks; legacy types 3 blocks (one short
// decode chunk), Gemma's 640 (2 chunks and a half), 43 blocks (5 chunks and 3).
std::vector<int64_t> GemmSizes(GgmlType ty) {
  if (IsKQuant(ty)) return {256, 768, 1536};
  return {96, 640, 1376};
}
constexpr Isa kSimdIsas[] = {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr float kPoison = -7.77e33f;

struct Case {
  std::vector<uint8_t> w;
  std::vector<uint8_t> acts;
  size_t stride = 0;
};

// DotErrorBound (kernel_test_util.h) for every column of one row, with the
// row's |weight| terms decoded once (they decode a super-block per element).
struct RowBound {
  std::vector<double> abs_w;
  double Bound(GgmlType ty, const uint8_t* act) const {
    double abs_sum = 0;
    for (size_t i = 0; i < abs_w.size(); ++i) {
      abs_sum += abs_w[i] * std::fabs(ActAt(ty, act, static_cast<int64_t>(i)));
    }
    const double k = static_cast<double>(static_cast<int64_t>(abs_w.size()) / 16 + 16 + 4);
    return 2.0 * k * kF32Eps * abs_sum + 1e-30;
  }
};
RowBound MakeRowBound(GgmlType ty, const uint8_t* row, int64_t n) {
  RowBound b;
  for (int64_t i = 0; i < n; ++i) b.abs_w.push_back(AbsTermWeight(ty, row, i));
  return b;
}

Case MakeCase(const TypeKernels* k, GgmlType ty, int64_t n, int64_t rows, int64_t ncols,
              std::mt19937_64& rng) {
  Case c;
  c.w = RandomRows(ty, n, rows, rng);
  c.stride = k->act_bytes(n) + 8 * (rng() % 3);  // padded strides too
  c.acts.assign(c.stride * ncols, 0);
  for (int64_t col = 0; col < ncols; ++col) {
    const std::vector<float> x = RandomActs(n, rng);
    k->quantize_act(x.data(), n, c.acts.data() + col * c.stride);
  }
  return c;
}

TEST_CASE("matmul on many columns matches the scalar reference", "[kernels][gemm]") {
  auto rng = SeededRng(4401);
  // Rows: one partial vector, one AVX-512 vector, a panel plus a ragged one,
  // several panels; columns: the smallest gemm call and ragged 4-column tiles.
  const int64_t kRows[] = {5, 16, 37, 70};
  const int64_t kCols[] = {cpu::kGemmMinCols, 9, 13, 18, 20};
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : kGemmTypes) {
      const TypeKernels* k = t->For(ty);
      const TypeKernels* ref_q = cpu::KernelsFor(Isa::kScalar)->For(ty);
      for (int64_t n : GemmSizes(ty)) {
        const int64_t rows = kRows[rng() % std::size(kRows)];
        const int64_t ncols = kCols[rng() % std::size(kCols)];
        INFO(IsaName(isa) << " " << TypeName(ty) << " n=" << n << " rows=" << rows
                          << " cols=" << ncols);
        const size_t rb = RowBytes(ty, n);
        const Case cs = MakeCase(k, ty, n, rows, ncols, rng);
        const int64_t ldy = rows + 3;
        std::vector<float> ym(static_cast<size_t>(ldy * ncols + 16), kPoison);
        k->matmul(cs.w.data(), rb, n, rows, cs.acts.data(), cs.stride, ncols, ym.data(), ldy);
        for (size_t i = static_cast<size_t>(ldy * ncols); i < ym.size(); ++i) {
          REQUIRE(ym[i] == kPoison);
        }
        std::vector<RowBound> bounds;
        for (int64_t r = 0; r < rows; ++r)
          bounds.push_back(MakeRowBound(ty, cs.w.data() + r * rb, n));
        for (int64_t c = 0; c < ncols; ++c) {
          const uint8_t* act = cs.acts.data() + c * cs.stride;
          std::vector<float> y_ref(rows);
          ref_q->matvec(cs.w.data(), rb, n, rows, act, y_ref.data());
          for (int64_t r = 0; r < rows; ++r) {
            const double bound = 2 * bounds[r].Bound(ty, act);
            const float got = ym[c * ldy + r];
            REQUIRE(std::isfinite(got));
            REQUIRE(std::fabs(static_cast<double>(got) - y_ref[r]) <= bound);
          }
          for (int64_t r = rows; r < ldy; ++r) REQUIRE(ym[c * ldy + r] == kPoison);  // gaps
        }

        // The engine splits rows across threads at multiples of 8, and the
        // batch's columns may come in any count ≥ kGemmMinCols: same bits.
        const int64_t split = 8 * (1 + static_cast<int64_t>(rng() % 4)) % rows;
        std::vector<float> ys(static_cast<size_t>(ldy * ncols), kPoison);
        k->matmul(cs.w.data(), rb, n, split, cs.acts.data(), cs.stride, ncols, ys.data(), ldy);
        k->matmul(cs.w.data() + split * rb, rb, n, rows - split, cs.acts.data(), cs.stride, ncols,
                  ys.data() + split, ldy);
        const int64_t c0 = ncols - cpu::kGemmMinCols;  // the last kGemmMinCols columns alone
        std::vector<float> yc(static_cast<size_t>(ldy * cpu::kGemmMinCols), kPoison);
        k->matmul(cs.w.data(), rb, n, rows, cs.acts.data() + c0 * cs.stride, cs.stride,
                  cpu::kGemmMinCols, yc.data(), ldy);
        for (int64_t c = 0; c < ncols; ++c) {
          for (int64_t r = 0; r < rows; ++r) {
            REQUIRE(ys[c * ldy + r] == ym[c * ldy + r]);
            if (c >= c0) REQUIRE(yc[(c - c0) * ldy + r] == ym[c * ldy + r]);
          }
        }
      }
    }
  }
}

// AVX-512 Q4_K / Q5_K / Q6_K matvec (avx512/kquant_lanes.h, KLaneEntry::Matvec) runs whole
// rows, its activations prepared for up to 144 (Q6_K) or 192 (Q4_K, Q5_K) super-blocks at once,
// where the small matmul (below kGemmMinCols columns) runs 16-super-block chunks: a row's sum must
// be the same bits, for one chunk, several and a ragged one (n = 8960: FFN down), and more
// than one prepared span (n = 150 and 200 super-blocks); and within the scalar bound.
TEST_CASE("K-quant matvec over whole rows gives the chunked small matmul's bits",
          "[kernels][gemm]") {
  auto rng = SeededRng(4402);
  for (Isa isa : {Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
      const TypeKernels* k = t->For(ty);
      const TypeKernels* ref_q = cpu::KernelsFor(Isa::kScalar)->For(ty);
      for (int64_t n : {256 * 5, 8960, 256 * 150, 256 * 200}) {
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
        const int64_t ncols = 1 + static_cast<int64_t>(rng() % 3);
        INFO(IsaName(isa) << " " << TypeName(ty) << " n=" << n << " rows=" << rows
                          << " cols=" << ncols);
        const size_t rb = RowBytes(ty, n);
        const Case cs = MakeCase(k, ty, n, rows, ncols, rng);
        std::vector<float> ym(static_cast<size_t>(rows * ncols + 16), kPoison);
        k->matmul(cs.w.data(), rb, n, rows, cs.acts.data(), cs.stride, ncols, ym.data(), rows);
        for (int64_t c = 0; c < ncols; ++c) {
          const uint8_t* act = cs.acts.data() + c * cs.stride;
          std::vector<float> y(static_cast<size_t>(rows + 16), kPoison), y_ref(rows);
          k->matvec(cs.w.data(), rb, n, rows, act, y.data());
          ref_q->matvec(cs.w.data(), rb, n, rows, act, y_ref.data());
          for (size_t i = static_cast<size_t>(rows); i < y.size(); ++i) REQUIRE(y[i] == kPoison);
          for (int64_t r = 0; r < rows; ++r) {
            REQUIRE(y[r] == ym[c * rows + r]);
            const double bound = 2 * DotErrorBound(ty, cs.w.data() + r * rb, n, act);
            REQUIRE(std::fabs(static_cast<double>(y[r]) - y_ref[r]) <= bound);
          }
        }
      }
    }
  }
}

// A whole panel may take a decoder of its own (avx2/kquant_panel.h: Q4_K), a
// ragged one the generic decode: one row at a time must give the panel's bits.
TEST_CASE("matmul's whole-panel decode gives the generic decode's bits", "[kernels][gemm]") {
  auto rng = SeededRng(4403);
  const int64_t rows = 32, ncols = 9;
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : kGemmTypes) {
      if (!IsKQuant(ty)) continue;
      const TypeKernels* k = t->For(ty);
      const int64_t n = 768;
      INFO(IsaName(isa) << " " << TypeName(ty));
      const size_t rb = RowBytes(ty, n);
      const Case cs = MakeCase(k, ty, n, rows, ncols, rng);
      std::vector<float> panel(static_cast<size_t>(rows * ncols), kPoison);
      std::vector<float> single(panel.size(), kPoison);
      k->matmul(cs.w.data(), rb, n, rows, cs.acts.data(), cs.stride, ncols, panel.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        k->matmul(cs.w.data() + r * rb, rb, n, 1, cs.acts.data(), cs.stride, ncols,
                  single.data() + r, rows);
      }
      int64_t nonzero = 0;
      for (size_t i = 0; i < panel.size(); ++i) {
        REQUIRE(panel[i] != kPoison);
        REQUIRE(panel[i] == single[i]);
        nonzero += panel[i] != 0.0f;
      }
      REQUIRE(nonzero > 0);
    }
  }
}

// Every Q6_K scale -128 and q = -32 (|sc·q| = 4096) against activations all
// ±32767 of one sign per block: 32 such products overflow int32, 16 do not
// (the kernel sums halves of a block). The other types at every bit set.
TEST_CASE("matmul on many columns is exact at the extremes of the int16 range", "[kernels][gemm]") {
  auto rng = SeededRng(4402);
  const int64_t n = 512, rows = 19, ncols = 9;
  for (Isa isa : kSimdIsas) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType ty : kGemmTypes) {
      INFO(IsaName(isa) << " " << TypeName(ty));
      const TypeKernels* k = t->For(ty);
      const size_t rb = RowBytes(ty, n);
      const size_t bb = static_cast<size_t>(GetTypeInfo(ty).block_bytes);
      std::vector<uint8_t> w = RandomRows(ty, n, rows, rng);
      const std::vector<uint8_t> keep = w;
      for (size_t off = 0; off < w.size(); off += bb) {
        if (ty == GgmlType::kQ6_K) {
          std::memset(&w[off], 0x00, 192);       // ql, qh: q = -32
          std::memset(&w[off + 192], 0x80, 16);  // scales: -128
        } else if (ty == GgmlType::kQ8_0) {
          std::memset(&w[off + 2], 0x80, 32);  // q = -128
        } else if (!IsKQuant(ty)) {            // every nibble and fifth bit set; d (and m) kept
          std::memset(&w[off + 2], 0xff, bb - 2);
          if (ty == GgmlType::kQ5_1 || ty == GgmlType::kQ4_1) {
            std::memcpy(&w[off + 2], &keep[off + 2], 2);  // m
          }
        } else {
          std::memset(&w[off], 0xff, bb);
          const size_t d_off = ty == GgmlType::kQ3_K ? 108 : 0;
          std::memcpy(&w[off + d_off], &keep[off + d_off], ty == GgmlType::kQ3_K ? 2 : 4);
        }
      }
      std::vector<uint8_t> acts(k->act_bytes(n) * ncols);
      for (int64_t c = 0; c < ncols; ++c) {
        std::vector<float> x(n);
        for (int64_t b = 0; b < n / 32; ++b) {
          const float v = (rng() & 1) ? 3.0f : -3.0f;  // every q = ±32767, one sign per block
          for (int i = 0; i < 32; ++i) x[b * 32 + i] = v;
        }
        k->quantize_act(x.data(), n, acts.data() + c * k->act_bytes(n));
      }
      std::vector<float> y(rows * ncols, kPoison);
      k->matmul(w.data(), rb, n, rows, acts.data(), k->act_bytes(n), ncols, y.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> wr(n);
        for (int64_t i = 0; i < n; ++i) wr[i] = WeightAt(ty, w.data() + r * rb, i);
        const RowBound bound = MakeRowBound(ty, w.data() + r * rb, n);
        for (int64_t c = 0; c < ncols; ++c) {
          const uint8_t* act = acts.data() + c * k->act_bytes(n);
          double exact = 0;
          for (int64_t i = 0; i < n; ++i) exact += wr[i] * ActAt(ty, act, i);
          REQUIRE(std::fabs(y[c * rows + r] - exact) <= bound.Bound(ty, act));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kx::test
