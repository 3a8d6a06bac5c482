// AVX2 tiles for K-quant weights × BlockQ16A activations: the AVX-512
// scheme (avx512/kquant_tiles.h, arithmetic in kernels/cpu/kquants.h) on
// 256-bit vectors: per block J the int8 q widen to two int16 vectors
// (elements 0-15, 16-31), vpmullw by the broadcast sub-block scales, and per
// column two vpmaddwd summed into 8 int32 lanes (4 products ≤ 4096·32767
// each: < 2^29), scaled by d_x into `part`, by d once per super-block.
#pragma once

#include <algorithm>

#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/simd_decode.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx2 {

template <class L, class D>
struct KQuantTiles {
  static constexpr int kPrefetchTiles = 2;
  static constexpr int kLine = 64;
  static constexpr size_t kXs = offsetof(BlockQ16A, qs);

  template <int R, int C>
  static void Tile(const TileArgs& args, int64_t r0, int64_t c0) {
    const TileArgs t = args;
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t nsb = t.n / kQK_K;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* p[R];
      KHeader h[R];
      for (int r = 0; r < R; ++r) {
        p[r] = t.w + (r0 + r) * t.row_bytes + sb * L::kBlockBytes;
        const char* f = reinterpret_cast<const char*>(p[r]) + kPrefetchTiles * R * t.row_bytes;
        for (size_t o = 0; o < L::kBlockBytes; o += kLine) _mm_prefetch(f + o, _MM_HINT_T0);
        D::Header(p[r], &h[r]);
      }
      const uint8_t* xa[C];
      for (int c = 0; c < C; ++c) {
        xa[c] = t.act + (c0 + c) * t.act_stride + sb * kActBlocksK * sizeof(BlockQ16A);
      }
      __m256 part[R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) part[r][c] = _mm256_setzero_ps();
      simd::Unroll<kActBlocksK>([&]<int J>() {
        for (int r = 0; r < R; ++r) {
          const __m256i q = D::template Q8<J>(p[r]);
          const __m256i wlo = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)),
                                                 _mm256_set1_epi16(h[r].sc[2 * J]));
          const __m256i whi =
              _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)),
                                 _mm256_set1_epi16(h[r].sc[2 * J + 1]));
          for (int c = 0; c < C; ++c) {
            const uint8_t* x = xa[c] + J * sizeof(BlockQ16A);
            const __m256i xlo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + kXs));
            const __m256i xhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + kXs + 32));
            const __m256i isum =
                _mm256_add_epi32(_mm256_madd_epi16(wlo, xlo), _mm256_madd_epi16(whi, xhi));
            part[r][c] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(LoadF32(x)), part[r][c]);
          }
        }
      });
      for (int r = 0; r < R; ++r) {
        const __m256 d = _mm256_set1_ps(h[r].d);
        for (int c = 0; c < C; ++c) {
          acc[r][c] = _mm256_fmadd_ps(part[r][c], d, acc[r][c]);
          if constexpr (L::kHasMin) {
            alignas(32) float local[kSubBlocks16];
            const float* s16;
            if (t.prep != nullptr) {
              s16 = reinterpret_cast<const float*>(t.prep + (c0 + c) * t.prep_stride) +
                    sb * kSubBlocks16;
            } else {
              Q16ASums16(xa[c], kQK_K, local);
              s16 = local;
            }
            const __m256 mdn = _mm256_set1_ps(-h[r].dmin);
            for (int half = 0; half < 2; ++half) {
              const __m256i m = _mm256_cvtepi16_epi32(
                  _mm_load_si128(reinterpret_cast<const __m128i*>(h[r].m + 8 * half)));
              acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(m), mdn),
                                          _mm256_loadu_ps(s16 + 8 * half), acc[r][c]);
            }
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = HSum(acc[r][c]);
  }
};

// 16 vector registers: matvec 3 rows, matmul 2 rows × 2 columns.
inline constexpr int kKMatvecRows = 3;
inline constexpr int kKMatmulRows = 2;
inline constexpr int kKMatmulCols = 2;
inline constexpr size_t kKPrepBytes = 32 * 1024;  // as avx512/kquant_tiles.h

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
    if (panel == 0) {
      const TileArgs a{wp, row_bytes, n, ap, act_stride, y, ldy};
      TileDriver<K, kKMatmulRows, kKMatmulCols>::Run(a, rows, ncols);
      return;
    }
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
    return {L::kType, &Q16AActBytes, &QuantizeQ16A, &Matvec, &Matmul, dequantize};
  }
};

}  // namespace kx::cpu::avx2
