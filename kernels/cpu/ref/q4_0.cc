// Scalar Q4_0 kernels (layout: Q4_0Layout in kernels/cpu/legacy_quants.h).
#include "kernels/cpu/ref/legacy_ref.h"

namespace kx::cpu::ref {

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  LegacyRef<Q4_0Layout>::Dequantize(src, dst, n);
}
const TypeKernels kQ4_0 = LegacyRef<Q4_0Layout>::kKernels;

}  // namespace kx::cpu::ref
