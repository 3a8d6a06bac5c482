// AVX-512 Q4_K, Q5_K and Q6_K matvec / matmul in "lane order": the weights are
// used in the order they lie in the GGUF (no repacking, no widening
// shuffles), and the activations are rearranged once per call to match.
//
// Why: kquant_tiles.h widens every 32-element block to int16, multiplies it by
// its sub-block scale (vpmullw) and converts and scales its int32 sums in
// float, per block and per row: ~8 vector operations per 16 weight bytes,
// compute-bound at a third of the read bandwidth. Here the unscaled q meet
// the activations in vpdpwssd (vpmaddwd + vpaddd without VNNI), arranged so
// that every int32 lane holds products of one scale group only; the scales
// (and the activations' d_x) then apply per lane in float, to 4 blocks at
// once:
//  - Q4_K: 64-byte loads A, B of the 128 nibble bytes; vshufi64x2 regroups
//    them into V0 = bytes [0-15, 32-47, 64-79, 96-111], V1 = the other 16 of
//    each 32. A 16-bit word of V holds four nibbles: bits 0-3 and 8-11 are
//    elements of block 2c (c = the word's 128-bit chunk), bits 4-7 and 12-15
//    of block 2c+1; one shift and one AND per nibble position gives int16 q,
//    and the sums of the four even-block vectors (int32 lanes 4c..4c+3 ←
//    block 2c) and of the four odd-block vectors each convert and scale once
//    per super-block.
//  - Q5_K: Q4_K's header, nibbles and lanes (the same Prep), each nibble
//    with its fifth bit from qh put above it (Q5KLanes) before the split.
//  - Q6_K: per half h, the 64 ql bytes and the 32 qh bytes (broadcast to
//    both 256-bit halves, the upper half's shifted by 2 bits) combine with one
//    vpternlog per nibble position into 6-bit q bytes in element order
//    (128h + b and 128h + 64 + b); AND / shift split them into even and odd
//    int16 words. Lane l of a sum is then elements 4l..4l+3 of its 64: one
//    16-element sub-block per 4 lanes, scaled by a vpermps of the 16 scales.
//    The −32 offset is exact integer work in the activations: each sum starts
//    from −32·Σx of its lane (prepared), not from zero.
// Per column and super-block, Prepare() writes the activations in these
// orders (Prep), into stack scratch once per chunk of n (matvec) or per chunk
// and panel of columns (matmul): tile_driver.h's ChunkedPrepEntry.
//
// Exactness: every int32 lane sums ≤ 8 products (|q| ≤ 15, ≤ 31 (Q5_K) or
// |q − 32| ≤ 32 with |x| ≤ 32767: |sum| ≤ 8·32·32767 < 2^23; partial sums stay
// far from 2^31), so it is exact, and its conversion to float too (< 2^24). Float: per lane one
// product d·sc (or dmin·m), one with d_x, one fma per super-block; then the horizontal sum. Rows
// are reduced per chunk of kChunkSb super-blocks (y written by the first chunk, added to by the
// rest), the same in matvec and matmul, so matmul's column c equals matvec on it bit for bit.
//
// Measured (Xeon, AVX-512 VNNI, one thread, weights in L3, load ~10): Q4_K
// 8960x1536 8.5 → 17.6 GB/s, Q6_K 1536x8960 11.5 → 19.8 GB/s.
#pragma once

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/kquants.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx512 {

inline constexpr size_t kQ16AQs = offsetof(BlockQ16A, qs);

template <bool kVnni>
inline __m512i DotW(__m512i acc, __m512i w, __m512i x) {
  if constexpr (kVnni) {
    return _mm512_dpwssd_epi32(acc, w, x);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x));
  }
}

// Block j's (d, s) or (s) at 72·j + offset for lanes l: gather indices.
inline __m512 GatherAct(const uint8_t* a, __m512i byte_idx) {
  return _mm512_i32gather_ps(byte_idx, a, 1);
}

