// Scalar down_blocks (kernels.h, down_blocks.h): the oracle for the SIMD
// versions and the kernel wherever they are missing. Per group: the
// coefficients quantized as the dense kernels' activations, then per output
// row the integer dot of its block with them and two fmas, in the order the
// SIMD kernels use, so every ISA gives the same y bit for bit.
#include <cmath>

#include "kernels/cpu/down_blocks.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::ref {
namespace {

void DownBlocksQ4_1(const uint8_t* const* parts, const float* coef, int64_t n_groups, int64_t i0,
                    int64_t i1, float* y) {
  constexpr int kT = kDownBlocksTile;
  for (int64_t g = 0; g < n_groups; ++g) {
    BlockQ16A c;
    QuantizeQ16A(coef + g * kDownBlocksGroup, kDownBlocksGroup, &c);
    if (c.d == 0.0f) continue;
    for (int64_t e = i0; e < i1; ++e) {
      const uint8_t* tile = parts[g] + static_cast<uint64_t>(e / kT) * kT * sizeof(BlockQ4_1);
      const int r = static_cast<int>(e % kT);
      const float d = HalfToFloat(LoadU16(tile + 2 * r));
      const float m = HalfToFloat(LoadU16(tile + 2 * kT + 2 * r));
      int32_t sum = 0;
      for (int i = 0; i < 16; ++i) {
        const uint8_t byte = tile[4 * kT + (i / 2) * 2 * kT + 2 * r + i % 2];
        sum += (byte & 0x0f) * c.qs[i] + (byte >> 4) * c.qs[i + 16];
      }
      y[e] = std::fma(static_cast<float>(sum), d * c.d, y[e]);
      y[e] = std::fma(m, c.s, y[e]);
    }
  }
}

}  // namespace

void PutDownBlocks(DownBlocksFn* slots, int n_slots) {
  PutSlot<DownBlocksFn>(slots, n_slots, GgmlType::kQ4_1, &DownBlocksQ4_1);
}

}  // namespace kx::cpu::ref
