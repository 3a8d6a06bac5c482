// axpy_rows_f16 (the sparse down projection over F16 rows) under the emulator against a
// float64 CPU reference, through the op registry as the module's users call it.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cuda/axpy_rows_f16.cuh"

namespace {

using AxpyFn = kx_cuda_status (*)(const kx_cuda_axpy_rows_f16_args*, void*);

void CheckShape(std::mt19937_64& rng, int64_t n_rows, int64_t n_cols, int64_t stride,
                int64_t n_active) {
  const std::vector<uint16_t> w = kx::test::RandomHalves(rng, n_rows * stride);
  std::vector<int32_t> rows(n_active);
  for (int32_t& r : rows) r = static_cast<int32_t>(rng() % n_rows);
  const std::vector<float> coeff = kx::test::RandomFloats(rng, n_active);
  std::vector<float> dst = kx::test::RandomFloats(rng, n_cols);
  std::vector<float> want(n_cols);
  for (int64_t j = 0; j < n_cols; ++j) {
    double acc = dst[j];
    for (int64_t k = 0; k < n_active; ++k) {
      acc += double{coeff[k]} * kx::cpu::HalfToFloat(w[rows[k] * stride + j]);
    }
    want[j] = static_cast<float>(acc);
  }
  kx_cuda_axpy_rows_f16_args args{};
  args.struct_size = sizeof args;
  args.w = w.data();
  args.n_rows = n_rows;
  args.n_cols = n_cols;
  args.w_row_stride = stride;
  args.rows = rows.data();
  args.coeff = coeff.data();
  args.n_active = n_active;
  args.dst = dst.data();
  const AxpyFn axpy = kx::test::FindOpOrFail<AxpyFn>("axpy_rows_f16");
  REQUIRE(axpy(&args, nullptr) == KX_CUDA_OK);
  // Float sums of n_active products of |coeff| <= 1 and |w| <= 1, in any order (atomics).
  const double tol = 1e-6 * (n_active + 1) * 4;
  INFO("rows " << n_rows << " cols " << n_cols << " stride " << stride << " active "
               << n_active);
  REQUIRE(kx::test::AllClose(dst.data(), want.data(), n_cols, tol, 1e-6));
}

}  // namespace

TEST_CASE("axpy_rows_f16 under the emulator equals the CPU reference", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(21);
  CheckShape(rng, 64, 576, 576, 40);    // wide loads, several row splits
  CheckShape(rng, 17, 37, 40, 5);       // ragged: scalar path, stride > cols
  CheckShape(rng, 1, 8, 8, 1);          // one row
  CheckShape(rng, 300, 136, 136, 260);  // many rows split across the grid
}

TEST_CASE("axpy_rows_f16: zero active rows is a no-op, bad arguments are refused",
          "[cuda_emu]") {
  std::vector<float> dst = {1.0f, 2.0f};
  kx_cuda_axpy_rows_f16_args args{};
  args.struct_size = sizeof args;
  args.dst = dst.data();
  args.n_active = 0;
  REQUIRE(kx_cuda_axpy_rows_f16(&args, nullptr) == KX_CUDA_OK);
  REQUIRE(dst[0] == 1.0f);
  args.n_active = 3;
  REQUIRE(kx_cuda_axpy_rows_f16(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  REQUIRE(kx_cuda_axpy_rows_f16(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
}
