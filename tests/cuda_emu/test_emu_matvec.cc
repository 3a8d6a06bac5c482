// matvec (decode's y (+)= W·x over GGUF blocks) under the emulator, for every weight type the
// op supports, against (a) a float64 Σ w·x over the CPU scalar table's dequantize and (b) the
// CPU scalar table's matvec with its 16-bit activations, with bounds derived per row below.
// Shapes: one row, ragged row counts that take each rows-per-warp variant, rows of one block,
// of several, and of more than one staged chunk; strided and misaligned rows.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/kernel_test_util.h"
#include "quant_emu_util.h"

namespace kx::test {
namespace {

using MatvecFn = kx_cuda_status (*)(const kx_cuda_matvec_args*, void*);

// Largest |x − x̂| of the CPU's 16-bit activations over max|x| of the 32-element block:
// x̂ = d·round(fl(x/d)) with d = fl(amax/32767), so |x − x̂| ≤ d·(½ + u·32768) ≤
// amax/65534·(1 + 2^-8)·(1 + u); 2^-7 covers both factors.
constexpr double kActQuantStep = (1.0 + 0x1p-7) / 65534.0;

struct Shape {
  int64_t n;
  int64_t rows;
  bool accumulate = false;
  size_t pad = 0;    // bytes between rows beyond their data
  size_t shift = 0;  // W's offset from a 16-byte boundary
};

// Row counts and the rows-per-warp variant they take on the emulated device (4 SMs, so 16
// warps per wave: 4 rows per warp from 64 rows, 2 from 32): 1 and 5 → 1, 37 → 2 (last warp
// one row short), 70 → 4 (last warp two short).
std::vector<Shape> ShapesFor(GgmlType type) {
  const int64_t block = GetTypeInfo(type).block_size;
  if (IsKQuant(type)) {  // one staged/unstaged chunk is 8 super-blocks
    return {{256, 1}, {768, 37, true}, {256, 70}, {2304, 5, false, 16}};
  }
  if (block == 32) {  // one staged chunk is 64 blocks
    const size_t align = type == GgmlType::kQ5_1 ? 8 : (type == GgmlType::kQ4_1 ? 4 : 2);
    return {{32, 1}, {576, 37, true}, {576, 70}, {2144, 5, false, 16, align}};
  }
  // Float types: 16-byte rows are read directly, others (n = 37, 301, or rows off a 16-byte
  // boundary) one element at a time through shared memory.
  const size_t elem = GetTypeInfo(type).block_bytes;
  return {{64, 1},
          {576, 37, true},
          {37, 70},
          {1088, 5, false, 16},
          {301, 5, true, 0, elem},
          {576, 5, false, 0, elem}};
}

// One call of the op on one shape, checked against both references.
void CheckShape(std::mt19937_64& rng, GgmlType type, const Shape& shape) {
  const cpu::TypeKernels* cpu_kernels = cpu::KernelsFor(Isa::kScalar)->For(type);
  REQUIRE(cpu_kernels != nullptr);
  const Rows w = MakeRows(rng, type, shape.n, shape.rows, shape.pad, shape.shift);
  const std::vector<float> x = RandomActs(shape.n, rng);
  std::vector<float> x_storage;
  const float* x_dev = AlignedCopy(x, &x_storage);

  std::vector<float> y0 = RandomFloats(rng, shape.rows, 4.0f);
  std::vector<float> y(shape.rows);
  if (shape.accumulate) {
    y = y0;
  } else {
    Poison(y);
    std::fill(y0.begin(), y0.end(), 0.0f);
  }

  kx_cuda_matvec_args args{};
  args.struct_size = sizeof args;
  args.type = static_cast<uint32_t>(type);
  args.w = w.Row(0);
  args.row_bytes = static_cast<int64_t>(w.row_bytes);
  args.n = shape.n;
  args.rows = shape.rows;
  args.x = x_dev;
  args.y = y.data();
  args.accumulate = shape.accumulate ? 1 : 0;
  const MatvecFn matvec = FindOpOrFail<MatvecFn>("matvec");
  INFO(TypeName(type) << " n " << shape.n << " rows " << shape.rows << " accumulate "
                      << shape.accumulate << " pad " << shape.pad << " shift " << shape.shift);
  REQUIRE(matvec(&args, nullptr) == KX_CUDA_OK);

  std::vector<uint8_t> act(cpu_kernels->act_bytes(shape.n));
  cpu_kernels->quantize_act(x.data(), shape.n, act.data());
  std::vector<float> w_row(shape.n);
  std::vector<double> want_a(shape.rows), tol_a(shape.rows), want_b(shape.rows), tol_b(shape.rows);
  // Chain of roundings an element's term passes through in the kernel: ≤ L in its run's
  // Σ q·x (L = run length ≤ 16), 2 per run in the lane's accumulator (scale and offset FMAs;
  // ≤ 4 runs per slice, ≤ ⌈n/(32·L)⌉ slices per lane), 5 shuffle levels, 1 add into y:
  // ≤ 16 + 8 + n/16 + 6 ≤ 32 + n/8 for every decoder (L = 1 included).
  const double k = 32.0 + static_cast<double>(shape.n) / 8.0;
  for (int64_t r = 0; r < shape.rows; ++r) {
    const uint8_t* row = w.Row(r);
    cpu_kernels->dequantize(row, w_row.data(), shape.n);
    // S = Σ A·|x| and Q = Σ A·amax_block(x), A = |scale·q| + |offset| per element (the
    // magnitudes the kernel's two partial sums carry; they may cancel in w itself).
    double dot = 0.0, s = 0.0, q = 0.0;
    for (int64_t i = 0; i < shape.n; ++i) {
      const double a = AbsTermWeight(type, row, i);
      double amax = 0.0;
      for (int64_t j = i / 32 * 32; j < std::min<int64_t>(shape.n, i / 32 * 32 + 32); ++j) {
        amax = std::max(amax, std::fabs(static_cast<double>(x[j])));
      }
      dot += static_cast<double>(w_row[i]) * x[i];
      s += a * std::fabs(x[i]);
      q += a * amax;
    }
    // (a) |y − Y*| ≤ k·u·S + u·|y0| for Y* = y0 + Σ (scale·q + offset)·x exactly; the
    // reference's w = round(round(scale·q) + offset) is within 2u·A of scale·q + offset
    // (K-quants: the float64 parts use d·sc, the kernel round(d·sc): one more u·A).
    want_a[r] = static_cast<double>(y0[r]) + dot;
    tol_a[r] = (k + 3.0) * kF32Eps * s + kF32Eps * std::fabs(y0[r]);
    // (b) the CPU's value is within DotErrorBound of Σ (scale·q + offset)·x̂ for its
    // activations x̂; |x − x̂| ≤ amax·kActQuantStep per element (0 for float types, whose
    // activations are copied).
    float y_cpu = 0.0f;
    cpu_kernels->matvec(row, w.row_bytes, shape.n, 1, act.data(), &y_cpu);
    const double act_err = IsQuantized(type) ? kActQuantStep * q : 0.0;
    want_b[r] = static_cast<double>(y0[r]) + y_cpu;
    tol_b[r] = (k + 3.0) * kF32Eps * s + kF32Eps * std::fabs(y0[r]) +
               DotErrorBound(type, row, shape.n, act.data()) + act_err + kF32Eps * q;
  }
  {
    INFO("(a) against float64 Σ dequantize(W)·x");
    REQUIRE(AllWithin(y.data(), want_a.data(), tol_a.data(), y.size()));
  }
  {
    INFO("(b) against the CPU scalar matvec (16-bit activations)");
    REQUIRE(AllWithin(y.data(), want_b.data(), tol_b.data(), y.size()));
  }
}

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                           GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

kx_cuda_matvec_args ValidArgs(const std::vector<uint8_t>& w, const float* x, float* y, int64_t n,
                              int64_t rows) {
  kx_cuda_matvec_args a{};
  a.struct_size = sizeof a;
  a.type = static_cast<uint32_t>(GgmlType::kQ4_K);
  a.w = w.data();
  a.row_bytes = static_cast<int64_t>(RowBytes(GgmlType::kQ4_K, n));
  a.n = n;
  a.rows = rows;
  a.x = x;
  a.y = y;
  return a;
}

}  // namespace

TEST_CASE("matvec equals float64 Σ dequantize(W)·x and the CPU matvec for every type",
          "[cuda_emu]") {
  std::mt19937_64 rng = SeededRng(31);
  for (GgmlType type : kTypes) {
    for (const Shape& shape : ShapesFor(type)) CheckShape(rng, type, shape);
  }
}

TEST_CASE("matvec: n = 0 and rows = 0", "[cuda_emu]") {
  std::vector<float> y = {1.0f, 2.0f, 3.0f};
  kx_cuda_matvec_args a{};
  a.struct_size = sizeof a;
  a.type = static_cast<uint32_t>(GgmlType::kQ4_1);
  a.y = y.data();
  a.rows = 0;  // nothing at all, whatever the pointers
  a.y = nullptr;
  REQUIRE(kx_cuda_matvec(&a, nullptr) == KX_CUDA_OK);
  a.y = y.data();
  a.rows = 3;
  a.n = 0;  // empty sums: w and x are not read
  a.accumulate = 1;
  REQUIRE(kx_cuda_matvec(&a, nullptr) == KX_CUDA_OK);
  REQUIRE(y == std::vector<float>{1.0f, 2.0f, 3.0f});
  a.accumulate = 0;
  REQUIRE(kx_cuda_matvec(&a, nullptr) == KX_CUDA_OK);
  REQUIRE(y == std::vector<float>{0.0f, 0.0f, 0.0f});
}

TEST_CASE("matvec: unsupported types and bad arguments are refused with a message", "[cuda_emu]") {
  const int64_t n = 256, rows = 2;
  std::vector<uint8_t> w(RowBytes(GgmlType::kQ4_K, n) * rows + 16);
  std::vector<float> x_storage(n + 8, 1.0f);
  float* x = x_storage.data();
  while (reinterpret_cast<uintptr_t>(x) % 16 != 0) ++x;
  std::vector<float> y(rows);
  // w.data() is 16-byte aligned (operator new), as Q4_K needs.
  REQUIRE(reinterpret_cast<uintptr_t>(w.data()) % 16 == 0);
  const kx_cuda_matvec_args good = ValidArgs(w, x, y.data(), n, rows);
  REQUIRE(kx_cuda_matvec(&good, nullptr) == KX_CUDA_OK);

  const auto refused = [](kx_cuda_matvec_args bad, kx_cuda_status want, const char* says) {
    REQUIRE(kx_cuda_matvec(&bad, nullptr) == want);
    const std::string message = cuda::LastError();
    INFO(message);
    REQUIRE(message.find("matvec") != std::string::npos);
    REQUIRE(message.find(says) != std::string::npos);
  };
  REQUIRE(kx_cuda_matvec(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_matvec_args bad = good;
  bad.struct_size = 8;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "struct_size");
  bad = good;
  bad.type = static_cast<uint32_t>(GgmlType::kQ2_K);
  refused(bad, KX_CUDA_ERROR_UNSUPPORTED, "Q2_K");
  bad.type = static_cast<uint32_t>(GgmlType::kIQ4_XS);
  refused(bad, KX_CUDA_ERROR_UNSUPPORTED, "IQ4_XS");
  bad.type = 99;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "99");
  bad = good;
  bad.n = 128;  // half a super-block
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "whole number");
  bad = good;
  bad.w = w.data() + 2;  // Q4_K loads 16 bytes at a time
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "multiples of 16");
  bad = good;
  bad.row_bytes -= 16;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "row_bytes");
  bad = good;
  bad.x = x + 1;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "x must be 16-byte aligned");
  bad = good;
  bad.x = nullptr;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "non-NULL");
  bad = good;
  bad.y = nullptr;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "y must be non-NULL");
  bad = good;
  bad.rows = -1;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "rows < 0");
  bad = good;
  bad.n = -32;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "n < 0");
}

}  // namespace kx::test
