// Shared by the kernel tests: seeded random weights of each type, and a
// float64 reference that reads the ggml blocks independently of the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/kquants.h"
#include "kernels/cpu/legacy_quants.h"
#include "tensor/dtype.h"

namespace kx::test {

inline constexpr double kF32Eps = 0x1p-24;  // unit roundoff of float32

inline bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ2_K || t == GgmlType::kQ3_K || t == GgmlType::kQ4_K ||
         t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

// Types whose SIMD matmul on kGemmMinCols columns or more runs the rows-in-lanes
// gemm (kernels/cpu/kquant_gemm.h, legacy_gemm.h), which sums in another order
// than matvec: held to the reference's error bound instead of matvec's bits.
inline bool HasGemm(GgmlType t) {
  return (IsKQuant(t) && t != GgmlType::kQ2_K) || t == GgmlType::kQ4_0 || t == GgmlType::kQ5_0 ||
         t == GgmlType::kQ5_1 || t == GgmlType::kQ8_0 || t == GgmlType::kQ4_1;
}

inline size_t RowBytes(GgmlType type, int64_t n) {
  const TypeInfo& info = GetTypeInfo(type);
  return static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.block_bytes);
}

inline void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
inline uint16_t GetU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Random rows of `type`: scales like a trained model's (|d| ~ 1e-3..1e-2),
// every quant value possible (Q8_0 includes -128, which a file may hold).
inline std::vector<uint8_t> RandomRows(GgmlType type, int64_t n, int64_t rows,
                                       std::mt19937_64& rng) {
  std::vector<uint8_t> w(RowBytes(type, n) * static_cast<size_t>(rows));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  const size_t total = w.size();
  switch (type) {
    case GgmlType::kQ4_1:
      for (size_t off = 0; off < total; off += 20) {
        PutU16(&w[off], cpu::FloatToHalf(scale(rng)));
        PutU16(&w[off + 2], cpu::FloatToHalf(-8.0f * scale(rng) * (byte(rng) < 200 ? 1 : -1)));
        for (int j = 0; j < 16; ++j) w[off + 4 + j] = static_cast<uint8_t>(byte(rng));
      }
      break;
    case GgmlType::kQ8_0:
      for (size_t off = 0; off < total; off += 34) {
        PutU16(&w[off], cpu::FloatToHalf(scale(rng) * (byte(rng) < 128 ? 1 : -1)));
        for (int j = 0; j < 32; ++j) w[off + 2 + j] = static_cast<uint8_t>(byte(rng));
        if (byte(rng) < 64) w[off + 2 + byte(rng) % 32] = 0x80;  // -128 often
      }
      break;
    case GgmlType::kF16:
      for (size_t off = 0; off < total; off += 2) PutU16(&w[off], cpu::FloatToHalf(normal(rng)));
      break;
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      // Random bytes (every nibble and fifth bit), then d (and m) sane.
      const size_t bb = static_cast<size_t>(GetTypeInfo(type).block_bytes);
      for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
      for (size_t off = 0; off < total; off += bb) {
        PutU16(&w[off], cpu::FloatToHalf(scale(rng) * (byte(rng) < 128 ? 1 : -1)));
        if (type == GgmlType::kQ5_1) PutU16(&w[off + 2], cpu::FloatToHalf(-16.0f * scale(rng)));
      }
      break;
    }
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: {
      // Random bytes: every scale, min and quant bit pattern (Q6_K's int8
      // scales include -128); then d, dmin sane, d of either sign.
      const size_t bb = static_cast<size_t>(GetTypeInfo(type).block_bytes);
      size_t d_off = 0, dmin_off = 0;
      bool has_min = true;
      switch (type) {
        case GgmlType::kQ2_K:
          d_off = 80, dmin_off = 82;
          break;
        case GgmlType::kQ3_K:
          d_off = 108, has_min = false;
          break;
        case GgmlType::kQ6_K:
          d_off = 208, has_min = false;
          break;
        default:
          d_off = 0, dmin_off = 2;
          break;
      }
      for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
      for (size_t off = 0; off < total; off += bb) {
        PutU16(&w[off + d_off], cpu::FloatToHalf(0.05f * scale(rng) * (byte(rng) < 128 ? 1 : -1)));
        if (has_min) PutU16(&w[off + dmin_off], cpu::FloatToHalf(0.05f * scale(rng)));
      }
      break;
    }
    case GgmlType::kBF16:
      for (size_t off = 0; off < total; off += 2) PutU16(&w[off], cpu::FloatToBf16(normal(rng)));
      break;
    case GgmlType::kF32:
      for (size_t off = 0; off < total; off += 4) {
        const float v = normal(rng);
        std::memcpy(&w[off], &v, sizeof v);
      }
      break;
    default:
      break;
  }
  return w;
}

inline std::vector<float> RandomActs(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng) * (1.0f + static_cast<float>(rng() % 4));
  return x;
}

inline bool IsQuantized(GgmlType t) {
  return t != GgmlType::kF16 && t != GgmlType::kBF16 && t != GgmlType::kF32;
}