// Indices as constexpr tables (vector constants load from .rodata).
struct LaneTables {
  alignas(64) int16_t q4_x[4][32];  // Q4_K Prep.q from blocks (2c | 2c+1): p2v word indices
  alignas(64) int32_t q4_fe[16];    // F lanes of the even-block sums (d·sc_{2c} at lane 4·c)
  alignas(64) int32_t q4_fo[16];
  alignas(64) int32_t q4_dx[2][16];  // byte offsets of d_x(block 2c / 2c+1)
  alignas(64) int32_t q4_s[16];      // byte offsets of s_j at odd lanes 2j+1
  alignas(64) int16_t q6_x[2][32];   // even / odd words from blocks (2i, 2i+1)
  alignas(64) int32_t q6_f[4][16];   // sc index of sum (h, part)'s lane l: 8h + 4·part + l/4
  alignas(64) int32_t q6_dxs[16];    // byte offset of d_x(l/2): sub-block l's block
};
inline constexpr LaneTables MakeLaneTables() {
  LaneTables t{};
  constexpr int kOff[4] = {0, 1, 16, 17};  // Prep.q[v] (v = a0, c0, a1, c1) element offsets
  constexpr int kB = static_cast<int>(sizeof(BlockQ16A));
  for (int v = 0; v < 4; ++v) {
    for (int k = 0; k < 32; ++k) {
      t.q4_x[v][k] = static_cast<int16_t>(((k / 8) % 2 ? 32 : 0) + kOff[v] + 2 * (k % 8));
    }
  }
  for (int l = 0; l < 16; ++l) {
    t.q4_fe[l] = 4 * (l / 4);
    t.q4_fo[l] = 4 * (l / 4) + 2;
    t.q4_dx[0][l] = kB * (2 * (l / 4));
    t.q4_dx[1][l] = kB * (2 * (l / 4) + 1);
    t.q4_s[l] = kB * (l / 2) + 4;  // s (second float); even lanes masked off
  }
  for (int l = 0; l < 16; ++l) t.q6_dxs[l] = kB * (l / 2);
  for (int k = 0; k < 32; ++k) {
    t.q6_x[0][k] = static_cast<int16_t>(2 * k);
    t.q6_x[1][k] = static_cast<int16_t>(2 * k + 1);
  }
  for (int s = 0; s < 4; ++s) {
    const int h = s / 2, part = s % 2;
    for (int l = 0; l < 16; ++l) {
      t.q6_f[s][l] = 8 * h + 4 * part + l / 4;
    }
  }
  return t;
}
inline constexpr LaneTables kLane = MakeLaneTables();

inline __m512i LoadI(const void* p) { return _mm512_load_si512(p); }

struct Q4KLanes {
  static constexpr GgmlType kType = GgmlType::kQ4_K;
  static constexpr size_t kBlockBytes = Q4KLayout::kBlockBytes;
  static constexpr size_t kQs = Q4KLayout::kQs;
  static constexpr int kPrefetchTiles = 2;  // KLaneTiles: row tiles prefetched ahead
  // One super-block of one column: q[0..3] match the even-block weight words
  // (a0, c0, a1, c1), q[4..7] the odd ones; dx per lane of each sum; s_j at
  // the odd lanes 2j+1 (the F lanes holding dmin·m_j), 0 at the even ones.
  struct alignas(64) Prep {
    __m512i q[8];
    __m512 dx[2];
    __m512 s;
  };

