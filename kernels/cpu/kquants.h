// ggml's K-quant super-blocks (256 elements), read as facts from ggml's
// block definitions and checked bit for bit against gguf-py's dequantization
// (tests/golden/dequant/). Shared by the scalar reference and every ISA:
//
// Every K-quant element is w = d·sc·q − dmin·m with integer q (|q| ≤ 32),
// an integer scale sc and min m per sub-block (16 or 32 elements), and half
// d, dmin per super-block (dmin = m = 0 for the types without a min). So
//   Σ w·x = d·Σ_j d_x(j)·Σ_i (sc·q)_i·qx_i − dmin·Σ_k m_k·S_k
// over activation blocks j (BlockQ16A, 32 elements) and sub-blocks k of 16
// elements, where S_k = d_x·Σ qx over those 16 (Q16ASums16). sc·q fits int16
// (|sc·q| ≤ 128·32 = 4096), so the kernels widen q to int16, multiply by the
// per-element scale (vpmullw) and run the same int16 dot products as the
// legacy types; the mins become one 16-lane product per super-block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/internal.h"

namespace kx::cpu {

inline constexpr int kQK_K = 256;                // elements per K-quant super-block
inline constexpr int kSubBlocks16 = kQK_K / 16;  // 16-element sub-blocks per super-block
inline constexpr int kActBlocksK = kQK_K / kQK;  // BlockQ16A blocks per super-block

// A super-block's scales in one form for every K-quant: sc[k], m[k] for the
// 16-element sub-block k (types with 32-element sub-blocks repeat each value
// twice), d and dmin as floats.
struct KHeader {
  alignas(32) int16_t sc[kSubBlocks16];
  alignas(32) int16_t m[kSubBlocks16];
  float d, dmin;
};

// S_k = d·Σ qs over each 16 elements of the BlockQ16A activations act (n
// elements): dst[n / 16]. The integer sum is exact; one rounding.
inline void Q16ASums16(const void* act, int64_t n, float* dst) {
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t b = 0; b < n / kQK; ++b) {
    BlockQ16A blk;
    std::memcpy(&blk, a + b * sizeof(BlockQ16A), sizeof blk);
    for (int h = 0; h < 2; ++h) {
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += blk.qs[16 * h + i];
      dst[2 * b + h] = blk.d * static_cast<float>(s);
    }
  }
}

