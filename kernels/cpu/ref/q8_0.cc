// Scalar Q8_0 kernels (layout: Q8_0Layout in kernels/cpu/legacy_quants.h): the
// oracle for the SIMD versions, and the fallback. The SIMD tables reuse
// DequantizeQ8_0, which matches gguf-py bit for bit.
#include "kernels/cpu/ref/legacy_ref.h"

namespace kx::cpu::ref {

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  LegacyRef<Q8_0Layout>::Dequantize(src, dst, n);
}
const TypeKernels kQ8_0 = LegacyRef<Q8_0Layout>::kKernels;

}  // namespace kx::cpu::ref
