// Scalar IEEE half / bfloat16 conversions. FloatToHalf matches the F16C
// instruction (vcvtps2ph, round to nearest even) bit for bit, NaNs included,
// so scalar tails and SIMD bodies agree (tests check all of this).
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace kx::cpu {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

constexpr uint32_t kF32ExpMask = 0x7f800000u;
constexpr uint32_t kF32AbsMask = 0x7fffffffu;
constexpr int kHalfToF32ExpBias = 127 - 15;
constexpr int kMantShift = 23 - 10;  // f32 vs f16 mantissa bits

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant·2^-24, exact in f32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return BitsFloat(FloatBits(mag) | sign);
  }
  if (exp == 0x1f) {
    // inf, or NaN made quiet (payload kept), as vcvtph2ps does.
    const uint32_t quiet = mant != 0 ? 0x400000u : 0u;
    return BitsFloat(sign | kF32ExpMask | quiet | (mant << kMantShift));
  }
  return BitsFloat(sign | ((exp + kHalfToF32ExpBias) << 23) | (mant << kMantShift));
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & kF32AbsMask;
  if (a > kF32ExpMask) {
    // NaN: quiet it and keep the top payload bits, as vcvtps2ph does.
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> kMantShift) & 0x3ffu));
  }
  constexpr uint32_t kHalfOverflow = 0x477ff000u;  // 65520: rounds (ties-even) to inf
  if (a >= kHalfOverflow) return static_cast<uint16_t>(sign | 0x7c00u);
  constexpr uint32_t kHalfMinNormal = 0x38800000u;  // 2^-14
  if (a < kHalfMinNormal) {
    // Subnormal result: adding 0.5 puts the f32 ulp at 2^-24 (the half
    // subnormal step), so the FPU rounds to nearest even for us.
    const float r = BitsFloat(a) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatBits(r) - FloatBits(0.5f)));
  }
  const uint32_t odd = (a >> kMantShift) & 1u;
  a += (static_cast<uint32_t>(-kHalfToF32ExpBias) << 23) + 0xfffu + odd;  // rebias + RNE
  return static_cast<uint16_t>(sign | (a >> kMantShift));
}

float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & kF32AbsMask) > kF32ExpMask) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN: force quiet (as ggml does)
  }
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace kx::cpu