// The two parts of a new-type weight in float64 from the block layouts
// (kernels/cpu/*quants.h, whose decoding the golden test pins to gguf-py's):
// w = scale_part − min_part (Q5_1: + m, reported as min_part = −m).
struct WeightParts {
  double scale_part = 0, min_part = 0;
};
template <class L>
WeightParts KParts(const uint8_t* row, int64_t i) {
  const uint8_t* p = row + (i / cpu::kQK_K) * L::kBlockBytes;
  cpu::KHeader h;
  L::Header(p, &h);
  int8_t q[cpu::kQK_K];
  L::Quants(p, q);
  const int e = static_cast<int>(i % cpu::kQK_K);
  return {static_cast<double>(h.d) * h.sc[e / 16] * q[e],
          static_cast<double>(h.dmin) * h.m[e / 16]};
}
template <class L>
WeightParts LegacyParts(const uint8_t* row, int64_t i) {
  const uint8_t* p = row + (i / 32) * L::kBlockBytes;
  int8_t q[32];
  L::Quants(p, q);
  return {static_cast<double>(cpu::HalfToFloat(GetU16(p))) * q[i % 32],
          -static_cast<double>(L::M(p))};
}
inline bool PartsOf(GgmlType type, const uint8_t* row, int64_t i, WeightParts* out) {
  switch (type) {
    case GgmlType::kQ4_0:
      *out = LegacyParts<cpu::Q4_0Layout>(row, i);
      return true;
    case GgmlType::kQ5_0:
      *out = LegacyParts<cpu::Q5_0Layout>(row, i);
      return true;
    case GgmlType::kQ5_1:
      *out = LegacyParts<cpu::Q5_1Layout>(row, i);
      return true;
    case GgmlType::kQ2_K:
      *out = KParts<cpu::Q2KLayout>(row, i);
      return true;
    case GgmlType::kQ3_K:
      *out = KParts<cpu::Q3KLayout>(row, i);
      return true;
    case GgmlType::kQ4_K:
      *out = KParts<cpu::Q4KLayout>(row, i);
      return true;
    case GgmlType::kQ5_K:
      *out = KParts<cpu::Q5KLayout>(row, i);
      return true;
    case GgmlType::kQ6_K:
      *out = KParts<cpu::Q6KLayout>(row, i);
      return true;
    default:
      return false;
  }
}

// One weight element decoded in float64 straight from the block bytes.
inline double WeightAt(GgmlType type, const uint8_t* row, int64_t i) {
  if (WeightParts wp; PartsOf(type, row, i, &wp)) return wp.scale_part - wp.min_part;
  switch (type) {
    case GgmlType::kQ4_1: {
      const uint8_t* b = row + (i / 32) * 20;
      const int j = static_cast<int>(i % 32);
      const int q = j < 16 ? (b[4 + j] & 0x0f) : (b[4 + j - 16] >> 4);
      return static_cast<double>(cpu::HalfToFloat(GetU16(b))) * q + cpu::HalfToFloat(GetU16(b + 2));
    }
    case GgmlType::kQ8_0: {
      const uint8_t* b = row + (i / 32) * 34;
      return static_cast<double>(cpu::HalfToFloat(GetU16(b))) * static_cast<int8_t>(b[2 + i % 32]);
    }
    case GgmlType::kF16:
      return cpu::HalfToFloat(GetU16(row + 2 * i));
    case GgmlType::kBF16:
      return cpu::Bf16ToFloat(GetU16(row + 2 * i));
    case GgmlType::kF32: {
      float v;
      std::memcpy(&v, row + 4 * i, sizeof v);
      return v;
    }
    default:
      return NAN;
  }
}

// The activation element the kernels actually multiply: d·q for BlockQ16A.
inline double ActAt(GgmlType type, const uint8_t* act, int64_t i) {
  if (IsQuantized(type)) {
    cpu::BlockQ16A b;
    std::memcpy(&b, act + (i / 32) * sizeof b, sizeof b);
    return static_cast<double>(b.d) * b.qs[i % 32];
  }
  float v;
  std::memcpy(&v, act + 4 * i, sizeof v);
  return v;
}

// |d·q| + |m| for Q4_1 (its two partial sums, d·Σq·qx and m·s, are rounded
// separately and may cancel), |w| otherwise.
inline double AbsTermWeight(GgmlType type, const uint8_t* row, int64_t i) {
  if (WeightParts wp; PartsOf(type, row, i, &wp)) {
    return std::fabs(wp.scale_part) + std::fabs(wp.min_part);
  }
  if (type != GgmlType::kQ4_1) return std::fabs(WeightAt(type, row, i));
  const uint8_t* b = row + (i / 32) * 20;
  const double m = cpu::HalfToFloat(GetU16(b + 2));
  return std::fabs(WeightAt(type, row, i) - m) + std::fabs(m);
}

// Bound on float32 rounding error for a kernel's dot product of a row: every
// implementation sums at most n/block + 16 rounded terms in any chain (the
// scalar reference one chain of n/block terms; SIMD lanes plus a 16-lane
// tree), each term carrying ≤ 4 roundings (int32 → float of the block's
// integer sum, which with 16-bit activations may exceed 2^24; d_w·d_x; the
// product; for Q4_1 the min term m·s): |err| ≤ 2·k·u·Σ|terms|. K-quants: the
// terms are per 16-element sub-block (block = 16); their chains (8 blocks
// into a super-block's part, n/256 super-blocks, 16 lanes) are shorter.
inline double DotErrorBound(GgmlType type, const uint8_t* row, int64_t n, const uint8_t* act) {
  double abs_sum = 0;
  for (int64_t i = 0; i < n; ++i)
    abs_sum += AbsTermWeight(type, row, i) * std::fabs(ActAt(type, act, i));
  const int64_t block = IsKQuant(type) ? 16 : IsQuantized(type) ? 32 : 1;
  const double k = static_cast<double>(n / block + 16 + 4);
  return 2.0 * k * kF32Eps * abs_sum + 1e-30;
}

}  // namespace kx::test
