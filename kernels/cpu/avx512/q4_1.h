// AVX-512 Q4_1 × BlockQ8A tiles, instantiated without VNNI (q4_1.cc:
// maddubs+madd) and with it (q4_1_vnni.cc: vpdpbusd, which takes the
// unsigned nibbles and signed activations directly).
//
// Two blocks per 512-bit vector. A block's 16 nibble bytes expand to
// [lo 0-15 | hi 16-31]; for blocks b, b+1 the vector is
// [lo_b, lo_b1, hi_b, hi_b1] (one shift of both blocks' bytes at once) and
// the activations are loaded in the same order (LoadPairSplit). Per lane:
//   acc += float(Σ4 q·qx) · (d·dx) + m · (s/8)
// eight lanes per block, so the min term m·s arrives whole after the final
// horizontal sum (s/8 is exact: a power-of-two scale).
#pragma once

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx512 {

template <bool kVnni>
struct Q4_1Tiles {
  static constexpr int kLanesPerBlock = 8;
  // Software prefetch distance along each row (KX_Q4_1_PREFETCH overrides it
  // for tuning). Several rows stream at once, which the hardware prefetcher
  // follows less eagerly than one sequential stream.
#ifdef KX_Q4_1_PREFETCH
  static constexpr int kPrefetchBytes = KX_Q4_1_PREFETCH;
#else
  static constexpr int kPrefetchBytes = 640;
#endif

  // One or two blocks of row data: nibbles, d and m spread over lanes.
  template <bool kTwo>
  static void LoadW(const uint8_t* p, __m512i* q, __m512* d, __m512* m) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
    const __m128i q1 =
        kTwo ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 24)) : _mm_setzero_si128();
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    const __m512i wide =
        _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
    *q = _mm512_and_si512(wide, _mm512_set1_epi8(0x0f));
    __m128i dm = _mm_cvtsi32_si128(static_cast<int>(LoadU32(p)));
    if (kTwo) dm = _mm_insert_epi32(dm, static_cast<int>(LoadU32(p + 20)), 1);
    const __m512 dmf = _mm512_castps128_ps512(_mm_cvtph_ps(dm));  // [d0, m0, d1, m1]
    *d = _mm512_permutexvar_ps(IdxPairSplit(0), dmf);
    *m = _mm512_permutexvar_ps(IdxPairSplit(1), dmf);
  }

  template <bool kTwo>
  static void LoadX(const uint8_t* a, __m512i* q, __m512* d, __m512* s8) {
    const uint8_t* a1 = a + sizeof(BlockQ8A);
    if (kTwo) {
      *q = LoadPairSplit(a + 8, a1 + 8);
    } else {
      const __m512i t = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 8)));
      *q = _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 1, 2, 0));
    }
    const __m128 ds = kTwo ? LoadTwoPairsF32(a, a1)
                           : _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a)));
    const __m512 dsw = _mm512_castps128_ps512(ds);
    *d = _mm512_permutexvar_ps(IdxPairSplit(0), dsw);
    *s8 = _mm512_mul_ps(_mm512_permutexvar_ps(IdxPairSplit(1), dsw),
                        _mm512_set1_ps(1.0f / kLanesPerBlock));
  }

  template <bool kTwo, int R, int C>
  static void Step(const TileArgs& t, int64_t r0, int64_t c0, int64_t b, __m512 (&acc)[R][C]) {
    __m512i xq[C];
    __m512 xd[C], xs[C];
    for (int c = 0; c < C; ++c) {
      LoadX<kTwo>(t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ8A), &xq[c], &xd[c], &xs[c]);
    }
    for (int r = 0; r < R; ++r) {
      __m512i wq;
      __m512 wd, wm;
      const uint8_t* p = t.w + (r0 + r) * t.row_bytes + b * sizeof(BlockQ4_1);
      if (kTwo) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      LoadW<kTwo>(p, &wq, &wd, &wm);
      for (int c = 0; c < C; ++c) {
        const __m512i sum = DotU8S8<kVnni>(_mm512_setzero_si512(), wq, xq[c]);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wd, xd[c]), acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(wm, xs[c], acc[r][c]);
      }
    }
  }

  template <int R, int C>
  static void Tile(const TileArgs& t, int64_t r0, int64_t c0) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = t.n / kQK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) Step<true, R, C>(t, r0, c0, b, acc);
    if (b < nb) Step<false, R, C>(t, r0, c0, b, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

// Matvec: 4 rows share each activation load. Matmul: 2 rows × 4 columns, so
// each decoded weight pair serves 4 columns (8 accumulators + operands fit
// the 32 vector registers).
template <bool kVnni>
using Q4_1Entry = TiledEntryPoints<Q4_1Tiles<kVnni>, 4, 2, 4>;

}  // namespace kx::cpu::avx512
