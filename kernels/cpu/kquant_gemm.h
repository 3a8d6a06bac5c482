// K-quant × BlockQ16A matmul for prompt processing (many columns), written
// once over a vector-traits class V (avx512/kquant_gemm.h, avx2/kquant_gemm.h
// supply it; each ISA's source compiles this header with its own flags).
//
// Why not the matvec kernels' tiles (kquant_lanes.h): there every int32 lane
// sums products of one scale group along n, so each super-block of each
// (row, column) pair ends in float work (convert, scale by d·sc and by d_x,
// the min term) and a horizontal sum; with 4 columns per decoded row that is
// about as many float and shuffle operations as dot-product instructions.
// Here a vector's lanes are 16 (AVX-512) or 8 (AVX2) *rows*, and each
// vpdpwssd (vpmaddwd + vpaddd) multiplies one pair of elements of those rows
// by the same pair of one column's activations, broadcast:
//  - Weights are decoded once per panel of rows and super-block into stack
//    scratch: q widened to int16 and multiplied by its sub-block scale (sc·q
//    fits int16: kMaxScaledQ), then transposed so that vector p holds
//    elements (2p, 2p+1) of every row of the panel (Chunk::w).
//  - Per column and 32-element block the int32 lanes are exact (32 products
//    |sc·q|·|qx| < 2^31; Q6_K, whose |sc·q| reaches 4096, sums 16 at a time)
//    and become float once: part = fma(float(Σ), d_x, part). Per block with
//    a min: acc = fma(−dmin·m, s_x, acc) (s = d_x·Σqx is BlockQ16A::s). Per
//    super-block: acc = fma(part, d, acc). No horizontal sums: a lane is one
//    (row, column) result, and the panel's 16 rows of a column are contiguous
//    in y, so the tile loads and stores y directly.
// The decode and transpose cost is shared by every column of the call, so the
// kernel needs enough columns to pay off (KGemmEntry takes the matvec tiles
// below kGemmMinCols, internal.h).
//
// Exactness and order: every lane runs the same float chain for its
// (row, column) — acc over super-blocks in order, part over blocks in order —
// whatever the panel, tile, thread split or column count, so a result does
// not depend on the tiling (it differs from matvec's order; both stay within
// the reference's error bound, tests/kernels).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/simd_decode.h"

namespace kx::cpu {

// V: vector traits with
//   using I, F;  kLanes (rows per vector), kRowVecs (row vectors per panel), kCols (columns per
//   tile); Dot(acc, w, x); Bcast32(p); BcastF(p); Cvt(i); Fma(a, b, c); Zero{I,F}(); LoadF(p);
//   LoadY(p, valid) / StoreY(p, v, valid) (the first `valid` lanes; the rest read as 0 / left);
//   WidenScaled<J>(q8, header, int16_t* dst): dst[e] = q8[e]·sc[2J + e / 16] for e < 32
//   (dst 64-byte aligned); TransposePairs(const int16_t* rows /* kLanes × 32 */, I* dst,
//   size_t dst_stride) writing dst[p · dst_stride] = elements (2p, 2p+1) of every row, p < 16.
// L: the layout (kquants.h), D: its decoder (simd_decode.h).
template <class V, class L, class D>
struct KGemm {
  using I = typename V::I;
  using F = typename V::F;
  static constexpr int kLanes = V::kLanes;
  static constexpr int kRowVecs = V::kRowVecs;
  static constexpr int kPanel = kLanes * kRowVecs;
  static constexpr int kCols = V::kCols;
  static constexpr int kPairs = kQK / 2;
  static constexpr int kBlocks = kActBlocksK;
  static constexpr size_t kXs = offsetof(BlockQ16A, qs);
  static constexpr size_t kSbAct = kBlocks * sizeof(BlockQ16A);
  // Sums over 16 elements where 32 products could overflow int32.
  static constexpr bool kHalves = int64_t{32} * L::kMaxScaledQ * kQ16AMax >= (int64_t{1} << 31);
  // The min term uses BlockQ16A::s, a sum over 32 elements: types whose mins
  // change every 16 (Q2_K) cannot use this kernel.
  static_assert(L::kType != GgmlType::kQ2_K);

