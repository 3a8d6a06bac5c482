// Scalar Q4_K kernels (layout: Q4KLayout in kernels/cpu/kquants.h).
#include "kernels/cpu/ref/kquant_ref.h"

namespace kx::cpu::ref {

void DequantizeQ4_K(const void* src, float* dst, int64_t n) {
  KQuantRef<Q4KLayout>::Dequantize(src, dst, n);
}
const TypeKernels kQ4_K = KQuantRef<Q4KLayout>::kKernels;

}  // namespace kx::cpu::ref
