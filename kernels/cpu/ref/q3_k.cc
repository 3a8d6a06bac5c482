// Scalar Q3_K kernels (layout: Q3KLayout in kernels/cpu/kquants.h).
#include "kernels/cpu/ref/kquant_ref.h"

namespace kx::cpu::ref {

void DequantizeQ3_K(const void* src, float* dst, int64_t n) {
  KQuantRef<Q3KLayout>::Dequantize(src, dst, n);
}
const TypeKernels kQ3_K = KQuantRef<Q3KLayout>::kKernels;

}  // namespace kx::cpu::ref
