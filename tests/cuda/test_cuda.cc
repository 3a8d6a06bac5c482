// The CUDA backend module against CPU references. Skips (exit 77) without a usable GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "device/device_loader.h"
#include "test_util.h"

namespace kx {
namespace {

// F16 bits -> float, exactly (every binary16 value is a float). Written out so the test
// does not depend on the library it checks.
float HalfBitsToFloat(uint16_t h) {
  constexpr int kHalfMantBits = 10;
  constexpr uint32_t kHalfExpMask = 0x1f;
  constexpr uint32_t kHalfMantMask = 0x3ff;
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  const uint32_t exp = (h >> kHalfMantBits) & kHalfExpMask;
  const uint32_t mant = h & kHalfMantMask;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);  // subnormal
  if (exp == kHalfExpMask) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
}

// Random finite F16 of magnitude in about [2^-6, 2^2): the range of real FFN weights and
// then some, never zero, both signs.
uint16_t RandomHalf(std::mt19937_64& rng) {
  std::uniform_int_distribution<uint32_t> mant(0, 0x3ff);
  std::uniform_int_distribution<uint32_t> exp(15 - 6, 15 + 1);
  std::uniform_int_distribution<uint32_t> sign(0, 1);
  return static_cast<uint16_t>((sign(rng) << 15) | (exp(rng) << 10) | mant(rng));
}

// The module's table, or skip this whole program with the reason. Skips when the module
// file is absent or no GPU is usable; a module that is there but does not load (e.g. a
// stray libcudart.so dependency, a wrong ABI) fails instead.
const CudaApi& ApiOrSkip() {
  absl::StatusOr<const CudaApi*> module = LoadCudaModule();
  if (absl::IsNotFound(module.status())) test::Skip(std::string(module.status().message()));
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  absl::StatusOr<const CudaApi*> api = LoadCudaBackend();
  if (!api.ok()) test::Skip(std::string(api.status().message()));
  return **api;
}

#define REQUIRE_CUDA_OK(api, call)                          \
  do {                                                      \
    const absl::Status s_ = CudaCall((api), (call), #call); \
    INFO(s_.ToString());                                    \
    REQUIRE(s_.ok());                                       \
  } while (0)

// Device buffer freed on scope exit.
struct DeviceBuffer {
  const CudaApi* api = nullptr;
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (api) api->free(ptr);
  }
};

template <typename T>
void Upload(const CudaApi& api, DeviceBuffer& buf, const std::vector<T>& src) {
  buf.api = &api;
  const uint64_t bytes = static_cast<uint64_t>(src.size()) * sizeof(T);
  REQUIRE_CUDA_OK(api, api.alloc(bytes, &buf.ptr));
  REQUIRE_CUDA_OK(api, api.memcpy_h2d(buf.ptr, src.data(), bytes));
}

struct AxpyCase {
  int64_t n_rows;
  int64_t n_cols;
  int64_t stride;
  int64_t n_active;
};

void RunAxpyCase(const CudaApi& api, const AxpyCase& c, std::mt19937_64& rng) {
  INFO("n_rows " << c.n_rows << " n_cols " << c.n_cols << " stride " << c.stride << " n_active "
                 << c.n_active);
  // Sentinel columns after n_cols in dst must survive untouched.
  constexpr int64_t kGuard = 16;
  constexpr float kSentinel = -12345.5f;

  std::vector<uint16_t> w(static_cast<size_t>(c.n_rows * c.stride));
  for (auto& h : w) h = RandomHalf(rng);
  std::vector<int32_t> all(static_cast<size_t>(c.n_rows));
  for (int64_t i = 0; i < c.n_rows; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int32_t> rows(all.begin(), all.begin() + c.n_active);  // distinct, unsorted
  std::uniform_real_distribution<float> coeff_dist(-2.0f, 2.0f);
  std::vector<float> coeff(static_cast<size_t>(c.n_active));
  for (auto& a : coeff) a = coeff_dist(rng);
  std::vector<float> dst(static_cast<size_t>(c.n_cols + kGuard), kSentinel);
  for (int64_t j = 0; j < c.n_cols; ++j) dst[static_cast<size_t>(j)] = coeff_dist(rng);

  // Reference in double, plus the sum of |terms| that bounds float accumulation error.
  std::vector<double> ref(static_cast<size_t>(c.n_cols));
  std::vector<double> magnitude(static_cast<size_t>(c.n_cols));
  for (int64_t j = 0; j < c.n_cols; ++j) {
    ref[static_cast<size_t>(j)] = dst[static_cast<size_t>(j)];
    magnitude[static_cast<size_t>(j)] = std::fabs(dst[static_cast<size_t>(j)]);
  }
  for (int64_t k = 0; k < c.n_active; ++k) {
    const uint16_t* row = &w[static_cast<size_t>(rows[static_cast<size_t>(k)] * c.stride)];
    const double a = coeff[static_cast<size_t>(k)];
    for (int64_t j = 0; j < c.n_cols; ++j) {
      const double term = a * HalfBitsToFloat(row[j]);
      ref[static_cast<size_t>(j)] += term;
      magnitude[static_cast<size_t>(j)] += std::fabs(term);
    }
  }

  DeviceBuffer d_w, d_rows, d_coeff, d_dst;
  Upload(api, d_w, w);
  Upload(api, d_rows, rows);
  Upload(api, d_coeff, coeff);
  Upload(api, d_dst, dst);
  kx_cuda_axpy_rows_f16_args args{};
  args.struct_size = sizeof(args);
  args.w = static_cast<const uint16_t*>(d_w.ptr);
  args.n_rows = c.n_rows;
  args.n_cols = c.n_cols;
  args.w_row_stride = c.stride;
  args.rows = static_cast<const int32_t*>(d_rows.ptr);
  args.coeff = static_cast<const float*>(d_coeff.ptr);
  args.n_active = c.n_active;
  args.dst = static_cast<float*>(d_dst.ptr);
  REQUIRE_CUDA_OK(api, api.axpy_rows_f16(&args, nullptr));
  REQUIRE_CUDA_OK(api, api.synchronize());
  std::vector<float> got(dst.size(), 0.0f);
  REQUIRE_CUDA_OK(api, api.memcpy_d2h(got.data(), d_dst.ptr, got.size() * sizeof(float)));

  // The F16 weights are exact in float, and products of a float and an F16 are exact in
  // double, so the only error is float rounding of the running sums: at most
  // (n_active + 1) * 2^-24 * sum|terms| (first-order bound for any summation order),
  // doubled for the final atomics and the fma/non-fma difference.
  const double kFloatUnit = std::ldexp(1.0, -24);
  int64_t bad = 0;
  for (int64_t j = 0; j < c.n_cols; ++j) {
    const size_t u = static_cast<size_t>(j);
    const double tol = 2.0 * static_cast<double>(c.n_active + 1) * kFloatUnit * magnitude[u];
    if (!(std::fabs(got[u] - ref[u]) <= tol)) {
      if (bad++ < 5) UNSCOPED_INFO("col " << j << " got " << got[u] << " want " << ref[u]);
    }
  }
  CHECK(bad == 0);
  for (int64_t g = 0; g < kGuard; ++g) {
    CHECK(got[static_cast<size_t>(c.n_cols + g)] == kSentinel);
  }
}

TEST_CASE("cuda: module loads and reports a device", "[gpu]") {
  const CudaApi& api = ApiOrSkip();
  int32_t count = 0;
  REQUIRE_CUDA_OK(api, api.device_count(&count));
  REQUIRE(count > 0);
  kx_cuda_device_info info{};
  info.struct_size = sizeof(info);
  REQUIRE_CUDA_OK(api, api.device_info(0, &info));
  std::fprintf(stderr, "device 0: %s, cc %d.%d, %d SMs, %llu MiB\n", info.name,
               info.compute_capability_major, info.compute_capability_minor,
               info.multiprocessor_count,
               static_cast<unsigned long long>(info.total_memory_bytes >> 20));
  CHECK(std::strlen(info.name) > 0);
  CHECK(info.total_memory_bytes > 0);
  CHECK(info.free_memory_bytes <= info.total_memory_bytes);
  CHECK(info.compute_capability_major >= 5);
  CHECK(info.multiprocessor_count > 0);
  REQUIRE_CUDA_OK(api, api.free(nullptr));  // a no-op, like free(NULL)
}

TEST_CASE("cuda: axpy_rows_f16 matches the CPU reference", "[gpu]") {
  const CudaApi& api = ApiOrSkip();
  auto rng = test::SeededRng(0x5eed0cda);
  const AxpyCase cases[] = {
      {1536, 576, 576, 700},     // SmolLM2-135M ffn_down_t, half the neurons active
      {1536, 576, 576, 1},       // a single active neuron
      {4096, 4096, 4096, 4096},  // every row of a 7B-sized layer slice
      {300, 77, 77, 123},        // odd width: the scalar path
      {256, 64, 72, 200},        // row stride > n_cols (wide loads, padded rows)
      {512, 96, 100, 50},        // stride not a multiple of 8: the scalar path
  };
  for (const AxpyCase& c : cases) RunAxpyCase(api, c, rng);
}

TEST_CASE("cuda: argument errors come back as statuses", "[gpu]") {
  const CudaApi& api = ApiOrSkip();
  kx_cuda_axpy_rows_f16_args args{};
  args.struct_size = sizeof(args);
  args.n_rows = 4;
  args.n_cols = 8;
  args.w_row_stride = 4;  // < n_cols
  args.n_active = 1;
  const kx_cuda_status s = api.axpy_rows_f16(&args, nullptr);
  CHECK(s == KX_CUDA_ERROR_INVALID_ARGUMENT);
  const absl::Status st = CudaCall(api, s, "axpy_rows_f16");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(st.message().find("w_row_stride") != absl::string_view::npos);
  args.n_active = 0;  // nothing to do: fine whatever the pointers
  CHECK(api.axpy_rows_f16(&args, nullptr) == KX_CUDA_OK);
  void* p = nullptr;
  CHECK(api.alloc(0, &p) == KX_CUDA_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kx
