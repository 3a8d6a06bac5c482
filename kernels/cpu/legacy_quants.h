// ggml's 32-element Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 blocks (structs in
// internal.h): w = d·q (+ m for Q4_1/Q5_1) with q an int8 in element order
// from Quants. Shared by the scalar reference (ref/q4_0.cc, ...) and the SIMD
// decoders' tails.
#pragma once

#include "kernels/cpu/internal.h"

namespace kx::cpu {

struct Q4_0Layout {
  static constexpr GgmlType kType = GgmlType::kQ4_0;
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_0);
  static constexpr bool kHasMin = false;
  static constexpr size_t kQs = offsetof(BlockQ4_0, qs);
  static float M(const uint8_t*) { return 0.0f; }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int j = 0; j < kQK / 2; ++j) {
      q[j] = static_cast<int8_t>((p[kQs + j] & 0x0f) - 8);
      q[j + kQK / 2] = static_cast<int8_t>((p[kQs + j] >> 4) - 8);
    }
  }
};

struct Q4_1Layout {
  static constexpr GgmlType kType = GgmlType::kQ4_1;
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_1);
  static constexpr bool kHasMin = true;
  static constexpr size_t kQs = offsetof(BlockQ4_1, qs);
  static float M(const uint8_t* p) { return HalfToFloat(LoadU16(p + offsetof(BlockQ4_1, m))); }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int j = 0; j < kQK / 2; ++j) {
      q[j] = static_cast<int8_t>(p[kQs + j] & 0x0f);
      q[j + kQK / 2] = static_cast<int8_t>(p[kQs + j] >> 4);
    }
  }
};

struct Q8_0Layout {
  static constexpr GgmlType kType = GgmlType::kQ8_0;
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static float M(const uint8_t*) { return 0.0f; }
  static void Quants(const uint8_t* p, int8_t* q) {
    std::memcpy(q, p + offsetof(BlockQ8_0, qs), kQK);
  }
};

// Element j's fifth bit is bit j of the little-endian 32-bit qh.
template <size_t kQh, size_t kQs, int kOffset>
inline void Quants5(const uint8_t* p, int8_t* q) {
  const uint32_t qh = static_cast<uint32_t>(p[kQh]) | static_cast<uint32_t>(p[kQh + 1]) << 8 |
                      static_cast<uint32_t>(p[kQh + 2]) << 16 |
                      static_cast<uint32_t>(p[kQh + 3]) << 24;
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = p[kQs + j] & 0x0f, hi = p[kQs + j] >> 4;
    q[j] = static_cast<int8_t>((lo | ((qh >> j) & 1) << 4) - kOffset);
    q[j + kQK / 2] = static_cast<int8_t>((hi | ((qh >> (j + kQK / 2)) & 1) << 4) - kOffset);
  }
}

struct Q5_0Layout {
  static constexpr GgmlType kType = GgmlType::kQ5_0;
  static constexpr size_t kBlockBytes = sizeof(BlockQ5_0);
  static constexpr bool kHasMin = false;
  static constexpr size_t kQh = offsetof(BlockQ5_0, qh);
  static constexpr size_t kQs = offsetof(BlockQ5_0, qs);
  static float M(const uint8_t*) { return 0.0f; }
  static void Quants(const uint8_t* p, int8_t* q) { Quants5<kQh, kQs, 16>(p, q); }
};

struct Q5_1Layout {
  static constexpr GgmlType kType = GgmlType::kQ5_1;
  static constexpr size_t kBlockBytes = sizeof(BlockQ5_1);
  static constexpr bool kHasMin = true;
  static constexpr size_t kQh = offsetof(BlockQ5_1, qh);
  static constexpr size_t kQs = offsetof(BlockQ5_1, qs);
  static float M(const uint8_t* p) { return HalfToFloat(LoadU16(p + offsetof(BlockQ5_1, m))); }
  static void Quants(const uint8_t* p, int8_t* q) { Quants5<kQh, kQs, 0>(p, q); }
};

}  // namespace kx::cpu
