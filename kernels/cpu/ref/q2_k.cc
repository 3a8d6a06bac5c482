// Scalar Q2_K kernels (layout: Q2KLayout in kernels/cpu/kquants.h).
#include "kernels/cpu/ref/kquant_ref.h"

namespace kx::cpu::ref {

void DequantizeQ2_K(const void* src, float* dst, int64_t n) {
  KQuantRef<Q2KLayout>::Dequantize(src, dst, n);
}
const TypeKernels kQ2_K = KQuantRef<Q2KLayout>::kKernels;

}  // namespace kx::cpu::ref
