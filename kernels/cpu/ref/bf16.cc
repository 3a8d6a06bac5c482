// Scalar BF16 kernels (see float_types.h).
#include "kernels/cpu/ref/float_types.h"

namespace kx::cpu::ref {

using KBF16 = FloatRowKernels<uint16_t, &Bf16ToFloat>;

void DequantizeBF16(const void* src, float* dst, int64_t n) { KBF16::Dequantize(src, dst, n); }

const TypeKernels kBF16 = {GgmlType::kBF16, &F32ActBytes,  &CopyF32Act,
                         &KBF16::Matvec,  &KBF16::Matmul,  &DequantizeBF16};

}  // namespace kx::cpu::ref