  static void Prepare(const uint8_t* a, Prep* dst) {
    constexpr size_t kB = sizeof(BlockQ16A);
    __m512i x[8];
    for (int j = 0; j < 8; ++j) x[j] = _mm512_loadu_si512(a + j * kB + kQ16AQs);
    constexpr __mmask32 kUpper = 0xFFFF0000u;
    for (int odd = 0; odd < 2; ++odd) {
      for (int v = 0; v < 4; ++v) {
        const __m512i idx = LoadI(kLane.q4_x[v]);
        const __m512i lo = _mm512_permutex2var_epi16(x[odd], idx, x[2 + odd]);
        const __m512i hi = _mm512_permutex2var_epi16(x[4 + odd], idx, x[6 + odd]);
        dst->q[4 * odd + v] = _mm512_mask_blend_epi16(kUpper, lo, hi);
      }
      dst->dx[odd] = GatherAct(a, LoadI(kLane.q4_dx[odd]));
    }
    dst->s = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xAAAA, LoadI(kLane.q4_s), a, 1);
  }

  // This super-block's q as int16 words, in the order the Prep matches.
  [[gnu::always_inline]] static inline void Words(const uint8_t* p, __m512i (&w)[8]) {
    const __m512i va = _mm512_loadu_si512(p + kQs);
    const __m512i vb = _mm512_loadu_si512(p + kQs + 64);
    const __m512i v0 = _mm512_shuffle_i64x2(va, vb, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i v1 = _mm512_shuffle_i64x2(va, vb, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i low4 = _mm512_set1_epi16(0x0f);
    w[0] = _mm512_and_si512(v0, low4);                        // block 2c, elements 4i, 4i+2
    w[1] = _mm512_and_si512(_mm512_srli_epi16(v0, 8), low4);  // 4i+1, 4i+3
    w[2] = _mm512_and_si512(v1, low4);                        // 16 + the same
    w[3] = _mm512_and_si512(_mm512_srli_epi16(v1, 8), low4);
    w[4] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);  // block 2c+1
    w[5] = _mm512_srli_epi16(v0, 12);
    w[6] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
    w[7] = _mm512_srli_epi16(v1, 12);
  }

  // acc[c] += this super-block's dot product with column c's Prep (spread
  // over lanes).
  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m512 (&acc)[C]) {
    DotWith<Q4KLanes, kVnni, C>(p, x, acc);
  }

  // Dot with T's words (T::Words): the part Q5_K shares (its header is Q4_K's, its q are
  // Q4_K's nibbles with a fifth bit).
  template <class T, bool kVnni, int C>
  [[gnu::always_inline]] static inline void DotWith(const uint8_t* p, const Prep* const (&x)[C],
                                                    __m512 (&acc)[C]) {
    // F: lanes 2j = d·sc_j, 2j+1 = dmin·m_j (kq::ScaleMin6's bit layout,
    // four sub-blocks per 32-bit word).
    const uint8_t* s = p + 4;
    const uint32_t a = LoadU32(s), b = LoadU32(s + 4), c = LoadU32(s + 8);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, kTop = 0x30303030;
    const uint64_t sc = (a & k6) | static_cast<uint64_t>((c & k4) | ((a >> 2) & kTop)) << 32;
    const uint64_t m = (b & k6) | static_cast<uint64_t>(((c >> 4) & k4) | ((b >> 2) & kTop)) << 32;
    const __m128i scm = _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<long long>(sc)),
                                          _mm_cvtsi64_si128(static_cast<long long>(m)));
    const __m512 dd = _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int>(LoadU32(p))));
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scm)), dd);
    const __m512 fe = _mm512_permutexvar_ps(LoadI(kLane.q4_fe), f);
    const __m512 fo = _mm512_permutexvar_ps(LoadI(kLane.q4_fo), f);

    __m512i w[8];
    T::Words(p, w);
    for (int col = 0; col < C; ++col) {
      const Prep& xp = *x[col];
      __m512i se, so;
      if constexpr (kVnni) {
        se = _mm512_dpwssd_epi32(_mm512_madd_epi16(w[0], xp.q[0]), w[1], xp.q[1]);
        se = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(se, w[2], xp.q[2]), w[3], xp.q[3]);
        so = _mm512_dpwssd_epi32(_mm512_madd_epi16(w[4], xp.q[4]), w[5], xp.q[5]);
        so = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(so, w[6], xp.q[6]), w[7], xp.q[7]);
      } else {
        se = _mm512_add_epi32(
            _mm512_add_epi32(_mm512_madd_epi16(w[0], xp.q[0]), _mm512_madd_epi16(w[1], xp.q[1])),
            _mm512_add_epi32(_mm512_madd_epi16(w[2], xp.q[2]), _mm512_madd_epi16(w[3], xp.q[3])));
        so = _mm512_add_epi32(
            _mm512_add_epi32(_mm512_madd_epi16(w[4], xp.q[4]), _mm512_madd_epi16(w[5], xp.q[5])),
            _mm512_add_epi32(_mm512_madd_epi16(w[6], xp.q[6]), _mm512_madd_epi16(w[7], xp.q[7])));
      }
      __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(se), _mm512_mul_ps(fe, xp.dx[0]), acc[col]);
      r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(so), _mm512_mul_ps(fo, xp.dx[1]), r);
      acc[col] = _mm512_fnmadd_ps(f, xp.s, r);
    }
  }
};

