// AVX-512 Q8_0 weights widened to int16 for q16a_tiles.h (q8_0.cc without
// VNNI, q8_0_vnni.cc with it): each half of a pair's two blocks (elements
// 0-15 of both, then 16-31 of both) sign-extends with one vpmovsxbw. Every
// int8 value, -128 included, is exact as an int16. Matmuls on kGemmMinCols
// columns or more run legacy_gemm.h (rows in vector lanes; q8_0.cc).
#pragma once

#include "kernels/cpu/avx512/kquant_gemm.h"
#include "kernels/cpu/avx512/q16a_tiles.h"

namespace kx::cpu::avx512 {

struct Q8_0Wide {
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static constexpr bool kHasQuad = false;  // 34-byte blocks: the pair decode is cheaper

  template <bool kTwo>
  static WidePair LoadPair(const uint8_t* p) {
    constexpr size_t kQs = offsetof(BlockQ8_0, qs);
    constexpr int kHalf = kQK / 2;
    const uint8_t* p1 = p + kBlockBytes;
    auto half = [&](int off) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQs + off));
      if constexpr (kTwo) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + kQs + off));
        return _mm512_cvtepi8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
      } else {
        return _mm512_cvtepi8_epi16(_mm256_zextsi128_si256(a));
      }
    };
    WidePair w;
    w.lo = half(0);
    w.hi = half(kHalf);
    const uint64_t halves = LoadU16(p) | (kTwo ? static_cast<uint64_t>(LoadU16(p1)) << 32 : 0);
    const __m128 df = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(halves)));
    w.d = _mm512_permutexvar_ps(IdxPairHalves(0), _mm512_castps128_ps512(df));  // [d0, 0, d1, 0]
    w.m = _mm512_setzero_ps();
    return w;
  }
};

template <bool kVnni>
using Q8_0Entry = Q16AEntry<Q8_0Wide, kVnni>;

}  // namespace kx::cpu::avx512
