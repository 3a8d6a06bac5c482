// AVX2 Q4_0, Q5_0, Q5_1 × BlockQ16A kernels (see q16a_tiles.h): the shared
// decoder (simd_decode.h) gives a block's 32 q as int8, sign-extended to two
// int16 vectors (elements 0-15, 16-31). Matmuls on kGemmMinCols columns or
// more run legacy_gemm.h (rows in vector lanes).
#include "kernels/cpu/avx2/kquant_gemm.h"
#include "kernels/cpu/avx2/q16a_tiles.h"
#include "kernels/cpu/simd_decode.h"

namespace kx::cpu::avx2 {
namespace {

template <class L, class D>
struct LegacyWide {
  static constexpr size_t kBlockBytes = L::kBlockBytes;
  static constexpr bool kHasMin = L::kHasMin;
  static WideBlock Load(const uint8_t* p) {
    const __m256i q = D::Q8(p);
    return {_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), HalfAt(p),
            kHasMin ? HalfAt(p + 2) : 0.0f};
  }
};

template <class L, class D>
constexpr TypeKernels Make(void (*dequantize)(const void*, float*, int64_t)) {
  using E = Q16AEntry<LegacyWide<L, D>>;
  using G = KGemmEntry<E, LGemm256<L, D>>;  // matmul on kGemmMinCols columns or more
  return {L::kType, &Q16AActBytes, &QuantizeQ16A, &E::Matvec, &G::Matmul, dequantize};
}

}  // namespace

const TypeKernels kQ4_0 = Make<Q4_0Layout, simd::Q4_0Decode>(&ref::DequantizeQ4_0);
const TypeKernels kQ5_0 = Make<Q5_0Layout, simd::Q5_0Decode>(&ref::DequantizeQ5_0);
const TypeKernels kQ5_1 = Make<Q5_1Layout, simd::Q5_1Decode>(&ref::DequantizeQ5_1);

}  // namespace kx::cpu::avx2
