// Activation preparation shared by every ISA (see internal.h for why).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/internal.h"

namespace kx::cpu {

size_t Q8AActBytes(int64_t n) { return static_cast<size_t>(n / kQ8ABlock) * sizeof(BlockQ8A); }

// d = max|x|/127 and q = round_half_even(x/d) (as x·(1/d), the one form every
// ISA computes identically), clamped to ±127; s = d·Σq.
void QuantizeQ8A(const float* x, int64_t n, void* dst) {
  auto* out = static_cast<BlockQ8A*>(dst);
  const int64_t nb = n / kQ8ABlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQ8ABlock;
    float amax = 0.0f;
    for (int i = 0; i < kQ8ABlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / static_cast<float>(kQ8AMax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8A blk;
    int32_t sum = 0;
    for (int i = 0; i < kQ8ABlock; ++i) {
      float v = RoundHalfEven(xb[i] * id);
      // Written so that NaN lands on a bound instead of an undefined cast.
      if (!(v >= -kQ8AMax)) v = -kQ8AMax;
      if (v > kQ8AMax) v = kQ8AMax;
      blk.qs[i] = static_cast<int8_t>(v);
      sum += blk.qs[i];
    }
    blk.d = d;
    blk.s = d * static_cast<float>(sum);
    std::memcpy(&out[b], &blk, sizeof blk);
  }
}

size_t F32ActBytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

void CopyF32Act(const float* x, int64_t n, void* dst) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace kx::cpu
