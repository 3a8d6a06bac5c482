// Scalar Q6_K kernels (layout: Q6KLayout in kernels/cpu/kquants.h).
#include "kernels/cpu/ref/kquant_ref.h"

namespace kx::cpu::ref {

void DequantizeQ6_K(const void* src, float* dst, int64_t n) {
  KQuantRef<Q6KLayout>::Dequantize(src, dst, n);
}
const TypeKernels kQ6_K = KQuantRef<Q6KLayout>::kKernels;

}  // namespace kx::cpu::ref
