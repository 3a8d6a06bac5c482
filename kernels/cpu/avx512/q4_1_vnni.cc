// AVX-512 VNNI Q4_1 kernels (vpdpwssd); see q4_1.h.
#include "kernels/cpu/avx512/q4_1.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ4_1Vnni = {GgmlType::kQ4_1,
                               &Q16AActBytes,
                               &QuantizeQ16AVec,
                               &Q4_1Entry<true>::Matvec,
                               &Q4_1Gemm<Q4_1Entry<true>, true>::Matmul,
                               &ref::DequantizeQ4_1};

}  // namespace kx::cpu::avx512
