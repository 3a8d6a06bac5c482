// AVX2 K-quant kernels: Q4_K and Q6_K in lane order (kquant_lanes.h), the
// others per block (kquant_tiles.h).
#include "kernels/cpu/avx2/kquant_lanes.h"
#include "kernels/cpu/avx2/kquant_tiles.h"

namespace kx::cpu::avx2 {

const TypeKernels kQ4_K = KLaneEntry<Q4KLanes, false>::Make(&ref::DequantizeQ4_K);
const TypeKernels kQ5_K = KQuantEntry<Q5KLayout, simd::Q5KDecode>::Make(&ref::DequantizeQ5_K);
const TypeKernels kQ6_K = KLaneEntry<Q6KLanes, false>::Make(&ref::DequantizeQ6_K);
const TypeKernels kQ3_K = KQuantEntry<Q3KLayout, simd::Q3KDecode>::Make(&ref::DequantizeQ3_K);
const TypeKernels kQ2_K = KQuantEntry<Q2KLayout, simd::Q2KDecode>::Make(&ref::DequantizeQ2_K);

}  // namespace kx::cpu::avx2
