// Scalar Q4_1 kernels (layout: Q4_1Layout in kernels/cpu/legacy_quants.h): the
// oracle for the SIMD versions, and the fallback. The SIMD tables reuse
// DequantizeQ4_1, which matches gguf-py bit for bit.
#include "kernels/cpu/ref/legacy_ref.h"

namespace kx::cpu::ref {

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  LegacyRef<Q4_1Layout>::Dequantize(src, dst, n);
}
const TypeKernels kQ4_1 = LegacyRef<Q4_1Layout>::kKernels;

}  // namespace kx::cpu::ref
