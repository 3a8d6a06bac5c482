// Half and bfloat16 conversions, exhaustively over all 65536 bit patterns.
#include <catch2/catch.hpp>

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/cpu_features.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace kx::test {
namespace {

using cpu::Bf16ToFloat;
using cpu::FloatToBf16;
using cpu::FloatToHalf;
using cpu::HalfToFloat;

__attribute__((target("f16c"))) float F16cToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("f16c"))) uint16_t F16cFromFloat(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

// Exact value of a half from the IEEE formula, in double (NaN for NaN).
double HalfFormula(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST_CASE("HalfToFloat is exact for all 65536 halves", "[kernels][half]") {
  const bool f16c = GetCpuFeatures().f16c;
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    const double want = HalfFormula(h);
    INFO("h=0x" << std::hex << i);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
    } else {
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == bool(h >> 15));  // ±0 kept
    }
    if (f16c) REQUIRE(std::bit_cast<uint32_t>(f) == std::bit_cast<uint32_t>(F16cToFloat(h)));
    // Every half survives a round trip (NaNs stay NaN, payload kept).
    REQUIRE(FloatToHalf(f) == (std::isnan(want) ? (h | 0x200) : h));
  }
}

TEST_CASE("FloatToHalf rounds to nearest even like F16C", "[kernels][half]") {
  // Boundaries: largest half, the overflow tie, subnormal ties, underflow.
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(65519.99f) == 0x7bff);
  CHECK(FloatToHalf(65520.0f) == 0x7c00);
  CHECK(FloatToHalf(-INFINITY) == 0xfc00);
  CHECK(FloatToHalf(0x1p-24f) == 0x0001);
  CHECK(FloatToHalf(0x1p-25f) == 0x0000);         // tie → even (0)
  CHECK(FloatToHalf(0x1.8p-24f) == 0x0002);       // tie 1.5 → 2
  CHECK(FloatToHalf(0x1.000002p-25f) == 0x0001);  // just above the tie
  CHECK(FloatToHalf(1.0f + 0x1p-11f) == 0x3c00);  // tie → even
  CHECK(FloatToHalf(1.0f + 0x1.8p-10f) == 0x3c02);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  if (!GetCpuFeatures().f16c) return;
  auto rng = SeededRng(707);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2) bits = (bits & 0x87ffffffu) | 0x30000000u;  // concentrate on the half range
    const float f = std::bit_cast<float>(bits);
    INFO("bits=0x" << std::hex << bits);
    REQUIRE(FloatToHalf(f) == F16cFromFloat(f));
  }
  // Every halfway point between adjacent halves, and its neighbours.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float mid = static_cast<float>(
        (static_cast<double>(HalfToFloat(static_cast<uint16_t>(h))) + HalfToFloat(static_cast<uint16_t>(h + 1))) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid}) {
      REQUIRE(FloatToHalf(f) == F16cFromFloat(f));
    }
  }
}

TEST_CASE("bfloat16 conversions are exact", "[kernels][half]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = Bf16ToFloat(h);
    REQUIRE(std::bit_cast<uint32_t>(f) == i << 16);
    const bool nan = std::isnan(f);
    REQUIRE(FloatToBf16(f) == (nan ? (h | 0x40) : h));
  }
  // Rounding: nearest of the two bf16 neighbours by exact double distance,
  // ties to the even one; NaN stays NaN and becomes quiet.
  auto rng = SeededRng(808);
  for (int i = 0; i < 1000000; ++i) {
    const auto bits = static_cast<uint32_t>(rng());
    const float f = std::bit_cast<float>(bits);
    const uint16_t got = FloatToBf16(f);
    INFO("bits=0x" << std::hex << bits);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(Bf16ToFloat(got)));
      REQUIRE((got & 0x40) != 0);
      continue;
    }
    const uint32_t lo = bits & 0xffff0000u;
    const double vf = f, vlo = std::bit_cast<float>(lo);
    const double vhi = (lo & 0x7fffffffu) == 0x7f7f0000u  // next is inf
                           ? std::copysign(0x1p128, vf)
                           : static_cast<double>(std::bit_cast<float>(lo + 0x10000u));
    const double dlo = std::fabs(vf - vlo), dhi = std::fabs(vhi - vf);
    uint16_t want = static_cast<uint16_t>(lo >> 16);
    if (dhi < dlo || (dhi == dlo && (want & 1))) want = static_cast<uint16_t>(want + 1);
    if (std::isinf(f)) want = static_cast<uint16_t>(bits >> 16);
    REQUIRE(got == want);
  }
}

}  // namespace
}  // namespace kx::test
