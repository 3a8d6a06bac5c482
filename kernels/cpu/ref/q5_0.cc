// Scalar Q5_0 kernels (layout: Q5_0Layout in kernels/cpu/legacy_quants.h).
#include "kernels/cpu/ref/legacy_ref.h"

namespace kx::cpu::ref {

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  LegacyRef<Q5_0Layout>::Dequantize(src, dst, n);
}
const TypeKernels kQ5_0 = LegacyRef<Q5_0Layout>::kKernels;

}  // namespace kx::cpu::ref