// Q5_K's fifth bit of element 32j + b is bit j of qh[b]. A nibble vector's 128-bit chunk c
// holds blocks 2c (low nibbles) and 2c+1 (high) at elements b = 0..15 (v0) or 16..31 (v1), so
// the 16 qh bytes of those b, broadcast to every chunk and rotated per 64-bit lane by 4 − 2c
// (Q5Rotate), carry block 2c's bit at bit 4 of byte b and block 2c+1's at bit 5.
inline __m512i Q5Rotate(__m512i h, int odd) {
  const __m512i r = _mm512_set_epi64(62, 62, 0, 0, 2, 2, 4, 4);  // (4 − 2c) mod 64, chunk c
  return _mm512_rolv_epi64(h, odd ? _mm512_sub_epi64(r, _mm512_set1_epi64(1)) : r);
}

// One Q5_K block's 5-bit q as bytes, in Q4_K's lane order: per 64 nibble bytes v, a vpternlog
// puts the fifth bit above each nibble (byte-wise select: bits 0-3 from v, 4-7 from the rotated
// qh, of which bit 4 is the wanted one), one AND with 0x1f per 64 bytes clears the rest.
// b[i]: the low nibbles' q (elements 0..15 of each 32-element block for i = 0, 16..31 for
// i = 1), b[2 + i]: the high nibbles'. Q5KLanes (words) and Q5KBytesVnni (bytes) both start here.
[[gnu::always_inline]] inline void Q5KFiveBitBytes(const uint8_t* qs, const uint8_t* qh,
                                                   __m512i (&b)[4]) {
  const __m512i va = _mm512_loadu_si512(qs);
  const __m512i vb = _mm512_loadu_si512(qs + 64);
  const __m512i v[2] = {_mm512_shuffle_i64x2(va, vb, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_i64x2(va, vb, _MM_SHUFFLE(3, 1, 3, 1))};
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i low5 = _mm512_set1_epi8(0x1f);
  constexpr int kSelect = 0xCA;  // a ? b : c, bitwise
  for (int i = 0; i < 2; ++i) {
    const __m512i h =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * i)));
    b[i] = _mm512_and_si512(_mm512_ternarylogic_epi32(low4, v[i], Q5Rotate(h, 0), kSelect), low5);
    b[2 + i] = _mm512_and_si512(
        _mm512_ternarylogic_epi32(low4, _mm512_srli_epi16(v[i], 4), Q5Rotate(h, 1), kSelect),
        low5);
  }
}

// Q5_K in lane order: Q4KLanes' activations, lanes and float steps (the header and the
// element order are Q4_K's), with 5-bit q words: Q5KFiveBitBytes' bytes, each 64 split into
// the even bytes' words (AND 0x00ff) and the odd bytes' (>> 8). Exactness: an int32 lane sums
// 8 products |q·x| ≤ 31·32767, so |sum| < 2^23: exact, and exact as a float, as Q4_K's.
struct Q5KLanes : Q4KLanes {
  static constexpr GgmlType kType = GgmlType::kQ5_K;
  static constexpr size_t kBlockBytes = Q5KLayout::kBlockBytes;
  static constexpr size_t kQs = Q5KLayout::kQs;
  static constexpr size_t kQh = Q5KLayout::kQh;

  [[gnu::always_inline]] static inline void Words(const uint8_t* p, __m512i (&w)[8]) {
    __m512i b[4];
    Q5KFiveBitBytes(p + kQs, p + kQh, b);
    const __m512i low8 = _mm512_set1_epi16(0x00ff);
    for (int i = 0; i < 2; ++i) {  // Q4KLanes::Words' order
      w[2 * i] = _mm512_and_si512(b[i], low8);
      w[2 * i + 1] = _mm512_srli_epi16(b[i], 8);
      w[4 + 2 * i] = _mm512_and_si512(b[2 + i], low8);
      w[5 + 2 * i] = _mm512_srli_epi16(b[2 + i], 8);
    }
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m512 (&acc)[C]) {
    DotWith<Q5KLanes, kVnni, C>(p, x, acc);
  }
};

