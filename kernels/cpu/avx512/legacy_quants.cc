// AVX-512 (F/BW/VL/DQ) Q4_0, Q5_0, Q5_1 kernels; see legacy_quants.h.
#include "kernels/cpu/avx512/legacy_quants.h"

namespace kx::cpu::avx512 {

using K = LegacyKernels<false>;
const TypeKernels kQ4_0 = K::Make<Q4_0Layout, simd::Q4_0Decode>(&ref::DequantizeQ4_0);
const TypeKernels kQ5_0 = K::Make<Q5_0Layout, simd::Q5_0Decode>(&ref::DequantizeQ5_0);
const TypeKernels kQ5_1 = K::Make<Q5_1Layout, simd::Q5_1Decode>(&ref::DequantizeQ5_1);

}  // namespace kx::cpu::avx512
