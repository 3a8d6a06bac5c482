// Activation preparation shared by every ISA (see internal.h for why).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/internal.h"

namespace kx::cpu {

size_t Q16AActBytes(int64_t n) { return static_cast<size_t>(n / kQ16ABlock) * sizeof(BlockQ16A); }

// d = max|x|/32767 and q = round_half_even(x/d), clamped to ±32767; s = d·Σq.
// A division rather than x·(1/d): for amax below ~1e-34, 1/d overflows to
// inf and 0·inf would be NaN (the quantizer is O(n), the division is free).
void QuantizeQ16A(const float* x, int64_t n, void* dst) {
  auto* out = static_cast<BlockQ16A*>(dst);
  const int64_t nb = n / kQ16ABlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQ16ABlock;
    float amax = 0.0f;
    for (int i = 0; i < kQ16ABlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / static_cast<float>(kQ16AMax);
    BlockQ16A blk;
    int32_t sum = 0;  // |Σq| ≤ 32·32767 < 2^24: exact as a float below
    for (int i = 0; i < kQ16ABlock; ++i) {
      float v = d != 0.0f ? RoundHalfEven(xb[i] / d) : 0.0f;
      // Written so that NaN lands on a bound instead of an undefined cast.
      if (!(v >= -kQ16AMax)) v = -kQ16AMax;
      if (v > kQ16AMax) v = kQ16AMax;
      blk.qs[i] = static_cast<int16_t>(v);
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