struct Q6KLanes {
  static constexpr GgmlType kType = GgmlType::kQ6_K;
  static constexpr size_t kBlockBytes = Q6KLayout::kBlockBytes;
  // Two tiles ahead towards L2, as Q4_K. (One was better while this prefetch went to L1:
  // two tiles of FFN down's 16-super-block chunks, ~27 KiB, then competed with the tile's own
  // lines there. Towards L2, with KLaneTiles' second prefetch one tile ahead into L1, two
  // tiles are faster: see KLaneTiles.)
  static constexpr int kPrefetchTiles = 2;
  // Sum s = 2h + part (part 0: elements 128h + 0..63, 1: 128h + 64..127):
  // q[2s] / q[2s+1] match its even / odd words, neg32[s] = −32·Σx per lane
  // (the sum's start); dx: lane k = d_x of sub-block k's 32-element block
  // (k / 2), so one product with the 16 scales gives every sum's d·sc·d_x,
  // which the q6_f permutes then spread (the same products as permuting the
  // scales first and multiplying per sum: bit for bit, 3 multiplies fewer).
  struct alignas(64) Prep {
    __m512i q[8];
    __m512i neg32[4];
    __m512 dx;
  };

  static void Prepare(const uint8_t* a, Prep* dst) {
    constexpr size_t kB = sizeof(BlockQ16A);
    const __m512i m32 = _mm512_set1_epi16(-32);
    for (int s = 0; s < 4; ++s) {
      const __m512i x0 = _mm512_loadu_si512(a + 2 * s * kB + kQ16AQs);
      const __m512i x1 = _mm512_loadu_si512(a + (2 * s + 1) * kB + kQ16AQs);
      const __m512i e = _mm512_permutex2var_epi16(x0, LoadI(kLane.q6_x[0]), x1);
      const __m512i o = _mm512_permutex2var_epi16(x0, LoadI(kLane.q6_x[1]), x1);
      dst->q[2 * s] = e;
      dst->q[2 * s + 1] = o;
      dst->neg32[s] = _mm512_add_epi32(_mm512_madd_epi16(e, m32), _mm512_madd_epi16(o, m32));
    }
    dst->dx = GatherAct(a, LoadI(kLane.q6_dxs));
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m512 (&acc)[C]) {
    const __m512 f16 = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + Q6KLayout::kScales)))),
        _mm512_set1_ps(_cvtsh_ss(LoadU16(p + Q6KLayout::kD))));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i bits2 = _mm512_set1_epi8(0x33);
    const __m512i low8 = _mm512_set1_epi16(0xff);
    __m512 fdx[C];
    for (int col = 0; col < C; ++col) fdx[col] = _mm512_mul_ps(f16, x[col]->dx);
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(p + Q6KLayout::kQl + 64 * h);
      const __m512i h2 = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + Q6KLayout::kQh + 32 * h)));
      // Upper 256 bits (elements 32-63 of each 64): qh bits 2-3 / 6-7.
      const __m512i hs = _mm512_mask_srli_epi16(h2, 0xFFFF0000u, h2, 2);
      const __m512i hm = _mm512_and_si512(hs, bits2);
      constexpr int kSelect = 0xCA;  // a ? b : c, bitwise
      const __m512i qlo =
          _mm512_ternarylogic_epi32(low4, l, _mm512_slli_epi16(hm, 4), kSelect);  // 128h + b
      const __m512i qhi =
          _mm512_ternarylogic_epi32(low4, _mm512_srli_epi16(l, 4), hm, kSelect);  // + 64
      const __m512i w[4] = {_mm512_and_si512(qlo, low8), _mm512_srli_epi16(qlo, 8),
                            _mm512_and_si512(qhi, low8), _mm512_srli_epi16(qhi, 8)};
      for (int col = 0; col < C; ++col) {
        const Prep& xp = *x[col];
        for (int part = 0; part < 2; ++part) {
          const int s = 2 * h + part;
          const __m512i sum = DotW<kVnni>(DotW<kVnni>(xp.neg32[s], w[2 * part], xp.q[2 * s]),
                                          w[2 * part + 1], xp.q[2 * s + 1]);
          acc[col] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                              _mm512_permutexvar_ps(LoadI(kLane.q6_f[s]), fdx[col]), acc[col]);
        }
      }
    }
  }
};

// Super-blocks per chunk (see ChunkedPrepEntry in tile_driver.h): a row's
// sum is reduced and added to y every kChunkSb super-blocks, in matvec and
// matmul alike; matmul prepares up to kKLanePrepBytes of activations per panel
// of columns (8 columns of a chunk) and runs its tiles chunk by chunk, matvec
// prepares many chunks at once and runs whole rows (KLaneEntry::Matvec).
inline constexpr int64_t kChunkSb = 16;
inline constexpr size_t kKLanePrepBytes = 128 * 1024;

