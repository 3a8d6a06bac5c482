// AVX2 tiles for quantized weights × BlockQ16A activations (int16): the
// weight type widens one block to two int16 vectors (elements 0-15, 16-31),
// which vpmaddwd multiplies with the activations as stored (natural order,
// straight from memory). Per block, 8 int32 lanes:
//   acc += float(Σ) · (d_w·d_x) [+ m · s/8 for types with a min: 8 lanes per
//   block, so m·s is whole after the horizontal sum; s/8 is exact].
// Range: a lane sums 4 products |w|·|x| ≤ 128·32767 < 2^24; vpmaddwd's one
// overflow case needs x = -32768, which the quantizer never emits.
#pragma once

#include <cstddef>

#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx2 {

struct WideBlock {
  __m256i lo, hi;  // elements 0-15, 16-31 as int16
  float d, m;
};

// W: static constexpr size_t kBlockBytes; static constexpr bool kHasMin;
//    static WideBlock Load(const uint8_t* p);
template <class W>
struct Q16ATiles {
  // Software prefetch of the same offset kPrefetchTiles tiles ahead (rows
  // r + k·R): a tile's rows are one contiguous range, read as R short streams
  // that the hardware prefetcher follows poorly (see avx512/q16a_tiles.h).
  static constexpr int kPrefetchTiles = 2;

  template <int R, int C>
  static void Tile(const TileArgs& args, int64_t r0, int64_t c0) {
    const TileArgs t = args;  // a local copy: no reloads through the reference
    constexpr size_t kQs = offsetof(BlockQ16A, qs);
    constexpr float kLanesInv = 1.0f / 8;
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t nb = t.n / kQK;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xlo[C], xhi[C];
      __m256 xd[C], xs[C];
      for (int c = 0; c < C; ++c) {
        const uint8_t* a = t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ16A);
        xlo[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + kQs));
        xhi[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + kQs + 32));
        xd[c] = _mm256_set1_ps(LoadF32(a));
        if constexpr (W::kHasMin) xs[c] = _mm256_set1_ps(LoadF32(a + 4) * kLanesInv);
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = t.w + (r0 + r) * t.row_bytes + b * W::kBlockBytes;
        _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchTiles * R * t.row_bytes,
                     _MM_HINT_T0);
        const WideBlock w = W::Load(p);
        const __m256 wd = _mm256_set1_ps(w.d);
        for (int c = 0; c < C; ++c) {
          const __m256i isum =
              _mm256_add_epi32(_mm256_madd_epi16(w.lo, xlo[c]), _mm256_madd_epi16(w.hi, xhi[c]));
          acc[r][c] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(wd, xd[c]), acc[r][c]);
          if constexpr (W::kHasMin) {
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(w.m), xs[c], acc[r][c]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = HSum(acc[r][c]);
  }
};

// 16 vector registers: matvec 4 rows × 1 column, matmul 2 rows × 3 columns.
template <class W>
using Q16AEntry = TiledEntryPoints<Q16ATiles<W>, 4, 2, 3>;

}  // namespace kx::cpu::avx2
