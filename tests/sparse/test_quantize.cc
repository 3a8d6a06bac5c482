// QuantizeRow (kernels/cpu/quantize.h): quantize → dequantize (the kernels'
// own dequantize) lands within one quantization step of every input.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quantize.h"
#include "test_util.h"

namespace kx::test {
namespace {

constexpr GgmlType kQuantTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                    GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kF16,
                                    GgmlType::kBF16, GgmlType::kF32};
constexpr uint8_t kPoisonByte = 0xCD;
constexpr int kGuard = 64;
// Half-precision storage of d and m moves the grid by up to 2^-11 relative
// per scale; allow that much of the block's magnitude on top of one step.
constexpr double kHalfSlack = 0x1p-10;

size_t RowBytes(GgmlType t, int64_t n) {
  const TypeInfo& info = GetTypeInfo(t);
  return static_cast<size_t>(n / info.block_size * info.block_bytes);
}

// One step of the type's grid for this block (what round-to-nearest may lose
// at most twice over, plus clamping at the ends).
double StepOf(GgmlType t, const float* x, int len) {
  double lo = x[0], hi = x[0], amax = 0;
  for (int j = 0; j < len; ++j) {
    lo = std::min<double>(lo, x[j]);
    hi = std::max<double>(hi, x[j]);
    amax = std::max<double>(amax, std::fabs(x[j]));
  }
  switch (t) {
    case GgmlType::kQ4_0: return amax / 8;
    case GgmlType::kQ5_0: return amax / 16;
    case GgmlType::kQ8_0: return amax / 127;
    case GgmlType::kQ4_1: return (hi - lo) / 15;
    case GgmlType::kQ5_1: return (hi - lo) / 31;
    default: return 0;
  }
}

// Rows of different character: normal, one outlier, all one sign, tiny.
std::vector<float> RandomRow(int64_t n, int kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  if (kind == 1) x[static_cast<size_t>(rng() % n)] *= 40.0f;
  if (kind == 2) for (float& v : x) v = std::fabs(v) + 3.0f;
  if (kind == 3) for (float& v : x) v *= 1e-3f;
  return x;
}

TEST_CASE("QuantizeRow round-trips within one step for every type", "[sparse][quantize]") {
  auto rng = SeededRng(7001);
  const cpu::KernelTable& scalar = *cpu::KernelsFor(Isa::kScalar);
  for (GgmlType t : kQuantTypes) {
    REQUIRE(cpu::CanQuantize(t));
    for (int64_t n : {32, 64, 576}) {
      for (int kind = 0; kind < 4; ++kind) {
        INFO(TypeName(t) << " n=" << n << " kind=" << kind);
        const std::vector<float> x = RandomRow(n, kind, rng);
        const size_t bytes = RowBytes(t, n);
        std::vector<uint8_t> q(bytes + kGuard, kPoisonByte);
        REQUIRE(cpu::QuantizeRow(t, x.data(), n, q.data()).ok());
        for (size_t i = bytes; i < q.size(); ++i) REQUIRE(q[i] == kPoisonByte);
        std::vector<float> back(static_cast<size_t>(n));
        scalar.For(t)->dequantize(q.data(), back.data(), n);
        if (t == GgmlType::kF32) {
          REQUIRE(std::memcmp(back.data(), x.data(), x.size() * sizeof(float)) == 0);
          continue;
        }
        for (int64_t i = 0; i < n; ++i) {
          const double v = x[static_cast<size_t>(i)];
          const double err = std::fabs(back[static_cast<size_t>(i)] - v);
          double tol;
          if (t == GgmlType::kF16) {
            tol = std::fabs(v) * 0x1p-11 + 0x1p-24;
          } else if (t == GgmlType::kBF16) {
            tol = std::fabs(v) * 0x1p-8;
          } else {
            const float* blk = &x[static_cast<size_t>(i / 32 * 32)];
            double amax = 0;
            for (int j = 0; j < 32; ++j) amax = std::max<double>(amax, std::fabs(blk[j]));
            tol = StepOf(t, blk, 32) + kHalfSlack * amax;
          }
          INFO("i=" << i << " x=" << v << " back=" << back[static_cast<size_t>(i)]);
          REQUIRE(err <= tol);
        }
      }
    }
  }
}

TEST_CASE("QuantizeRow picks ggml-style scales", "[sparse][quantize]") {
  auto rng = SeededRng(7002);
  const std::vector<float> x = RandomRow(32, 1, rng);
  float amax = 0, lo = x[0];
  for (float v : x) {
    amax = std::max(amax, std::fabs(v));
    lo = std::min(lo, v);
  }
  uint8_t q8[34], q41[20];
  REQUIRE(cpu::QuantizeRow(GgmlType::kQ8_0, x.data(), 32, q8).ok());
  REQUIRE(cpu::QuantizeRow(GgmlType::kQ4_1, x.data(), 32, q41).ok());
  uint16_t d8, m41;
  std::memcpy(&d8, q8, 2);
  std::memcpy(&m41, q41 + 2, 2);
  CHECK(d8 == cpu::FloatToHalf(amax / 127));
  CHECK(m41 == cpu::FloatToHalf(lo));
  // The largest-magnitude element is exactly representable at the end of Q8_0's range.
  int max_q = 0;
  for (int j = 0; j < 32; ++j) max_q = std::max(max_q, std::abs(static_cast<int8_t>(q8[2 + j])));
  CHECK(max_q == 127);
}

TEST_CASE("QuantizeRow handles an all-zero block", "[sparse][quantize]") {
  const std::vector<float> zeros(32, 0.0f);
  for (GgmlType t : kQuantTypes) {
    std::vector<uint8_t> q(RowBytes(t, 32), kPoisonByte);
    REQUIRE(cpu::QuantizeRow(t, zeros.data(), 32, q.data()).ok());
    std::vector<float> back(32, 1.0f);
    cpu::KernelsFor(Isa::kScalar)->For(t)->dequantize(q.data(), back.data(), 32);
    for (float v : back) CHECK(v == 0.0f);
  }
}

TEST_CASE("QuantizeRow refuses types and sizes it cannot write", "[sparse][quantize]") {
  const std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> dst(4096);
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_1, GgmlType::kIQ4_NL}) {
    CHECK_FALSE(cpu::CanQuantize(t));
    const absl::Status s = cpu::QuantizeRow(t, x.data(), 256, dst.data());
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(std::string(s.message()), Catch::Contains(TypeName(t)));
  }
  const absl::Status s = cpu::QuantizeRow(GgmlType::kQ8_0, x.data(), 33, dst.data());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("Q8_0"));
}

}  // namespace
}  // namespace kx::test
