// Helpers for the AVX-512 kernel sources (compiled with AVX-512 flags only).
#pragma once

// GCC 12's AVX-512 headers build "undefined" vectors as `__m256d __Y = __Y;`,
// which -Wuninitialized flags once inlined (a false positive in the header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

namespace kx::cpu::avx512 {

// QuantizeQ16A (internal.h) vectorized, byte for byte the same (q16a_quant.cc):
// the AVX-512 tables' quantize_act.
void QuantizeQ16AVec(const float* x, int64_t n, void* dst);

inline uint32_t LoadU32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Lane index vector spreading 4 floats [a0, a1, b0, b1] of two blocks over
// 16 lanes: element `first` of block 0 in lanes 0-7, of block 1 in 8-15.
inline __m512i IdxPairHalves(int first) {
  const int a = first, b = first + 2;
  return _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
}

// [f32 at p, f32 at p+4, f32 at q, f32 at q+4] (e.g. BlockQ16A's d, s of two blocks).
inline __m128 LoadTwoPairsF32(const uint8_t* p, const uint8_t* q) {
  const __m128d lo = _mm_load_sd(reinterpret_cast<const double*>(p));
  return _mm_castpd_ps(_mm_loadh_pd(lo, reinterpret_cast<const double*>(q)));
}

}  // namespace kx::cpu::avx512
