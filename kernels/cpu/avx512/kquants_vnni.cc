// AVX-512 VNNI Q4_K, Q5_K and Q6_K kernels: matvec and small matmuls in lane
// order (Q4_K and Q5_K on bytes with vpdpbusd, kquant_lanes_vnni.h; Q6_K on words with
// vpdpwssd, kquant_lanes.h), matmul on kGemmMinCols columns or more through
// kquant_gemm.h.
#include "kernels/cpu/avx512/kquant_gemm.h"
#include "kernels/cpu/avx512/kquant_lanes.h"
#include "kernels/cpu/avx512/kquant_lanes_vnni.h"

namespace kx::cpu::avx512 {
namespace {

using Q4KSmall = KLaneEntry<Q4KBytesVnni, true>;
using Q5KSmall = KLaneEntry<Q5KBytesVnni, true>;
using Q6KSmall = KLaneEntry<Q6KLanes, true>;

}  // namespace

const TypeKernels kQ4_KVnni =
    WithMatmul(Q4KSmall::Make(&ref::DequantizeQ4_K),
               &KGemmEntry<Q4KSmall, KGemm512<Q4KLayout, simd::Q4KDecode, true>>::Matmul);
// The prefill gemm as the AVX-512 table's (vpmaddwd): Q5_K's was never measured on vpdpwssd.
const TypeKernels kQ5_KVnni =
    WithMatmul(Q5KSmall::Make(&ref::DequantizeQ5_K),
               &KGemmEntry<Q5KSmall, KGemm512<Q5KLayout, simd::Q5KDecode, false>>::Matmul);
const TypeKernels kQ6_KVnni =
    WithMatmul(Q6KSmall::Make(&ref::DequantizeQ6_K),
               &KGemmEntry<Q6KSmall, KGemm512<Q6KLayout, simd::Q6KDecode, true>>::Matmul);

}  // namespace kx::cpu::avx512
