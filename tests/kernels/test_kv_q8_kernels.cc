// The Q8_0 KV cache kernels (VecKernels::dot_q8_0_rows, axpy_q8_0_rows) on
// every ISA against a float64 reference that decodes the blocks itself.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/cpu/quantize.h"
#include "test_util.h"

namespace kx::test {
namespace {

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr float kPoison = -7.77e33f;  // written nowhere by a correct kernel
constexpr int kGuard = 16;            // sentinel floats after every output
constexpr size_t kBlockBytes = 34;
constexpr int kBlock = 32;

double BlockD(const uint8_t* blk) { return cpu::HalfToFloat(GetU16(blk)); }
int BlockQ(const uint8_t* blk, int j) { return static_cast<int8_t>(blk[2 + j]); }

// Rows of n elements as Q8_0 at a byte stride wider than the row (a KV line
// holds other heads) and not a multiple of 4 (no alignment assumed); the
// bytes between rows are poison the kernels must not read into results.
struct Rows {
  size_t stride;
  std::vector<uint8_t> bytes;
};

Rows RandomQ8Rows(int64_t n, int64_t n_rows, std::mt19937_64& rng) {
  const size_t row_bytes = static_cast<size_t>(n / kBlock) * kBlockBytes;
  Rows r{row_bytes + 6, {}};
  r.bytes.assign(r.stride * static_cast<size_t>(n_rows) + 1, 0xFF);
  const std::vector<uint8_t> q = RandomRows(GgmlType::kQ8_0, n, n_rows, rng);
  for (int64_t t = 0; t < n_rows; ++t) {
    std::memcpy(&r.bytes[1 + t * r.stride], &q[t * row_bytes], row_bytes);  // +1: odd address
  }
  return r;
}

TEST_CASE("Q8_0 KV row kernels match a float64 reference", "[kernels][isa][kv]") {
  auto rng = SeededRng(811);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Isa isa : kAllIsas) {
    const cpu::KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    const cpu::VecKernels& v = t->vec;
    REQUIRE(v.dot_q8_0_rows != nullptr);
    REQUIRE(v.axpy_q8_0_rows != nullptr);
    for (int64_t n : {32, 64, 96, 256}) {
      for (int64_t n_rows : {1, 3, 70}) {
        INFO(IsaName(isa) << " n=" << n << " rows=" << n_rows);
        const Rows rows = RandomQ8Rows(n, n_rows, rng);
        const uint8_t* base = rows.bytes.data() + 1;
        std::vector<float> x(n), coeff(n_rows), y0(n);
        for (auto& e : x) e = normal(rng);
        for (auto& e : coeff) e = normal(rng);
        for (auto& e : y0) e = normal(rng);

        std::vector<float> dots(n_rows + kGuard, kPoison);
        v.dot_q8_0_rows(base, rows.stride, n_rows, x.data(), n, dots.data());
        for (int64_t r = 0; r < n_rows; ++r) {
          double want = 0, mag = 0;
          for (int64_t i = 0; i < n; ++i) {
            const uint8_t* blk = base + r * rows.stride + (i / kBlock) * kBlockBytes;
            const double p = BlockD(blk) * BlockQ(blk, static_cast<int>(i % kBlock)) * x[i];
            want += p;
            mag += std::fabs(p);
          }
          // Float sums of n + a few terms in any order: ≤ 2·(n + 16)·u·Σ|p|.
          REQUIRE(std::fabs(dots[r] - want) <= 2.0 * (n + 16) * kF32Eps * mag + 1e-30);
        }
        for (int g = 0; g < kGuard; ++g) REQUIRE(dots[n_rows + g] == kPoison);

        std::vector<float> y = y0;
        y.resize(n + kGuard, kPoison);
        v.axpy_q8_0_rows(coeff.data(), base, rows.stride, n_rows, y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          double want = y0[i], mag = std::fabs(y0[i]);
          for (int64_t r = 0; r < n_rows; ++r) {
            const uint8_t* blk = base + r * rows.stride + (i / kBlock) * kBlockBytes;
            const double p = coeff[r] * BlockD(blk) * BlockQ(blk, static_cast<int>(i % kBlock));
            want += p;
            mag += std::fabs(p);
          }
          // n_rows sequential sums, each with ≤ 2 roundings of the product.
          REQUIRE(std::fabs(y[i] - want) <= 2.0 * (n_rows + 4) * kF32Eps * mag + 1e-30);
        }
        for (int g = 0; g < kGuard; ++g) REQUIRE(y[n + g] == kPoison);
      }
    }
  }
}

// What the engine does: QuantizeRow on write, the kernels on read. The
// scores then stay within one Q8_0 step d per element (quantize.h) of float.
TEST_CASE("Q8_0 KV round trip stays within the quantization step", "[kernels][kv]") {
  auto rng = SeededRng(812);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const cpu::VecKernels& v = cpu::Kernels().vec;
  constexpr int64_t n = 64;
  std::vector<float> key(n), x(n);
  for (auto& e : key) e = 3.0f * normal(rng);
  for (auto& e : x) e = normal(rng);
  std::vector<uint8_t> row(n / kBlock * kBlockBytes);
  REQUIRE(cpu::QuantizeRow(GgmlType::kQ8_0, key.data(), n, row.data()).ok());
  double exact = 0, bound = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact += static_cast<double>(key[i]) * x[i];
    bound += BlockD(&row[(i / kBlock) * kBlockBytes]) * std::fabs(x[i]);
  }
  float got = kPoison;
  v.dot_q8_0_rows(row.data(), row.size(), 1, x.data(), n, &got);
  CHECK(std::fabs(got - exact) <= bound * 1.01 + 1e-4);
  // One value row with coefficient 1 reproduces the dequantized row.
  std::vector<float> y(n, 0.0f);
  const float one = 1.0f;
  v.axpy_q8_0_rows(&one, row.data(), row.size(), 1, y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(std::fabs(y[i] - key[i]) <= BlockD(&row[(i / kBlock) * kBlockBytes]) * 1.01);
  }
}

}  // namespace
}  // namespace kx::test
