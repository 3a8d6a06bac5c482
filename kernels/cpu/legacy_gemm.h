// Legacy-quant (32-element blocks: Q4_0, Q5_0, Q5_1, Q8_0) × BlockQ16A
// matmul for prompt processing (many columns): kquant_gemm.h's scheme — a
// vector's lanes are 16 (AVX-512) or 8 (AVX2) weight *rows*, a 32-row
// panel's weights decoded once into stack scratch and transposed to element
// pairs, each column's activation pair broadcast into vpdpwssd (vpmaddwd +
// vpaddd) — over the same vector traits V (avx512/kquant_gemm.h,
// avx2/kquant_gemm.h) and the shared decoders D (simd_decode.h).
//
// Why not the matvec tiles (q16a_tiles.h): there each decoded weight pair is
// used for 3 columns and every (row, column) block ends in a convert, two
// float multiplies and a horizontal sum at the end; Gemma 3's 640-wide
// matrices (Q5_0, Q8_0: 640 is not a multiple of 256) ran prefill at a
// quarter of the K-quant matmul's speed per MAC.
//
// What differs from the K-quants: every 32-element block of every row has
// its own fp16 d (and m for Q5_1), so there is no super-block and no
// per-element scale. Weights are decoded in chunks of kChunkBlocks blocks
// (the last chunk of a row may be shorter: n is any multiple of 32); q is
// widened to int16 as is (|q| ≤ 128). Per (block, column): the int32 lanes
// sum 16 pairs exactly (32 products |q|·|qx| ≤ 128·32767 < 2^27), then
//   acc = fma(float(Σ), d_w[lanes]·d_x, acc)   (+ fma(m_w[lanes], s_x, acc))
// with BlockQ16A's d and s = d_x·Σqx. No horizontal sums: a lane is one
// (row, column) result.
//
// Exactness and order: every lane runs the same float chain for its (row,
// column) — acc over blocks in order, carried through y between chunks
// (stores and loads of a float are exact) — whatever the panel, tile, thread
// split or column count, so a result does not depend on the tiling (it
// differs from matvec's order; both stay within the reference's error bound,
// tests/kernels).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd_decode.h"

namespace kx::cpu {

// V: the vector traits of kquant_gemm.h, plus Widen(q8, int16_t* dst) (32
// int8 → int16, dst 64-byte aligned) and Mul(a, b).
// L: the layout (legacy_quants.h), D: its decoder (simd_decode.h, D::Q8(p)).
template <class V, class L, class D>
struct LGemm {
  using I = typename V::I;
  using F = typename V::F;
  static constexpr int kLanes = V::kLanes;
  static constexpr int kRowVecs = V::kRowVecs;
  static constexpr int kPanel = kLanes * kRowVecs;
  static constexpr int kCols = V::kCols;
  static constexpr int kPairs = kQK / 2;
  // Blocks decoded at once: 256 elements, as a K-quant super-block (a
  // panel's chunk is 16 KiB of int16 pairs, L1-resident for all columns).
  static constexpr int kChunkBlocks = 8;
  static constexpr size_t kXs = offsetof(BlockQ16A, qs);
  static constexpr size_t kXd = offsetof(BlockQ16A, d);
  static constexpr size_t kXsum = offsetof(BlockQ16A, s);

  struct alignas(64) Chunk {
    I w[kChunkBlocks][kPairs][kRowVecs];
    alignas(64) float d[kChunkBlocks][kPanel];
    alignas(64) float m[L::kHasMin ? kChunkBlocks : 1][kPanel];
  };

  // nblk blocks of the panel's rows r < valid, starting at w (row 0).
  static void Decode(const uint8_t* w, size_t row_bytes, int valid, int nblk, const uint8_t* next,
                     Chunk* ch) {
    for (int v = 0; v * kLanes < valid; ++v) {
      alignas(64) int16_t rows[kChunkBlocks][kLanes][kQK];
      for (int i = 0; i < kLanes; ++i) {
        const int r = v * kLanes + i;
        if (r >= valid) {  // past the last row: zeros, which give 0 and are not stored
          for (int j = 0; j < nblk; ++j) {
            std::memset(rows[j][i], 0, sizeof rows[j][i]);
            ch->d[j][r] = 0.0f;
            if constexpr (L::kHasMin) ch->m[j][r] = 0.0f;
          }
          continue;
        }
        const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
        const char* f = reinterpret_cast<const char*>(next + static_cast<size_t>(r) * row_bytes);
        for (size_t o = 0; o < kChunkBlocks * L::kBlockBytes; o += 64) {
          _mm_prefetch(f + o, _MM_HINT_T0);
        }
        for (int j = 0; j < nblk; ++j) {
          const uint8_t* b = p + j * L::kBlockBytes;
          V::Widen(D::Q8(b), rows[j][i]);
          ch->d[j][r] = simd::Half(b);
          if constexpr (L::kHasMin) ch->m[j][r] = simd::Half(b + sizeof(uint16_t));
        }
      }
      for (int j = 0; j < nblk; ++j) V::TransposePairs(&rows[j][0][0], &ch->w[j][0][v], kRowVecs);
    }
  }

