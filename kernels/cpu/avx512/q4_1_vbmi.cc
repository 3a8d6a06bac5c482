// AVX-512 VNNI + VBMI Q4_1 kernels (vpdpwssd, permute-based decode); see q4_1.h.
#include "kernels/cpu/avx512/q4_1.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ4_1VnniVbmi = {GgmlType::kQ4_1,
                                   &Q16AActBytes,
                                   &QuantizeQ16AVec,
                                   &Q16AEntry<Q4_1WideVbmi, true>::Matvec,
                                   &Q4_1Gemm<Q16AEntry<Q4_1WideVbmi, true>, true>::Matmul,
                                   &ref::DequantizeQ4_1};

}  // namespace kx::cpu::avx512
