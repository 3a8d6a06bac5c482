// AVX-512 VNNI Q8_0 kernels (vpdpwssd); see q8_0.h.
#include "kernels/cpu/avx512/q8_0.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ8_0Vnni = {
    GgmlType::kQ8_0,
    &Q16AActBytes,
    &QuantizeQ16AVec,
    &Q8_0Entry<true>::Matvec,
    &KGemmEntry<Q8_0Entry<true>, LGemm512<Q8_0Layout, simd::Q8_0Decode, true>>::Matmul,
    &ref::DequantizeQ8_0};

}  // namespace kx::cpu::avx512
