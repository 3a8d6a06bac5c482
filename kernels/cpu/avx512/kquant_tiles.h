// AVX-512 tiles for K-quant weights × BlockQ16A activations (see
// kernels/cpu/kquants.h for the arithmetic). Per row and 32-element block J
// of a super-block: the decoder's int8 q widen to int16 (vpmovsxbw), one
// vpmullw by the sub-block scales ([sc of elements 0-15 | sc of 16-31],
// picked from the header with vpermw) gives sc·q, and per column one
// vpmaddwd with the activations (as stored) leaves 16 int32 sums; those are
// scaled by the block's d_x into a per-super-block float accumulator `part`,
// which is scaled by d once per super-block. Mins: one 16-lane FMA per
// super-block of (−dmin·m_k) with the column's S_k, prepared once per call.
// Range: a lane is 2 products |sc·q|·|qx| ≤ 4096·32767 < 2^28.
#pragma once

#include <algorithm>

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/simd_decode.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx512 {

// vpermw index: lanes 0-15 ← sc[2J], lanes 16-31 ← sc[2J + 1].
template <int J>
inline __m512i ScaleIdx() {
  return _mm512_inserti64x4(_mm512_set1_epi16(2 * J), _mm256_set1_epi16(2 * J + 1), 1);
}

// L: layout (kquants.h), D: decoder (simd_decode.h).
template <class L, class D>
struct KQuantTiles {
  static constexpr int kPrefetchTiles = 2;  // as in q16a_tiles.h
  static constexpr int kLine = 64;
  static constexpr size_t kXs = offsetof(BlockQ16A, qs);

  template <int R, int C>
  static void Tile(const TileArgs& args, int64_t r0, int64_t c0) {
    const TileArgs t = args;  // a local copy: no reloads through the reference
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nsb = t.n / kQK_K;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* p[R];
      KHeader h[R];
      __m512i sc[R];
      for (int r = 0; r < R; ++r) {
        p[r] = t.w + (r0 + r) * t.row_bytes + sb * L::kBlockBytes;
        const char* f = reinterpret_cast<const char*>(p[r]) + kPrefetchTiles * R * t.row_bytes;
        for (size_t o = 0; o < L::kBlockBytes; o += kLine) _mm_prefetch(f + o, _MM_HINT_T0);
        D::Header(p[r], &h[r]);
        sc[r] =
            _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(h[r].sc)));
      }
      const uint8_t* xa[C];
      for (int c = 0; c < C; ++c) {
        xa[c] = t.act + (c0 + c) * t.act_stride + sb * kActBlocksK * sizeof(BlockQ16A);
      }
      __m512 part[R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) part[r][c] = _mm512_setzero_ps();
      simd::Unroll<kActBlocksK>([&]<int J>() {
        for (int r = 0; r < R; ++r) {
          const __m512i q = _mm512_cvtepi8_epi16(D::template Q8<J>(p[r]));
          const __m512i w = _mm512_mullo_epi16(q, _mm512_permutexvar_epi16(ScaleIdx<J>(), sc[r]));
          for (int c = 0; c < C; ++c) {
            const uint8_t* x = xa[c] + J * sizeof(BlockQ16A);
            const __m512i isum = _mm512_madd_epi16(w, _mm512_loadu_si512(x + kXs));
            part[r][c] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(LoadF32(x)), part[r][c]);
          }
        }
      });
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_set1_ps(h[r].d);
        __m512 mneg = _mm512_setzero_ps();
        if constexpr (L::kHasMin) {
          const __m512i m =
              _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(h[r].m)));
          mneg = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(-h[r].dmin));
        }
        for (int c = 0; c < C; ++c) {
          acc[r][c] = _mm512_fmadd_ps(part[r][c], d, acc[r][c]);
          if constexpr (L::kHasMin) {
            alignas(64) float local[kSubBlocks16];
            const float* s16;
            if (t.prep != nullptr) {
              s16 = reinterpret_cast<const float*>(t.prep + (c0 + c) * t.prep_stride) +
                    sb * kSubBlocks16;
            } else {  // n too large for the stack scratch: the same sums, here
              Q16ASums16(xa[c], kQK_K, local);
              s16 = local;
            }
            acc[r][c] = _mm512_fmadd_ps(mneg, _mm512_loadu_ps(s16), acc[r][c]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

// Matvec: 4 rows share each activation load; matmul: 3 rows × 4 columns
// (acc and part per pair: 24 of the 32 vector registers).
inline constexpr int kKMatvecRows = 4;
inline constexpr int kKMatmulRows = 3;
inline constexpr int kKMatmulCols = 4;
// Stack scratch for the S_k of the min types: 16 floats per 256 elements per
// column, so one column up to 131072 elements (larger: computed per tile).
inline constexpr size_t kKPrepBytes = 32 * 1024;

template <class L, class D>
struct KQuantEntry {
  using K = KQuantTiles<L, D>;

  static size_t ColBytes(int64_t n) { return static_cast<size_t>(n / 16) * sizeof(float); }

  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    TileArgs a{
        static_cast<const uint8_t*>(w), row_bytes, n, static_cast<const uint8_t*>(act), 0, y, 0};
    alignas(64) uint8_t prep[L::kHasMin ? kKPrepBytes : 64];
    if (L::kHasMin && ColBytes(n) <= kKPrepBytes) {
      Q16ASums16(act, n, reinterpret_cast<float*>(prep));
      a.prep = prep;
      a.prep_stride = ColBytes(n);
    }
    TileDriver<K, kKMatvecRows, 1>::Run(a, rows, 1);
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* ap = static_cast<const uint8_t*>(act);
    const auto* wp = static_cast<const uint8_t*>(w);
    const size_t col_bytes = ColBytes(n);
    const int64_t panel = L::kHasMin ? static_cast<int64_t>(kKPrepBytes / col_bytes) : ncols;
    if (panel == 0) {  // huge n: sums per tile
      const TileArgs a{wp, row_bytes, n, ap, act_stride, y, ldy};
      TileDriver<K, kKMatmulRows, kKMatmulCols>::Run(a, rows, ncols);
      return;
    }
    // Column panels whose sums fit the scratch; each panel streams the
    // weights once (from L2 after the first).
    alignas(64) uint8_t prep[L::kHasMin ? kKPrepBytes : 64];
    for (int64_t c0 = 0; c0 < ncols; c0 += panel) {
      const int64_t pc = std::min(panel, ncols - c0);
      TileArgs a{wp, row_bytes, n, ap + c0 * act_stride, act_stride, y + c0 * ldy, ldy};
      if constexpr (L::kHasMin) {
        for (int64_t c = 0; c < pc; ++c) {
          Q16ASums16(a.act + c * act_stride, n, reinterpret_cast<float*>(prep + c * col_bytes));
        }
        a.prep = prep;
        a.prep_stride = col_bytes;
      }
      TileDriver<K, kKMatmulRows, kKMatmulCols>::Run(a, rows, pc);
    }
  }

  static constexpr TypeKernels Make(void (*dequantize)(const void*, float*, int64_t)) {
    return {L::kType, &Q16AActBytes, &QuantizeQ16AVec, &Matvec, &Matmul, dequantize};
  }
};

}  // namespace kx::cpu::avx512
