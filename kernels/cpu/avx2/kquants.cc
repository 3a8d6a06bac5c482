// AVX2 K-quant kernels: Q4_K, Q5_K and Q6_K in lane order (kquant_lanes.h), the
// others per block (kquant_tiles.h). Matmul on kGemmMinCols columns or more:
// kquant_gemm.h (Q2_K's mins per 16 elements keep it on its tiles).
#include "kernels/cpu/avx2/kquant_gemm.h"
#include "kernels/cpu/avx2/kquant_lanes.h"
#include "kernels/cpu/avx2/kquant_tiles.h"

namespace kx::cpu::avx2 {
namespace {

using Q4KSmall = KLaneEntry<Q4KLanes, false>;
using Q6KSmall = KLaneEntry<Q6KLanes, false>;
using Q5KSmall = KLaneEntry<Q5KLanes, false>;
using Q3KSmall = KQuantEntry<Q3KLayout, simd::Q3KDecode>;

}  // namespace

const TypeKernels kQ4_K =
    WithMatmul(Q4KSmall::Make(&ref::DequantizeQ4_K),
               &KGemmEntry<Q4KSmall, KGemm256<Q4KLayout, simd::Q4KDecode>>::Matmul);
const TypeKernels kQ5_K =
    WithMatmul(Q5KSmall::Make(&ref::DequantizeQ5_K),
               &KGemmEntry<Q5KSmall, KGemm256<Q5KLayout, simd::Q5KDecode>>::Matmul);
const TypeKernels kQ6_K =
    WithMatmul(Q6KSmall::Make(&ref::DequantizeQ6_K),
               &KGemmEntry<Q6KSmall, KGemm256<Q6KLayout, simd::Q6KDecode>>::Matmul);
const TypeKernels kQ3_K =
    WithMatmul(Q3KSmall::Make(&ref::DequantizeQ3_K),
               &KGemmEntry<Q3KSmall, KGemm256<Q3KLayout, simd::Q3KDecode>>::Matmul);
const TypeKernels kQ2_K = KQuantEntry<Q2KLayout, simd::Q2KDecode>::Make(&ref::DequantizeQ2_K);

}  // namespace kx::cpu::avx2
