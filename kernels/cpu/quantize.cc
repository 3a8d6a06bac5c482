// Scalar ggml-style quantizers (see quantize.h). Block layouts: internal.h.
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/internal.h"

namespace kx::cpu {
namespace {

void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

// Nearest integer in [lo, hi]; NaN lands on lo (never an undefined cast).
int RoundClamp(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// Symmetric types (Q4_0, Q5_0): d = signed absmax / −(2^(bits−1)), so the
// largest-magnitude element maps to the end of the range with the most codes.
void SymmetricBlock(const float* x, int bits, uint16_t* dh_out, int* q) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const int half = 1 << (bits - 1);
  const uint16_t dh = FloatToHalf(max / static_cast<float>(-half));
  const float d = HalfToFloat(dh);
  for (int j = 0; j < kQK; ++j) {
    q[j] = d != 0.0f ? RoundClamp(x[j] / d, -half, half - 1) + half : half;
  }
  *dh_out = dh;
}

// Asymmetric types (Q4_1, Q5_1): x ≈ d·q + m with m = min, d = range / (2^bits − 1).
void AsymmetricBlock(const float* x, int bits, uint16_t* dh, uint16_t* mh, int* q) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const int qmax = (1 << bits) - 1;
  *dh = FloatToHalf((hi - lo) / static_cast<float>(qmax));
  *mh = FloatToHalf(lo);
  const float d = HalfToFloat(*dh), m = HalfToFloat(*mh);
  for (int j = 0; j < kQK; ++j) q[j] = d != 0.0f ? RoundClamp((x[j] - m) / d, 0, qmax) : 0;
}

// Low nibbles hold elements 0..15, high nibbles 16..31.
void PackNibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + kQK / 2] & 0x0f) << 4);
  }
}

// The fifth bits, bit j = element j, little-endian.
void PackHighBits(const int* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

void QuantizeBlock(GgmlType type, const float* x, uint8_t* p) {
  int q[kQK];
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0: {
      const int bits = type == GgmlType::kQ4_0 ? 4 : 5;
      uint16_t dh;
      SymmetricBlock(x, bits, &dh, q);
      StoreU16(p, dh);
      if (bits == 4) {
        PackNibbles(q, p + offsetof(BlockQ4_0, qs));
      } else {
        PackHighBits(q, p + offsetof(BlockQ5_0, qh));
        PackNibbles(q, p + offsetof(BlockQ5_0, qs));
      }
      return;
    }
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: {
      uint16_t dh, mh;
      const bool five = type == GgmlType::kQ5_1;
      AsymmetricBlock(x, five ? 5 : 4, &dh, &mh, q);
      StoreU16(p, dh);
      StoreU16(p + 2, mh);
      if (five) {
        PackHighBits(q, p + offsetof(BlockQ5_1, qh));
        PackNibbles(q, p + offsetof(BlockQ5_1, qs));
      } else {
        PackNibbles(q, p + offsetof(BlockQ4_1, qs));
      }
      return;
    }
    case GgmlType::kQ8_0: {
      constexpr int kQ8Max = 127;
      float amax = 0.0f;
      for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
      const uint16_t dh = FloatToHalf(amax / kQ8Max);
      const float d = HalfToFloat(dh);
      StoreU16(p, dh);
      for (int j = 0; j < kQK; ++j) {
        const int v = d != 0.0f ? RoundClamp(x[j] / d, -kQ8Max, kQ8Max) : 0;
        p[offsetof(BlockQ8_0, qs) + j] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

bool CanQuantize(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kF32:
      return true;
    default:
      return false;
  }
}

absl::Status QuantizeRow(GgmlType type, const float* src, int64_t n, uint8_t* dst) {
  if (!CanQuantize(type)) {
    return absl::UnimplementedError(
        absl::StrCat("QuantizeRow: no quantizer for type ", TypeName(type)));
  }
  const TypeInfo& info = GetTypeInfo(type);
  if (n < 0 || n % info.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeRow: ", n, " elements are not whole ",
                                                   info.name, " blocks of ", info.block_size));
  }
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return absl::OkStatus();
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        StoreU16(dst + 2 * i, type == GgmlType::kF16 ? FloatToHalf(src[i]) : FloatToBf16(src[i]));
      }
      return absl::OkStatus();
    default:
      for (int64_t b = 0; b < n / kQK; ++b) {
        QuantizeBlock(type, src + b * kQK, dst + b * info.block_bytes);
      }
      return absl::OkStatus();
  }
}

}  // namespace kx::cpu
