// AVX-512 K-quant kernels (see kquant_tiles.h); also the VNNI table's.
#include "kernels/cpu/avx512/kquant_tiles.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ4_K = KQuantEntry<Q4KLayout, simd::Q4KDecode>::Make(&ref::DequantizeQ4_K);
const TypeKernels kQ5_K = KQuantEntry<Q5KLayout, simd::Q5KDecode>::Make(&ref::DequantizeQ5_K);
const TypeKernels kQ6_K = KQuantEntry<Q6KLayout, simd::Q6KDecode>::Make(&ref::DequantizeQ6_K);
const TypeKernels kQ3_K = KQuantEntry<Q3KLayout, simd::Q3KDecode>::Make(&ref::DequantizeQ3_K);
const TypeKernels kQ2_K = KQuantEntry<Q2KLayout, simd::Q2KDecode>::Make(&ref::DequantizeQ2_K);

}  // namespace kx::cpu::avx512
