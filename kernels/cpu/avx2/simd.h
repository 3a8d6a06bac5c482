// Helpers for the AVX2+FMA+F16C kernel sources (compiled with those flags only).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/internal.h"

namespace kx::cpu::avx2 {

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HalfAt(const uint8_t* p) { return _cvtsh_ss(LoadU16(p)); }

}  // namespace kx::cpu::avx2
