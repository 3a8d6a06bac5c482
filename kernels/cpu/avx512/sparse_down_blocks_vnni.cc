// AVX-512 VNNI down_blocks (sparse_down_blocks.h; vpdpwssd).
#include "kernels/cpu/avx512/sparse_down_blocks.h"

#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::avx512 {

void PutDownBlocksVnni(DownBlocksFn* slots, int n_slots) {
  PutSlot<DownBlocksFn>(slots, n_slots, GgmlType::kQ4_1, &DownBlocksQ4_1<true>);
}

}  // namespace kx::cpu::avx512
