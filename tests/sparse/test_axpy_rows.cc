// axpy_rows (kernels.h) on every ISA the CPU runs: the scalar kernel against
// a float64 oracle that decodes the blocks itself, every SIMD kernel against
// the scalar one, columns outside [i0, i1) untouched, and splitting the
// columns changes no bit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/kernels.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace kx::test {
namespace {

constexpr GgmlType kAxpyTypes[] = {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_0,
                                   GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kF16,
                                   GgmlType::kBF16, GgmlType::kF32};
constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr float kPoison = -7.77e33f;
constexpr int kGuard = 16;

struct Case {
  int64_t n;
  int64_t n_rows;
  int64_t i0, i1;
};

// Rows scattered in one buffer in shuffled order (the sparse FFN's rows sit
// in different bundles), as pointers.
struct Rows {
  std::vector<uint8_t> data;
  std::vector<const uint8_t*> ptrs;
};

Rows MakeRows(GgmlType t, int64_t n, int64_t n_rows, std::mt19937_64& rng) {
  Rows r;
  r.data = RandomRows(t, n, n_rows, rng);
  std::vector<int64_t> order(static_cast<size_t>(n_rows));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t k : order) r.ptrs.push_back(r.data.data() + k * RowBytes(t, n));
  return r;
}

TEST_CASE("axpy_rows matches float64 and the scalar kernel on every ISA", "[sparse][axpy]") {
  auto rng = SeededRng(7101);
  const cpu::KernelTable* scalar = cpu::KernelsFor(Isa::kScalar);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Case cases[] = {{32, 1, 0, 32},     {576, 0, 0, 576},   {576, 1, 0, 576},
                        {576, 17, 0, 576},  {576, 100, 64, 512}, {576, 33, 288, 576},
                        {1536, 40, 0, 1536}, {1024, 7, 32, 96},  {256, 300, 0, 256}};
  for (GgmlType t : kAxpyTypes) {
    for (const Case& c : cases) {
      INFO(TypeName(t) << " n=" << c.n << " rows=" << c.n_rows << " [" << c.i0 << "," << c.i1
                       << ")");
      const Rows rows = MakeRows(t, c.n, c.n_rows, rng);
      std::vector<float> coef(static_cast<size_t>(c.n_rows));
      for (float& v : coef) v = normal(rng);
      std::vector<float> y0(static_cast<size_t>(c.n) + kGuard, kPoison);
      for (int64_t i = c.i0; i < c.i1; ++i) y0[static_cast<size_t>(i)] = normal(rng);

      // Float64 oracle and its rounding bound: chains of n_rows (+ min term) float adds.
      std::vector<double> want(static_cast<size_t>(c.n)), bound(static_cast<size_t>(c.n));
      for (int64_t i = c.i0; i < c.i1; ++i) {
        double s = y0[static_cast<size_t>(i)], abs_s = std::fabs(s);
        for (int64_t r = 0; r < c.n_rows; ++r) {
          const double cr = coef[static_cast<size_t>(r)];
          s += cr * WeightAt(t, rows.ptrs[static_cast<size_t>(r)], i);
          abs_s += std::fabs(cr) * AbsTermWeight(t, rows.ptrs[static_cast<size_t>(r)], i);
        }
        want[static_cast<size_t>(i)] = s;
        bound[static_cast<size_t>(i)] = 2.0 * static_cast<double>(c.n_rows + 4) * kF32Eps * abs_s;
      }

      std::vector<float> y_ref = y0;
      scalar->AxpyRows(t)(rows.ptrs.data(), coef.data(), c.n_rows, c.i0, c.i1, y_ref.data());
      for (int64_t i = 0; i < c.n + kGuard; ++i) {
        const auto k = static_cast<size_t>(i);
        if (i < c.i0 || i >= c.i1) {
          REQUIRE(std::memcmp(&y_ref[k], &y0[k], sizeof(float)) == 0);
        } else {
          INFO("scalar i=" << i);
          REQUIRE(std::fabs(y_ref[k] - want[k]) <= bound[k]);
        }
      }

      for (Isa isa : kIsas) {
        const cpu::KernelTable* table = cpu::KernelsFor(isa);
        if (table == nullptr) continue;
        INFO(IsaName(isa));
        const cpu::AxpyRowsFn fn = table->AxpyRows(t);
        REQUIRE(fn != nullptr);
        std::vector<float> y = y0;
        fn(rows.ptrs.data(), coef.data(), c.n_rows, c.i0, c.i1, y.data());
        for (int64_t i = 0; i < c.n + kGuard; ++i) {
          const auto k = static_cast<size_t>(i);
          if (i < c.i0 || i >= c.i1) {
            REQUIRE(std::memcmp(&y[k], &y0[k], sizeof(float)) == 0);
          } else {
            INFO("i=" << i << " got " << y[k] << " scalar " << y_ref[k]);
            REQUIRE(std::fabs(y[k] - want[k]) <= bound[k]);
            REQUIRE(std::fabs(y[k] - y_ref[k]) <= 2 * bound[k]);
          }
        }
        // Any column split at block boundaries gives the same bits.
        const int64_t block = GetTypeInfo(t).block_size == 1 ? 32 : GetTypeInfo(t).block_size;
        for (int64_t mid = c.i0; mid <= c.i1; mid += block) {
          std::vector<float> y2 = y0;
          fn(rows.ptrs.data(), coef.data(), c.n_rows, c.i0, mid, y2.data());
          fn(rows.ptrs.data(), coef.data(), c.n_rows, mid, c.i1, y2.data());
          REQUIRE(std::memcmp(y2.data(), y.data(), y.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("every table has axpy_rows for the types QuantizeRow writes", "[sparse][axpy]") {
  for (Isa isa : kIsas) {
    const cpu::KernelTable* table = cpu::KernelsFor(isa);
    if (table == nullptr) continue;
    for (GgmlType t : kAxpyTypes) CHECK(table->AxpyRows(t) != nullptr);
    CHECK(table->AxpyRows(GgmlType::kQ4_K) == nullptr);
    CHECK(table->AxpyRows(static_cast<GgmlType>(1000)) == nullptr);
  }
}

}  // namespace
}  // namespace kx::test
