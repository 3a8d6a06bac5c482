// dequantize (GGUF blocks → F16 / F32 rows, for the prefill path's cuBLAS weights) under the
// emulator: bit-exact against the CPU scalar table's dequantize (then FloatToHalf for F16,
// round to nearest even), for every weight type, with padded destination rows whose padding
// must stay untouched, strided and misaligned source rows.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/kernel_test_util.h"
#include "quant_emu_util.h"

namespace kx::test {
namespace {

using DequantizeFn = kx_cuda_status (*)(const kx_cuda_dequantize_args*, void*);

constexpr uint32_t kDstF32 = static_cast<uint32_t>(GgmlType::kF32);
constexpr uint32_t kDstF16 = static_cast<uint32_t>(GgmlType::kF16);
constexpr uint16_t kPoisonHalf = 0xffff;
constexpr uint32_t kPoisonFloatBits = 0xffffffffu;

struct Shape {
  int64_t n;
  int64_t rows;
  size_t pad = 0;    // source bytes between rows beyond their data
  size_t shift = 0;  // the source's offset from a 16-byte boundary
};

std::vector<Shape> ShapesFor(GgmlType type) {
  if (IsKQuant(type)) return {{256, 1}, {768, 37, 16}};
  if (GetTypeInfo(type).block_size == 32) {
    const size_t align = type == GgmlType::kQ5_1 ? 8 : (type == GgmlType::kQ4_1 ? 4 : 2);
    return {{32, 1}, {576, 37, 0, align}, {64, 5, 16}};
  }
  // Float types: 16-byte rows decoded 16 bytes at a time; n = 37 and rows off a 16-byte
  // boundary one element at a time.
  const size_t elem = GetTypeInfo(type).block_bytes;
  return {{64, 1}, {576, 37, 16}, {37, 5}, {64, 5, 0, elem}};
}

// Destination rows padded to a multiple of 16 bytes, plus 8 more elements that must stay
// poisoned.
int64_t DstStride(int64_t n) { return (n + 7) / 8 * 8 + 8; }

void CheckShape(std::mt19937_64& rng, GgmlType type, const Shape& shape) {
  const cpu::TypeKernels* cpu_kernels = cpu::KernelsFor(Isa::kScalar)->For(type);
  REQUIRE(cpu_kernels != nullptr);
  const Rows w = MakeRows(rng, type, shape.n, shape.rows, shape.pad, shape.shift);
  const int64_t stride = DstStride(shape.n);
  std::vector<float> want(shape.rows * stride);
  for (int64_t r = 0; r < shape.rows; ++r) {
    cpu_kernels->dequantize(w.Row(r), want.data() + r * stride, shape.n);
  }

  kx_cuda_dequantize_args args{};
  args.struct_size = sizeof args;
  args.type = static_cast<uint32_t>(type);
  args.src = w.Row(0);
  args.src_row_bytes = static_cast<int64_t>(w.row_bytes);
  args.n = shape.n;
  args.rows = shape.rows;
  args.dst_row_stride = stride;
  const DequantizeFn dequantize = FindOpOrFail<DequantizeFn>("dequantize");
  INFO(TypeName(type) << " n " << shape.n << " rows " << shape.rows << " pad " << shape.pad
                      << " shift " << shape.shift);

  std::vector<float> f32(shape.rows * stride);
  Poison(f32);
  args.dst_type = kDstF32;
  args.dst = f32.data();
  REQUIRE(dequantize(&args, nullptr) == KX_CUDA_OK);
  std::vector<uint16_t> f16(shape.rows * stride);
  Poison(f16);
  args.dst_type = kDstF16;
  args.dst = f16.data();
  REQUIRE(dequantize(&args, nullptr) == KX_CUDA_OK);

  int64_t mismatches = 0;
  for (int64_t r = 0; r < shape.rows; ++r) {
    for (int64_t i = 0; i < stride; ++i) {
      const size_t at = r * stride + i;
      uint32_t got_bits, want_bits = kPoisonFloatBits;
      std::memcpy(&got_bits, &f32[at], sizeof got_bits);
      uint16_t want_half = kPoisonHalf;
      if (i < shape.n) {  // past n: the padding, never written
        std::memcpy(&want_bits, &want[at], sizeof want_bits);
        want_half = cpu::FloatToHalf(want[at]);
      }
      if (got_bits != want_bits || f16[at] != want_half) {
        if (++mismatches <= 5) {
          UNSCOPED_INFO("row " << r << " element " << i << ": F32 bits " << std::hex << got_bits
                               << " want " << want_bits << ", F16 bits " << f16[at] << " want "
                               << want_half << std::dec);
        }
      }
    }
  }
  REQUIRE(mismatches == 0);
}

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                           GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

}  // namespace

TEST_CASE("dequantize equals the CPU's dequantize bit for bit, to F32 and to F16", "[cuda_emu]") {
  std::mt19937_64 rng = SeededRng(41);
  for (GgmlType type : kTypes) {
    for (const Shape& shape : ShapesFor(type)) CheckShape(rng, type, shape);
  }
}

TEST_CASE("dequantize: empty work, unsupported types and bad arguments", "[cuda_emu]") {
  std::mt19937_64 rng = SeededRng(42);
  const int64_t n = 64, rows = 3;
  const Rows w = MakeRows(rng, GgmlType::kQ8_0, n, rows, 0, 0);
  std::vector<uint16_t> dst(rows * n);
  kx_cuda_dequantize_args good{};
  good.struct_size = sizeof good;
  good.type = static_cast<uint32_t>(GgmlType::kQ8_0);
  good.src = w.Row(0);
  good.src_row_bytes = static_cast<int64_t>(w.row_bytes);
  good.n = n;
  good.rows = rows;
  good.dst_type = kDstF16;
  good.dst = dst.data();
  good.dst_row_stride = n;
  REQUIRE(kx_cuda_dequantize(&good, nullptr) == KX_CUDA_OK);

  Poison(dst);
  kx_cuda_dequantize_args empty = good;
  empty.rows = 0;
  REQUIRE(kx_cuda_dequantize(&empty, nullptr) == KX_CUDA_OK);
  empty = good;
  empty.n = 0;
  REQUIRE(kx_cuda_dequantize(&empty, nullptr) == KX_CUDA_OK);
  for (uint16_t h : dst) REQUIRE(h == kPoisonHalf);

  const auto refused = [](kx_cuda_dequantize_args bad, kx_cuda_status want, const char* says) {
    REQUIRE(kx_cuda_dequantize(&bad, nullptr) == want);
    const std::string message = cuda::LastError();
    INFO(message);
    REQUIRE(message.find("dequantize") != std::string::npos);
    REQUIRE(message.find(says) != std::string::npos);
  };
  REQUIRE(kx_cuda_dequantize(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_dequantize_args bad = good;
  bad.struct_size = 8;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "struct_size");
  bad = good;
  bad.type = static_cast<uint32_t>(GgmlType::kQ3_K);
  refused(bad, KX_CUDA_ERROR_UNSUPPORTED, "Q3_K");
  bad = good;
  bad.dst_type = static_cast<uint32_t>(GgmlType::kBF16);
  refused(bad, KX_CUDA_ERROR_UNSUPPORTED, "dst_type");
  bad = good;
  bad.n = 48;  // not whole Q8_0 blocks
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "whole number");
  bad = good;
  bad.dst_row_stride = n - 8;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "dst_row_stride < n");
  bad = good;
  bad.dst_row_stride = n + 4;  // 136-byte rows: not 16-byte aligned
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "multiples of 16");
  bad = good;
  bad.dst = dst.data() + 1;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "multiples of 16");
  bad = good;
  bad.src = w.Row(0) + 1;  // Q8_0 blocks are read 2 bytes at a time
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "multiples of 2");
  bad = good;
  bad.dst = nullptr;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT, "non-NULL");
}

}  // namespace kx::test
