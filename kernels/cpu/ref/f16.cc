// Scalar F16 kernels (see float_types.h).
#include "kernels/cpu/ref/float_types.h"

namespace kx::cpu::ref {

using KF16 = FloatRowKernels<uint16_t, &HalfToFloat>;

void DequantizeF16(const void* src, float* dst, int64_t n) { KF16::Dequantize(src, dst, n); }

const TypeKernels kF16 = {GgmlType::kF16, &F32ActBytes,  &CopyF32Act,
                         &KF16::Matvec,  &KF16::Matmul,  &DequantizeF16};

}  // namespace kx::cpu::ref
