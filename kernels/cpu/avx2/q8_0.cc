// AVX2 Q8_0 × BlockQ16A kernels (see q16a_tiles.h): each 16-byte half of a
// block sign-extends to int16 with one vpmovsxbw (-128 included, exactly).
#include "kernels/cpu/avx2/kquant_gemm.h"
#include "kernels/cpu/avx2/q16a_tiles.h"

namespace kx::cpu::avx2 {
namespace {

struct Q8_0Wide {
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static WideBlock Load(const uint8_t* p) {
    const uint8_t* q = p + offsetof(BlockQ8_0, qs);
    return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + kQK / 2))),
            HalfAt(p), 0.0f};
  }
};

using Entry = Q16AEntry<Q8_0Wide>;
// Matmul on kGemmMinCols columns or more: legacy_gemm.h (rows in vector lanes).
using Gemm = KGemmEntry<Entry, LGemm256<Q8_0Layout, simd::Q8_0Decode>>;

}  // namespace

const TypeKernels kQ8_0 = {GgmlType::kQ8_0, &Q16AActBytes, &QuantizeQ16A,
                           &Entry::Matvec,  &Gemm::Matmul, &ref::DequantizeQ8_0};

}  // namespace kx::cpu::avx2
