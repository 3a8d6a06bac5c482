// Scalar Q5_K kernels (layout: Q5KLayout in kernels/cpu/kquants.h).
#include "kernels/cpu/ref/kquant_ref.h"

namespace kx::cpu::ref {

void DequantizeQ5_K(const void* src, float* dst, int64_t n) {
  KQuantRef<Q5KLayout>::Dequantize(src, dst, n);
}
const TypeKernels kQ5_K = KQuantRef<Q5KLayout>::kKernels;

}  // namespace kx::cpu::ref