template <class T, bool kVnni>
struct KLaneTiles {
  using Prep = typename T::Prep;
#ifdef KX_KLANE_PREFETCH_TILES  // tuning experiments only
  static constexpr int kPrefetchTiles = KX_KLANE_PREFETCH_TILES;
#else
  static constexpr int kPrefetchTiles = T::kPrefetchTiles;  // the same offset this many tiles on
#endif
  // A second prefetch, one tile ahead, from L2 into L1 (T0): the first (T1, kPrefetchTiles
  // ahead) brings the lines from memory into L2 only, so without this one every weight line
  // was still an L1 miss when its tile loaded it, and those misses waited for fill buffers
  // behind the memory prefetches in flight; the arithmetic, at ~83 % of the memory time,
  // then stalled. Measured (2026-11-27, one thread, thread CPU time, weights from DRAM in
  // 2 MiB pages, load 7-8; docs/performance.md): Q4_K 8960x1536 14.1 → 15.2 GB/s, 1536x8960
  // 12.5 → 13.2, Q6_K 1536x8960 12.4 → 13.3, the LM head 13.4 → 15.3; in L2 unchanged.
  static constexpr int kL1PrefetchTiles = 1;
  // ...but only while a tile is short (up to 16 KiB: every matrix of a 7B-class model but its
  // FFN down, n = 4096: 9–13 KiB for four rows). A tile of long rows (FFN down of Qwen 1.5B,
  // n = 8960: 20–29 KiB) one tile ahead in the L1, beside that row's prepared activations
  // (22–29 KiB), overflowed a 32–48 KiB L1 and evicted lines before their use; there the near
  // prefetch runs kL1LeadBytes / R ahead in each of the tile's own rows instead, the same few
  // KiB of lead in all. Measured (2026-12-02, AMD Zen 5, one thread; docs/performance.md):
  // `bench_kernels --model qwen1.5b --isa avx512vnni --huge-pages`, 1536x8960 from DRAM, three
  // runs each, medians: Q4_K 25.0 → 28.3 GB/s, Q6_K 22.4 → 25.3 (in-row leads of 512 B, 768 B,
  // 2 KiB and 4 KiB per row were no better); Qwen 1.5B decode's ffn_down 12.5 → 11.7 ms per
  // token (10 of 10 alternating kairox-bench pairs faster). Tiles between 9 and 20 KiB were
  // not measured, hence the threshold's place.
  static constexpr int64_t kL1TileMaxBytes = 16384;
  static constexpr int64_t kL1LeadBytes = 4096;
  static constexpr int kLine = 64;

  // The near prefetch's distance in bytes from the line being read, for a call spanning nsb
  // super-blocks of each row. A call of one chunk (matmul, whatever its tile's columns: it
  // runs a row kChunkSb super-blocks at a time) keeps the tile ahead, since a lead inside the
  // row would fetch the next chunk, read only after every other row's chunk; matvec's calls
  // span whole rows (KLaneEntry::Matvec).
  template <int R>
  static int64_t NearPrefetchBytes(size_t row_bytes, int64_t nsb) {
    const int64_t tile = R * static_cast<int64_t>(row_bytes);
    return nsb <= kChunkSb || tile <= kL1TileMaxBytes ? kL1PrefetchTiles * tile
                                                      : kL1LeadBytes / R;
  }

