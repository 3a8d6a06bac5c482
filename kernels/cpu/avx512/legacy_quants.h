// AVX-512 Q4_0, Q5_0, Q5_1 weights widened to int16 for q16a_tiles.h (pair
// layout): the shared decoder (simd_decode.h) gives each block's 32 q as
// int8; the two blocks' halves are interleaved [b 0-15 | b+1 0-15],
// [b 16-31 | b+1 16-31] and sign-extended with one vpmovsxbw each. Matmuls
// on kGemmMinCols columns or more run legacy_gemm.h (rows in vector lanes).
#pragma once

#include "kernels/cpu/avx512/kquant_gemm.h"
#include "kernels/cpu/avx512/q16a_tiles.h"
#include "kernels/cpu/simd_decode.h"

namespace kx::cpu::avx512 {

template <class L, class D>
struct LegacyWide {
  static constexpr size_t kBlockBytes = L::kBlockBytes;
  static constexpr bool kHasMin = L::kHasMin;
  static constexpr bool kHasQuad = false;

  template <bool kTwo>
  static WidePair LoadPair(const uint8_t* p) {
    const __m256i q0 = D::Q8(p);
    const __m256i q1 = kTwo ? D::Q8(p + kBlockBytes) : _mm256_setzero_si256();
    WidePair w;
    w.lo = _mm512_cvtepi8_epi16(_mm256_permute2x128_si256(q0, q1, 0x20));  // low halves
    w.hi = _mm512_cvtepi8_epi16(_mm256_permute2x128_si256(q0, q1, 0x31));  // high halves
    // [d0, m0, d1, m1] (m = 0 without a min); a lone block's lanes 8-15 are unused.
    const uint32_t dm0 = kHasMin ? LoadU32(p) : LoadU16(p);
    const uint32_t dm1 = kTwo ? (kHasMin ? LoadU32(p + kBlockBytes) : LoadU16(p + kBlockBytes)) : 0;
    const __m128 dmf =
        _mm_cvtph_ps(_mm_setr_epi32(static_cast<int>(dm0), static_cast<int>(dm1), 0, 0));
    w.d = _mm512_permutexvar_ps(IdxPairHalves(0), _mm512_castps128_ps512(dmf));
    w.m = _mm512_permutexvar_ps(IdxPairHalves(1), _mm512_castps128_ps512(dmf));
    return w;
  }
};

template <bool kVnni>
struct LegacyKernels {
  template <class L, class D>
  static constexpr TypeKernels Make(void (*dequantize)(const void*, float*, int64_t)) {
    using E = Q16AEntry<LegacyWide<L, D>, kVnni>;
    using G = KGemmEntry<E, LGemm512<L, D, kVnni>>;  // matmul on kGemmMinCols columns or more
    return {L::kType, &Q16AActBytes, &QuantizeQ16AVec, &E::Matvec, &G::Matmul, dequantize};
  }
};

}  // namespace kx::cpu::avx512
