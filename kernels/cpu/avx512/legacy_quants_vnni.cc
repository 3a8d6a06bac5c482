// AVX-512 VNNI Q4_0, Q5_0, Q5_1 kernels (vpdpwssd); see legacy_quants.h.
#include "kernels/cpu/avx512/legacy_quants.h"

namespace kx::cpu::avx512 {

using KV = LegacyKernels<true>;
const TypeKernels kQ4_0Vnni = KV::Make<Q4_0Layout, simd::Q4_0Decode>(&ref::DequantizeQ4_0);
const TypeKernels kQ5_0Vnni = KV::Make<Q5_0Layout, simd::Q5_0Decode>(&ref::DequantizeQ5_0);
const TypeKernels kQ5_1Vnni = KV::Make<Q5_1Layout, simd::Q5_1Decode>(&ref::DequantizeQ5_1);

}  // namespace kx::cpu::avx512