  // One super-block of one panel, decoded.
  struct alignas(64) Chunk {
    I w[kBlocks][kPairs][kRowVecs];
    alignas(64) float d[kPanel];
    alignas(64) float mm[kBlocks][kPanel];  // −dmin·m (exact: an 11-bit × 6-bit product)
  };

  static void Decode(const uint8_t* w, size_t row_bytes, int valid, const uint8_t* next,
                     Chunk* ch) {
    // A whole panel of a layout the ISA decodes straight into the transposed order
    // (avx2/kquant_panel.h): the same values, fewer shuffles.
    if constexpr (requires { V::template Panel<L>::kDecodes; }) {
      if (valid == kPanel) {
        V::template Panel<L>::Decode(w, row_bytes, next, ch);
        return;
      }
    }
    for (int v = 0; v * kLanes < valid; ++v) {
      alignas(64) int16_t rows[kBlocks][kLanes][kQK];
      for (int i = 0; i < kLanes; ++i) {
        const int r = v * kLanes + i;
        if (r >= valid) {  // past the last row: zeros, which give 0 and are not stored
          for (int j = 0; j < kBlocks; ++j) std::memset(rows[j][i], 0, sizeof rows[j][i]);
          ch->d[r] = 0.0f;
          if constexpr (L::kHasMin) {
            for (int j = 0; j < kBlocks; ++j) ch->mm[j][r] = 0.0f;
          }
          continue;
        }
        const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
        const char* f = reinterpret_cast<const char*>(next + static_cast<size_t>(r) * row_bytes);
        for (size_t o = 0; o < L::kBlockBytes; o += 64) _mm_prefetch(f + o, _MM_HINT_T0);
        KHeader h;
        D::Header(p, &h);
        ch->d[r] = h.d;
        simd::Unroll<kBlocks>([&]<int J>() {
          V::template WidenScaled<J>(D::template Q8<J>(p), h, rows[J][i]);
          if constexpr (L::kHasMin) ch->mm[J][r] = -h.dmin * static_cast<float>(h.m[2 * J]);
        });
      }
      for (int j = 0; j < kBlocks; ++j)
        V::TransposePairs(&rows[j][0][0], &ch->w[j][0][v], kRowVecs);
    }
  }

