// AVX-512 (F/BW/VL/DQ) Q8_0 kernels; see q8_0.h.
#include "kernels/cpu/avx512/q8_0.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ8_0 = {
    GgmlType::kQ8_0,
    &Q16AActBytes,
    &QuantizeQ16AVec,
    &Q8_0Entry<false>::Matvec,
    &KGemmEntry<Q8_0Entry<false>, LGemm512<Q8_0Layout, simd::Q8_0Decode, false>>::Matmul,
    &ref::DequantizeQ8_0};

}  // namespace kx::cpu::avx512
