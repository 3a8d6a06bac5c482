// Random GGUF blocks. Layouts (ggml-common.h), bytes in order:
//   Q4_0 d:f16 qs[16]                     Q4_1 d:f16 m:f16 qs[16]
//   Q5_0 d:f16 qh[4] qs[16]               Q5_1 d:f16 m:f16 qh[4] qs[16]
//   Q8_0 d:f16 qs[32] (int8)
//   Q2_K scales[16] qs[64] d:f16 dmin:f16 Q3_K hmask[32] qs[64] scales[12] d:f16
//   Q4_K d:f16 dmin:f16 scales[12] qs[128] Q5_K d:f16 dmin:f16 scales[12] qh[32] qs[128]
//   Q6_K ql[128] qh[64] scales[16] (int8) d:f16
// Quant bytes and packed sub-block scales are random (every bit pattern is a valid value);
// the f16 super-scales are drawn so that dequantized weights have real-model magnitudes.
#include "benchmarks/gpu_check/quant_blocks.h"

#include <cstring>

#include "benchmarks/gpu_check/check_case.h"

namespace kx::gpu_check {
namespace {

constexpr TypeInfo kTypes[] = {
    {kTypeF32, "f32", 1, 4},       {kTypeF16, "f16", 1, 2},       {kTypeBF16, "bf16", 1, 2},
    {kTypeQ4_0, "Q4_0", 32, 18},   {kTypeQ4_1, "Q4_1", 32, 20},   {kTypeQ5_0, "Q5_0", 32, 22},
    {kTypeQ5_1, "Q5_1", 32, 24},   {kTypeQ8_0, "Q8_0", 32, 34},   {kTypeQ2_K, "Q2_K", 256, 84},
    {kTypeQ3_K, "Q3_K", 256, 110}, {kTypeQ4_K, "Q4_K", 256, 144}, {kTypeQ5_K, "Q5_K", 256, 176},
    {kTypeQ6_K, "Q6_K", 256, 210},
};

void PutHalf(uint8_t* dst, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(dst, &h, sizeof h);
}

void RandomBytes(std::mt19937_64& rng, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(rng());
}

// A positive scale in [lo, hi) (a block's d: never zero, so no block is all zeros).
float Uniform(std::mt19937_64& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

// One block at `dst`. Scales are chosen so that quant * scale lands near `s`:
// 4-bit quants span 16 steps (d ≈ 2·scale/16), 5-bit 32, 8-bit 256; K-quants multiply by
// 6-bit (up to 63) or 8-bit signed sub-block scales.
void FillBlock(std::mt19937_64& rng, int32_t type, float s, uint8_t* b) {
  switch (type) {
    case kTypeQ4_0:
      PutHalf(b, Uniform(rng, 0.5f, 1.5f) * s / 4);
      RandomBytes(rng, b + 2, 16);
      break;
    case kTypeQ4_1:
      PutHalf(b, Uniform(rng, 0.5f, 1.5f) * s / 4);
      PutHalf(b + 2, -Uniform(rng, 0.5f, 1.5f) * s * 2);  // min: the bottom of the range
      RandomBytes(rng, b + 4, 16);
      break;
    case kTypeQ5_0:
      PutHalf(b, Uniform(rng, 0.5f, 1.5f) * s / 8);
      RandomBytes(rng, b + 2, 20);
      break;
    case kTypeQ5_1:
      PutHalf(b, Uniform(rng, 0.5f, 1.5f) * s / 8);
      PutHalf(b + 2, -Uniform(rng, 0.5f, 1.5f) * s * 2);
      RandomBytes(rng, b + 4, 20);
      break;
    case kTypeQ8_0:
      PutHalf(b, (rng() & 1 ? 1.0f : -1.0f) * Uniform(rng, 0.5f, 1.5f) * s / 64);
      RandomBytes(rng, b + 2, 32);
      break;
    case kTypeQ2_K:
      RandomBytes(rng, b, 16 + 64);
      PutHalf(b + 80, Uniform(rng, 0.5f, 1.5f) * s / 16);
      PutHalf(b + 82, Uniform(rng, 0.5f, 1.5f) * s / 16);
      break;
    case kTypeQ3_K:
      RandomBytes(rng, b, 32 + 64 + 12);
      PutHalf(b + 108, Uniform(rng, 0.5f, 1.5f) * s / 64);
      break;
    case kTypeQ4_K:
      PutHalf(b, Uniform(rng, 0.5f, 1.5f) * s / 128);
      PutHalf(b + 2, Uniform(rng, 0.5f, 1.5f) * s / 32);
      RandomBytes(rng, b + 4, 12 + 128);
      break;
    case kTypeQ5_K:
      PutHalf(b, Uniform(rng, 0.5f, 1.5f) * s / 256);
      PutHalf(b + 2, Uniform(rng, 0.5f, 1.5f) * s / 32);
      RandomBytes(rng, b + 4, 12 + 32 + 128);
      break;
    case kTypeQ6_K:
      RandomBytes(rng, b, 128 + 64 + 16);
      PutHalf(b + 208, Uniform(rng, 0.5f, 1.5f) * s / 1024);
      break;
    default:
      break;
  }
}

}  // namespace

const TypeInfo* FindType(int32_t id) {
  for (const TypeInfo& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

const char* TypeName(int32_t id) {
  const TypeInfo* t = FindType(id);
  return t ? t->name : "?";
}

uint64_t RowBytes(int32_t type, int64_t n_cols) {
  const TypeInfo* t = FindType(type);
  if (t == nullptr) return 0;
  return static_cast<uint64_t>(n_cols / t->block_elems) * static_cast<uint64_t>(t->block_bytes);
}

std::vector<uint8_t> RandomWeights(std::mt19937_64& rng, int32_t type, int64_t n_rows,
                                   int64_t n_cols, float scale) {
  const TypeInfo* t = FindType(type);
  if (t == nullptr) return {};
  const int64_t n = n_rows * n_cols;
  std::vector<uint8_t> out(static_cast<size_t>(RowBytes(type, n_cols)) *
                           static_cast<size_t>(n_rows));
  if (type == kTypeF32) {
    const std::vector<float> v = RandomFloats(rng, n, scale);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (type == kTypeF16) {
    const std::vector<uint16_t> v = RandomHalves(rng, n, scale);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (type == kTypeBF16) {
    const std::vector<float> v = RandomFloats(rng, n, scale);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &v[static_cast<size_t>(i)], sizeof bits);
      const uint16_t top = static_cast<uint16_t>(bits >> 16);  // truncation: still a bf16
      std::memcpy(out.data() + 2 * i, &top, sizeof top);
    }
  } else {
    const size_t n_blocks = out.size() / static_cast<size_t>(t->block_bytes);
    for (size_t i = 0; i < n_blocks; ++i) {
      FillBlock(rng, type, scale, out.data() + i * static_cast<size_t>(t->block_bytes));
    }
  }
  return out;
}

}  // namespace kx::gpu_check
