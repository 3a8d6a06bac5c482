// Scalar F32 kernels (see float_types.h).
#include "kernels/cpu/ref/float_types.h"

namespace kx::cpu::ref {

using KF32 = FloatRowKernels<float, &DecodeF32>;

void DequantizeF32(const void* src, float* dst, int64_t n) { KF32::Dequantize(src, dst, n); }

const TypeKernels kF32 = {GgmlType::kF32, &F32ActBytes,  &CopyF32Act,
                         &KF32::Matvec,  &KF32::Matmul,  &DequantizeF32};

}  // namespace kx::cpu::ref
