// Scalar Q5_1 kernels (layout: Q5_1Layout in kernels/cpu/legacy_quants.h).
#include "kernels/cpu/ref/legacy_ref.h"

namespace kx::cpu::ref {

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  LegacyRef<Q5_1Layout>::Dequantize(src, dst, n);
}
const TypeKernels kQ5_1 = LegacyRef<Q5_1Layout>::kKernels;

}  // namespace kx::cpu::ref