  // y[c·ldy + r] for the panel's rows r < valid (rv row vectors) and C
  // columns, one super-block: a = that super-block of the first column's
  // activations; first: y is written, else added to.
  template <int RV, int C>
  static void Tile(const Chunk& ch, const uint8_t* a, size_t stride, float* y, int64_t ldy,
                   int valid, bool first) {
    F acc[RV][C], part[RV][C];
    for (int v = 0; v < RV; ++v) {
      for (int c = 0; c < C; ++c) {
        acc[v][c] = first ? V::ZeroF() : V::LoadY(y + c * ldy + v * kLanes, valid - v * kLanes);
        part[v][c] = V::ZeroF();
      }
    }
    for (int j = 0; j < kBlocks; ++j) {
      const uint8_t* aj = a + j * sizeof(BlockQ16A);
      I s[RV][C];
      for (int v = 0; v < RV; ++v)
        for (int c = 0; c < C; ++c) s[v][c] = V::ZeroI();
      auto flush = [&] {
        for (int c = 0; c < C; ++c) {
          const F dx = V::BcastF(aj + c * stride);
          for (int v = 0; v < RV; ++v) {
            part[v][c] = V::Fma(V::Cvt(s[v][c]), dx, part[v][c]);
            s[v][c] = V::ZeroI();
          }
        }
      };
      simd::Unroll<kPairs>([&]<int P>() {
        if constexpr (kHalves && P == kPairs / 2) flush();
        I wv[RV];
        for (int v = 0; v < RV; ++v) wv[v] = ch.w[j][P][v];
        for (int c = 0; c < C; ++c) {
          const I x = V::Bcast32(aj + c * stride + kXs + 4 * P);
          for (int v = 0; v < RV; ++v) s[v][c] = V::Dot(s[v][c], wv[v], x);
        }
      });
      flush();
      if constexpr (L::kHasMin) {
        for (int c = 0; c < C; ++c) {
          const F sx = V::BcastF(aj + c * stride + sizeof(float));
          for (int v = 0; v < RV; ++v) {
            acc[v][c] = V::Fma(V::LoadF(&ch.mm[j][v * kLanes]), sx, acc[v][c]);
          }
        }
      }
    }
    for (int v = 0; v < RV; ++v) {
      const F d = V::LoadF(&ch.d[v * kLanes]);
      for (int c = 0; c < C; ++c) {
        V::StoreY(y + c * ldy + v * kLanes, V::Fma(part[v][c], d, acc[v][c]), valid - v * kLanes);
      }
    }
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    const int64_t nsb = n / kQK_K;
    if (nsb == 0) {
      for (int64_t c = 0; c < ncols; ++c) std::fill_n(y + c * ldy, rows, 0.0f);
      return;
    }
    alignas(64) Chunk ch;
    for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
      const int valid = static_cast<int>(std::min<int64_t>(kPanel, rows - r0));
      const int rv = (valid + kLanes - 1) / kLanes;
      const uint8_t* wp = wb + r0 * row_bytes;
      for (int64_t sb = 0; sb < nsb; ++sb) {
        // Prefetch the next super-block of these rows, or the next panel's first.
        const uint8_t* next =
            sb + 1 < nsb ? wp + (sb + 1) * L::kBlockBytes : wp + kPanel * row_bytes;
        Decode(wp + sb * L::kBlockBytes, row_bytes, valid, next, &ch);
        for (int64_t c0 = 0; c0 < ncols; c0 += kCols) {
          const int cc = static_cast<int>(std::min<int64_t>(kCols, ncols - c0));
          kTiles[rv - 1][cc - 1](ch, ab + c0 * act_stride + sb * kSbAct, act_stride,
                                 y + c0 * ldy + r0, ldy, valid, sb == 0);
        }
      }
    }
  }

 private:
  using TileFn = void (*)(const Chunk&, const uint8_t*, size_t, float*, int64_t, int, bool);
  template <size_t... Rs, size_t... Cs>
  static constexpr auto MakeTiles(std::index_sequence<Rs...>, std::index_sequence<Cs...> cs) {
    return std::array<std::array<TileFn, kCols>, kRowVecs>{MakeRow<Rs>(cs)...};
  }
  template <size_t R, size_t... Cs>
  static constexpr std::array<TileFn, kCols> MakeRow(std::index_sequence<Cs...>) {
    return {&Tile<static_cast<int>(R) + 1, static_cast<int>(Cs) + 1>...};
  }
  static constexpr std::array<std::array<TileFn, kCols>, kRowVecs> kTiles =
      MakeTiles(std::make_index_sequence<kRowVecs>{}, std::make_index_sequence<kCols>{});
};

// A TypeKernels entry: matvec (and matmul on fewer than kGemmMinCols columns)
// from `Small` (the lane or block tiles), matmul from `Gemm` (KGemm, or
// LGemm for the legacy types: legacy_gemm.h).
template <class Small, class Gemm>
struct KGemmEntry {
  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    if (ncols < kGemmMinCols) {
      Small::Matmul(w, row_bytes, n, rows, act, act_stride, ncols, y, ldy);
    } else {
      Gemm::Matmul(w, row_bytes, n, rows, act, act_stride, ncols, y, ldy);
    }
  }
};

// `k` with its matmul replaced (constant initialization, as dispatch.cc needs).
constexpr TypeKernels WithMatmul(TypeKernels k, decltype(TypeKernels::matmul) matmul) {
  k.matmul = matmul;
  return k;
}

}  // namespace kx::cpu
