// AVX2 Q4_1 × BlockQ16A kernels (see q16a_tiles.h): a block's 16 nibble
// bytes widen with one vpmovzxbw; the low nibbles are elements 0-15, the
// high ones 16-31.
#include "kernels/cpu/avx2/kquant_gemm.h"
#include "kernels/cpu/avx2/q16a_tiles.h"

namespace kx::cpu::avx2 {
namespace {

struct Q4_1Wide {
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_1);
  static constexpr bool kHasMin = true;
  static WideBlock Load(const uint8_t* p) {
    const __m256i v = _mm256_cvtepu8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(BlockQ4_1, qs))));
    return {_mm256_and_si256(v, _mm256_set1_epi16(0x0f)), _mm256_srli_epi16(v, 4), HalfAt(p),
            HalfAt(p + 2)};
  }
};

using Entry = Q16AEntry<Q4_1Wide>;
// Matmul on kGemmMinCols columns or more: legacy_gemm.h (rows in vector lanes).
using Gemm = KGemmEntry<Entry, LGemm256<Q4_1Layout, simd::Q4_1Decode>>;

}  // namespace

const TypeKernels kQ4_1 = {GgmlType::kQ4_1, &Q16AActBytes, &QuantizeQ16A,
                           &Entry::Matvec,  &Gemm::Matmul, &ref::DequantizeQ4_1};

}  // namespace kx::cpu::avx2