  // y[c·ldy + r] for the panel's rows r < valid (RV row vectors) and C
  // columns over nblk blocks: a = the chunk's first block of the first
  // column's activations; first: y is written, else added to.
  template <int RV, int C>
  static void Tile(const Chunk& ch, const uint8_t* a, size_t stride, float* y, int64_t ldy,
                   int valid, bool first, int nblk) {
    F acc[RV][C];
    for (int v = 0; v < RV; ++v) {
      for (int c = 0; c < C; ++c) {
        acc[v][c] = first ? V::ZeroF() : V::LoadY(y + c * ldy + v * kLanes, valid - v * kLanes);
      }
    }
    for (int j = 0; j < nblk; ++j) {
      const uint8_t* aj = a + j * sizeof(BlockQ16A);
      I s[RV][C];
      for (int v = 0; v < RV; ++v)
        for (int c = 0; c < C; ++c) s[v][c] = V::ZeroI();
      simd::Unroll<kPairs>([&]<int P>() {
        I wv[RV];
        for (int v = 0; v < RV; ++v) wv[v] = ch.w[j][P][v];
        for (int c = 0; c < C; ++c) {
          const I x = V::Bcast32(aj + c * stride + kXs + 4 * P);
          for (int v = 0; v < RV; ++v) s[v][c] = V::Dot(s[v][c], wv[v], x);
        }
      });
      F dw[RV];
      for (int v = 0; v < RV; ++v) dw[v] = V::LoadF(&ch.d[j][v * kLanes]);
      for (int c = 0; c < C; ++c) {
        const F dx = V::BcastF(aj + c * stride + kXd);
        for (int v = 0; v < RV; ++v) {
          acc[v][c] = V::Fma(V::Cvt(s[v][c]), V::Mul(dw[v], dx), acc[v][c]);
        }
      }
      if constexpr (L::kHasMin) {
        for (int c = 0; c < C; ++c) {
          const F sx = V::BcastF(aj + c * stride + kXsum);
          for (int v = 0; v < RV; ++v) {
            acc[v][c] = V::Fma(V::LoadF(&ch.m[j][v * kLanes]), sx, acc[v][c]);
          }
        }
      }
    }
    for (int v = 0; v < RV; ++v) {
      for (int c = 0; c < C; ++c)
        V::StoreY(y + c * ldy + v * kLanes, acc[v][c], valid - v * kLanes);
    }
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    const int64_t nb = n / kQK;
    if (nb == 0) {
      for (int64_t c = 0; c < ncols; ++c) std::fill_n(y + c * ldy, rows, 0.0f);
      return;
    }
    alignas(64) Chunk ch;
    for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
      const int valid = static_cast<int>(std::min<int64_t>(kPanel, rows - r0));
      const int rv = (valid + kLanes - 1) / kLanes;
      const uint8_t* wp = wb + r0 * row_bytes;
      for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
        const int nblk = static_cast<int>(std::min<int64_t>(kChunkBlocks, nb - b0));
        // Prefetch the next chunk of these rows, or the next panel's first.
        const uint8_t* next = b0 + kChunkBlocks < nb ? wp + (b0 + kChunkBlocks) * L::kBlockBytes
                                                     : wp + kPanel * row_bytes;
        Decode(wp + b0 * L::kBlockBytes, row_bytes, valid, nblk, next, &ch);
        for (int64_t c0 = 0; c0 < ncols; c0 += kCols) {
          const int cc = static_cast<int>(std::min<int64_t>(kCols, ncols - c0));
          kTiles[rv - 1][cc - 1](ch, ab + c0 * act_stride + b0 * sizeof(BlockQ16A), act_stride,
                                 y + c0 * ldy + r0, ldy, valid, b0 == 0, nblk);
        }
      }
    }
  }

 private:
  using TileFn = void (*)(const Chunk&, const uint8_t*, size_t, float*, int64_t, int, bool, int);
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

}  // namespace kx::cpu
