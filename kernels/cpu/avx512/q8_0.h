// AVX-512 Q8_0 × BlockQ8A tiles, without VNNI (q8_0.cc) and with it
// (q8_0_vnni.cc). Two blocks per 512-bit vector: lanes 0-7 block b, 8-15
// block b+1. Both operands are signed, but the integer dot instructions
// multiply unsigned × signed:
//  - VNNI: (w + 128) is unsigned (w xor 0x80), and Σ(w+128)·x − 128·Σx = Σw·x.
//    The 128·Σx correction depends only on the activations, so it is computed
//    once per column and seeds vpdpbusd's accumulator. Exact for every w in
//    -128..127 (no saturation in vpdpbusd).
//  - maddubs: |w| × (x with w's sign). |w| of -128 is 0x80 = 128 read
//    unsigned, which is right; x is never -128 (kQ8AMax), so negating it is
//    safe, and 2·128·127 = 32512 fits the int16 pair sums.
#pragma once

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx512 {

template <bool kVnni>
struct Q8_0Tiles {
  struct X {
    __m512i q;
    __m512i corr;  // VNNI: −128·Σx per lane group
    __m512 d;
  };

  template <bool kTwo>
  static X LoadX(const uint8_t* a) {
    const uint8_t* a1 = a + sizeof(BlockQ8A);
    X x;
    x.q = kTwo ? LoadPairHalves(a + 8, a1 + 8)
               : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 8)));
    if constexpr (kVnni) {
      const __m512i sum128 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), x.q);
      x.corr = _mm512_sub_epi32(_mm512_setzero_si512(), sum128);
    }
    const __m128 ds = kTwo ? LoadTwoPairsF32(a, a1)
                           : _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a)));
    x.d = _mm512_permutexvar_ps(IdxPairHalves(0), _mm512_castps128_ps512(ds));
    return x;
  }

  template <bool kTwo>
  static void LoadW(const uint8_t* p, __m512i* q, __m512* d) {
    const uint8_t* p1 = p + sizeof(BlockQ8_0);
    if (kTwo) {
      *q = LoadPairHalves(p + 2, p1 + 2);
    } else {
      *q = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
    }
    const uint64_t halves = LoadU16(p) | (kTwo ? static_cast<uint64_t>(LoadU16(p1)) << 32 : 0);
    const __m128 df = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(halves)));
    *d = _mm512_permutexvar_ps(IdxPairHalves(0), _mm512_castps128_ps512(df));  // [d0, 0, d1, 0]
  }

  static __m512i Dot(__m512i w, const X& x) {
    if constexpr (kVnni) {
      return _mm512_dpbusd_epi32(x.corr, _mm512_xor_si512(w, _mm512_set1_epi8(-128)), x.q);
    } else {
      const __mmask64 neg = _mm512_movepi8_mask(w);
      const __m512i xs = _mm512_mask_sub_epi8(x.q, neg, _mm512_setzero_si512(), x.q);
      return DotU8S8<false>(_mm512_setzero_si512(), _mm512_abs_epi8(w), xs);
    }
  }

  template <bool kTwo, int R, int C>
  static void Step(const TileArgs& t, int64_t r0, int64_t c0, int64_t b, __m512 (&acc)[R][C]) {
    X x[C];
    for (int c = 0; c < C; ++c) {
      x[c] = LoadX<kTwo>(t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ8A));
    }
    for (int r = 0; r < R; ++r) {
      __m512i wq;
      __m512 wd;
      LoadW<kTwo>(t.w + (r0 + r) * t.row_bytes + b * sizeof(BlockQ8_0), &wq, &wd);
      for (int c = 0; c < C; ++c) {
        const __m512 sum = _mm512_cvtepi32_ps(Dot(wq, x[c]));
        acc[r][c] = _mm512_fmadd_ps(sum, _mm512_mul_ps(wd, x[c].d), acc[r][c]);
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

template <bool kVnni>
using Q8_0Entry = TiledEntryPoints<Q8_0Tiles<kVnni>, 4, 2, 4>;

}  // namespace kx::cpu::avx512