namespace kq {

inline void SetPairs(KHeader* h, int j, int sc, int m) {  // a 32-element sub-block j
  h->sc[2 * j] = h->sc[2 * j + 1] = static_cast<int16_t>(sc);
  h->m[2 * j] = h->m[2 * j + 1] = static_cast<int16_t>(m);
}

// Q4_K and Q5_K: 8 six-bit scales and mins in 12 bytes s: for j < 4, sc =
// s[j] & 63, m = s[j+4] & 63; for j ≥ 4 the low 4 bits come from s[j+4]
// (scale: low nibble, min: high nibble) and the top 2 bits from bits 6-7 of
// s[j-4] (scale) and s[j] (min).
inline void ScaleMin6(const uint8_t* s, KHeader* h) {
  for (int j = 0; j < 4; ++j) SetPairs(h, j, s[j] & 63, s[j + 4] & 63);
  for (int j = 4; j < 8; ++j) {
    SetPairs(h, j, (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
             (s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

}  // namespace kq

// Per type: byte offsets, Header (scales), Quants (q of all 256 elements in
// order, scalar: the reference's decoder; the SIMD decoders are per ISA).
struct Q4KLayout {  // d, dmin, scales[12], qs[128]: q = nibble (chunks of 64: low, then high)
  static constexpr GgmlType kType = GgmlType::kQ4_K;
  static constexpr size_t kBlockBytes = 144;
  static constexpr bool kHasMin = true;
  static constexpr int kMaxScaledQ = 63 * 15;  // largest |sc·q|: 6-bit scales, 4-bit q
  static constexpr size_t kQs = 16;
  static void Header(const uint8_t* p, KHeader* h) {
    h->d = HalfToFloat(LoadU16(p));
    h->dmin = HalfToFloat(LoadU16(p + 2));
    kq::ScaleMin6(p + 4, h);
  }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int e = 0; e < kQK_K; ++e) {
      q[e] = static_cast<int8_t>((p[kQs + (e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0x0f);
    }
  }
};

struct Q5KLayout {  // d, dmin, scales[12], qh[32], qs[128]: q = Q4_K's | (qh[l] >> j & 1) << 4
  static constexpr GgmlType kType = GgmlType::kQ5_K;
  static constexpr size_t kBlockBytes = 176;
  static constexpr bool kHasMin = true;
  static constexpr int kMaxScaledQ = 63 * 31;
  static constexpr size_t kQh = 16;
  static constexpr size_t kQs = 48;
  static void Header(const uint8_t* p, KHeader* h) { Q4KLayout::Header(p, h); }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int e = 0; e < kQK_K; ++e) {
      const int lo = (p[kQs + (e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0x0f;
      const int hi = (p[kQh + e % 32] >> (e / 32)) & 1;
      q[e] = static_cast<int8_t>(lo | hi << 4);
    }
  }
};

// ql[128], qh[64], scales[16] (int8, per 16), d. Element e = 128·h + r:
// low 4 bits from ql[64·h + r % 64] (nibble r / 64), high 2 bits from
// qh[32·h + r % 32] (bits 2·(r / 32)); q = that − 32.
struct Q6KLayout {
  static constexpr GgmlType kType = GgmlType::kQ6_K;
  static constexpr size_t kBlockBytes = 210;
  static constexpr bool kHasMin = false;
  static constexpr int kMaxScaledQ = 128 * 32;  // int8 scales, q − 32 in −32..31
  static constexpr size_t kQl = 0;
  static constexpr size_t kQh = 128;
  static constexpr size_t kScales = 192;
  static constexpr size_t kD = 208;
  static void Header(const uint8_t* p, KHeader* h) {
    for (int k = 0; k < kSubBlocks16; ++k) {
      h->sc[k] = static_cast<int8_t>(p[kScales + k]);
      h->m[k] = 0;
    }
    h->d = HalfToFloat(LoadU16(p + kD));
    h->dmin = 0.0f;
  }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128;
      const int lo = (p[kQl + 64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
      const int hi = (p[kQh + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
      q[e] = static_cast<int8_t>((lo | hi << 4) - 32);
    }
  }
};

// hmask[32], qs[64], scales[12], d. Element e = 128·h + 32·s + l: low 2
// bits (qs[32·h + l] >> 2s) & 3, minus 4 unless bit e / 32 of hmask[l] is
// set. Scale k (6 bits, minus 32): low 4 bits from scales[k % 8] (nibble
// k / 8), high 2 from scales[8 + k % 4] bits 2·(k / 4).
struct Q3KLayout {
  static constexpr GgmlType kType = GgmlType::kQ3_K;
  static constexpr size_t kBlockBytes = 110;
  static constexpr bool kHasMin = false;
  static constexpr int kMaxScaledQ = 32 * 4;
  static constexpr size_t kHmask = 0;
  static constexpr size_t kQs = 32;
  static constexpr size_t kScales = 96;
  static constexpr size_t kD = 108;
  static void Header(const uint8_t* p, KHeader* h) {
    const uint8_t* s = p + kScales;
    for (int k = 0; k < kSubBlocks16; ++k) {
      const int lo = (s[k % 8] >> (4 * (k / 8))) & 0x0f;
      const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
      h->sc[k] = static_cast<int16_t>((lo | hi << 4) - 32);
      h->m[k] = 0;
    }
    h->d = HalfToFloat(LoadU16(p + kD));
    h->dmin = 0.0f;
  }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const int lo = (p[kQs + 32 * h + l] >> (2 * s)) & 3;
      const int hbit = (p[kHmask + l] >> (e / 32)) & 1;
      q[e] = static_cast<int8_t>(lo - (hbit ? 0 : 4));
    }
  }
};

// scales[16] (low nibble scale, high nibble min, per 16), qs[64], d, dmin.
// q as Q3_K's low 2 bits.
struct Q2KLayout {
  static constexpr GgmlType kType = GgmlType::kQ2_K;
  static constexpr size_t kBlockBytes = 84;
  static constexpr bool kHasMin = true;
  static constexpr int kMaxScaledQ = 15 * 3;
  static constexpr size_t kScales = 0;
  static constexpr size_t kQs = 16;
  static constexpr size_t kD = 80;
  static void Header(const uint8_t* p, KHeader* h) {
    for (int k = 0; k < kSubBlocks16; ++k) {
      h->sc[k] = static_cast<int16_t>(p[kScales + k] & 0x0f);
      h->m[k] = static_cast<int16_t>(p[kScales + k] >> 4);
    }
    h->d = HalfToFloat(LoadU16(p + kD));
    h->dmin = HalfToFloat(LoadU16(p + kD + 2));
  }
  static void Quants(const uint8_t* p, int8_t* q) {
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      q[e] = static_cast<int8_t>((p[kQs + 32 * h + l] >> (2 * s)) & 3);
    }
  }
};

}  // namespace kx::cpu
