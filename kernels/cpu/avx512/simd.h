// Helpers for the AVX-512 kernel sources (compiled with AVX-512 flags only).
#pragma once

// GCC 12's AVX-512 headers build "undefined" vectors as `__m256d __Y = __Y;`,
// which -Wuninitialized flags once inlined (a false positive in the header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

namespace kx::cpu::avx512 {

inline uint32_t LoadU32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Lane index vectors for spreading 4 floats [a0, a1, b0, b1] of two blocks
// over 16 lanes. kIdxPairSplit: lanes hold block 0 in 0-3 and 8-11, block 1
// in 4-7 and 12-15 (the Q4_1 nibble order, see q4_1.h); kIdxPairHalves:
// block 0 in lanes 0-7, block 1 in 8-15 (Q8_0's order).
inline __m512i IdxPairSplit(int first) {
  const int a = first, b = first + 2;
  return _mm512_setr_epi32(a, a, a, a, b, b, b, b, a, a, a, a, b, b, b, b);
}
inline __m512i IdxPairHalves(int first) {
  const int a = first, b = first + 2;
  return _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
}

// [f32 at p, f32 at p+4, f32 at q, f32 at q+4] (e.g. BlockQ8A's d, s of two blocks).
inline __m128 LoadTwoPairsF32(const uint8_t* p, const uint8_t* q) {
  const __m128d lo = _mm_load_sd(reinterpret_cast<const double*>(p));
  return _mm_castpd_ps(_mm_loadh_pd(lo, reinterpret_cast<const double*>(q)));
}

// [x(p) bytes 0-15, x(q) 0-15, x(p) 16-31, x(q) 16-31]: two 32-byte quant
// vectors arranged like two Q4_1 blocks' expanded nibbles.
inline __m512i LoadPairSplit(const uint8_t* p, const uint8_t* q) {
  const __m512i t = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), 1);
  return _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 1, 2, 0));
}

inline __m512i LoadPairHalves(const uint8_t* p, const uint8_t* q) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), 1);
}

// Σ over 4-byte groups of u8·s8 into 16 int32 lanes (no saturation on the VNNI
// path; the maddubs path saturates int16 pairs, so callers keep |u·s|·2 ≤ 32767).
template <bool kVnni>
inline __m512i DotU8S8(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(acc, u, s);
  } else {
    const __m512i pairs = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
  }
}

}  // namespace kx::cpu::avx512
