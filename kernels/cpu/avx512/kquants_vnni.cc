// AVX-512 VNNI Q4_K and Q6_K kernels (vpdpwssd); see kquant_lanes.h.
#include "kernels/cpu/avx512/kquant_lanes.h"

namespace kx::cpu::avx512 {

const TypeKernels kQ4_KVnni = KLaneEntry<Q4KLanes, true>::Make(&ref::DequantizeQ4_K);
const TypeKernels kQ6_KVnni = KLaneEntry<Q6KLanes, true>::Make(&ref::DequantizeQ6_K);

}  // namespace kx::cpu::avx512
