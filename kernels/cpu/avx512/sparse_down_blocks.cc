// AVX-512 (no VNNI) down_blocks (sparse_down_blocks.h), and the choice
// between it and the VNNI variant.
#include "kernels/cpu/avx512/sparse_down_blocks.h"

#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::avx512 {

void PutDownBlocksBase(DownBlocksFn* slots, int n_slots) {
  PutSlot<DownBlocksFn>(slots, n_slots, GgmlType::kQ4_1, &DownBlocksQ4_1<false>);
}

void PutDownBlocks(DownBlocksFn* slots, int n_slots, bool vnni) {
  if (vnni) {
    PutDownBlocksVnni(slots, n_slots);
  } else {
    PutDownBlocksBase(slots, n_slots);
  }
}

}  // namespace kx::cpu::avx512