  template <int R, int C>
  static void Tile(const TileArgs& args, int64_t r0, int64_t c0) {
    const TileArgs t = args;  // a local copy: no reloads through the reference
    const int64_t nsb = t.n / kQK_K;
    const int64_t near = NearPrefetchBytes<R>(t.row_bytes, nsb);
    // One chunk (matmul) or many (matvec): each reduced and added at its end, so a row's
    // bits do not depend on how many chunks one call spans.
    for (int64_t s0 = 0; s0 == 0 || s0 < nsb; s0 += kChunkSb) {
      const int64_t s1 = std::min(nsb, s0 + kChunkSb);
      __m512 acc[R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
      for (int64_t sb = s0; sb < s1; ++sb) Step<R, C>(t, r0, c0, sb, near, acc);
      for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) {
          float& y = t.y[(c0 + c) * t.ldy + r0 + r];
          const float v = _mm512_reduce_add_ps(acc[r][c]);
          y = t.accumulate || s0 > 0 ? y + v : v;
        }
      }
    }
  }

  // Super-block sb of the tile's rows into acc; near: NearPrefetchBytes.
  template <int R, int C>
  [[gnu::always_inline]] static inline void Step(const TileArgs& t, int64_t r0, int64_t c0,
                                                 int64_t sb, int64_t near, __m512 (&acc)[R][C]) {
    const Prep* xp[C];
    for (int c = 0; c < C; ++c) {
      xp[c] = reinterpret_cast<const Prep*>(t.prep + (c0 + c) * t.prep_stride) + sb;
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = t.w + (r0 + r) * t.row_bytes + sb * T::kBlockBytes;
      const char* f = reinterpret_cast<const char*>(p) + kPrefetchTiles * R * t.row_bytes;
      const char* g = reinterpret_cast<const char*>(p) + near;
      // Far towards L2 (T1), not L1: a T0 prefetch from memory holds one of the few L1 fill
      // buffers for the whole DRAM latency, which capped one thread below the read bandwidth
      // (2026-11-27, kairox-bench tg, 1 thread, alternating: Qwen 1.5B 11.3-12.6 → 12.7-12.8
      // t/s, Gemma 3 270M +6 %, SmolLM2 +4-8 %); near (g) from L2 into L1, a short wait.
      for (size_t o = 0; o < T::kBlockBytes; o += kLine) {
        _mm_prefetch(f + o, _MM_HINT_T1);
        _mm_prefetch(g + o, _MM_HINT_T0);
      }
      T::template Dot<kVnni, C>(p, xp, acc[r]);
    }
  }
};

template <class T, bool kVnni>
struct KLaneEntry : ChunkedPrepEntry<T, KLaneTiles<T, kVnni>, kChunkSb, kKLanePrepBytes, 4, 4, 4> {
  using E = ChunkedPrepEntry<T, KLaneTiles<T, kVnni>, kChunkSb, kKLanePrepBytes, 4, 4, 4>;
  using Prep = typename T::Prep;
  // Whole chunks of prepared activations that fit the scratch (Q6_K: 144 super-blocks,
  // n = 36864; Q4_K and Q5_K: 192).
  static constexpr int64_t kSpanSb = kKLanePrepBytes / sizeof(Prep) / kChunkSb * kChunkSb;
  static_assert(kSpanSb >= kChunkSb);

  // Matvec: E::Matvec's sums, bit for bit, but each row tile runs a span of many chunks in
  // one pass instead of 16 super-blocks then the next tile. Why: with 16-super-block chunks a
  // long row (FFN down, n = 8960: 35 super-blocks) was read in 2.3-3.4 KiB pieces, four rows
  // at a time, one chunk's sweep over all rows after another; read whole, it streams as
  // gate/up's short rows do. Measured (thread CPU time, one thread, from DRAM, load 6,
  // both with the two prefetches; docs/performance.md): 1536x8960 Q4_K 13.1 → 14.2 GB/s,
  // Q6_K 13.4 → 14.2; with the rows in L2 3-5 % slower (a whole row's activations, 22-29
  // KiB, share the L1 with the weights), which decode does not see.
  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    constexpr size_t kSbActBytes = kActBlocksK * sizeof(BlockQ16A);
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* ap = static_cast<const uint8_t*>(act);
    const int64_t nsb = n / kQK_K;
    alignas(64) uint8_t scratch[kKLanePrepBytes];
    auto* prep = reinterpret_cast<Prep*>(scratch);
    for (int64_t s0 = 0; s0 == 0 || s0 < nsb; s0 += kSpanSb) {  // n = 0: y = 0
      const int64_t ns = std::min(nsb - s0, kSpanSb);
      for (int64_t s = 0; s < ns; ++s) T::Prepare(ap + (s0 + s) * kSbActBytes, prep + s);
      TileArgs t{wp + s0 * T::kBlockBytes, row_bytes, ns * kQK_K, ap + s0 * kSbActBytes, 0, y, 0};
      t.prep = scratch;
      t.accumulate = s0 > 0;
      TileDriver<KLaneTiles<T, kVnni>, 4, 1>::Run(t, rows, 1);
    }
  }

  static constexpr TypeKernels Make(void (*dequantize)(const void*, float*, int64_t)) {
    return {T::kType, &Q16AActBytes, &QuantizeQ16AVec, &Matvec, &E::Matmul, dequantize};
  }
};

}  // namespace kx::cpu::avx512
