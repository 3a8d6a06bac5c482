// AVX-512 (F/BW/VL/DQ) Q4_1 kernels; see q4_1.h.
#include "kernels/cpu/avx512/q4_1.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ4_1 = {GgmlType::kQ4_1,
                           &Q16AActBytes,
                           &QuantizeQ16AVec,
                           &Q4_1Entry<false>::Matvec,
                           &Q4_1Gemm<Q4_1Entry<false>, false>::Matmul,
                           &ref::DequantizeQ4_1};

}  // namespace kx::cpu::avx512
