// AVX-512 VNNI Q4_K matvec / small matmul in lane order on bytes (vpdpbusd): the same lanes,
// sums and float steps as Q4KLanes (kquant_lanes.h: read its header first), with the nibbles
// left as bytes instead of widened to int16 words.
//
// Why: Q4KLanes spends 12 shift/AND operations per super-block making int16 words of the 128
// nibble bytes (one per nibble position per 16-bit word), and with the 8 vpdpwssd and the
// float steps the kernel is bound by the two vector ports at ~18 GB/s on one core — barely
// above one core's DRAM read rate (~16.5 GB/s), so decode could not overlap compute with the
// reads (bench_kernels --model qwen1.5b: 0.78 of the probe from DRAM). Here the 16-bit
// activations are split into bytes, x = 256·xh + xl (xh = x >> 8 signed, xl = x & 0xff
// unsigned), prepared once per call, and each nibble vector meets them in two vpdpbusd:
// q (unsigned) · xh (signed) and xl (unsigned) · q (signed: 0..15 fits). One AND (low
// nibbles) or shift + AND (high) per 64 weights instead of three per 64; one shift of the
// xh sum (·256) per 256 weights. The 6-bit scales are unpacked in one 128-bit vector instead
// of scalar code, and d·sc meets d_x once per super-block before the permutes.
// Measured (thread CPU time, one core, rows in the L2, docs/performance.md): Q4_K 8960x1536
// 17.5 → 19.8 GB/s, 1536x8960 17.2 → 19.6.
//
// Exactness: lane (c, i) of the even sum is Σ q·x over the same eight elements of block 2c as
// in Q4KLanes (low nibbles of qs[32c + 4i .. +3] and qs[32c + 16 + 4i .. +3]), and
// Σ q·x = 256·Σ q·xh + Σ q·xl exactly in int32 (|Σ q·xh| ≤ 8·15·128), so every int32 lane,
// and hence every float step after it, is bit-identical to Q4KLanes (tested).
#pragma once

#include <cstddef>

#include "kernels/cpu/avx512/kquant_lanes.h"

namespace kx::cpu::avx512 {

struct Q4KBytesVnni {
  static constexpr GgmlType kType = GgmlType::kQ4_K;
  static constexpr size_t kBlockBytes = Q4KLayout::kBlockBytes;
  static constexpr size_t kQs = Q4KLayout::kQs;
  static constexpr int kPrefetchTiles = Q4KLanes::kPrefetchTiles;
  // One super-block of one column. Vector v: 0 = low nibbles of v0 (block 2c, elements
  // 0..15 in 128-bit chunk c), 1 = low nibbles of v1 (block 2c, elements 16..31), 2 and 3 the
  // high nibbles (block 2c+1); xl[v] / xh[v] hold the activations' low / high bytes in that
  // order. dx: d_x of block j at lanes 2j and 2j+1 (F's order: one product f·dx gives both
  // Q4KLanes' fe·dx[0] and fo·dx[1], bit for bit, before their permutes); s as in Q4KLanes.
  struct alignas(64) Prep {
    __m512i xl[4];
    __m512i xh[4];
    __m512 dx;
    __m512 s;
  };

  static void Prepare(const uint8_t* a, Prep* dst) {
    constexpr size_t kB = sizeof(BlockQ16A);
    auto* xl = reinterpret_cast<uint8_t*>(dst->xl);
    auto* xh = reinterpret_cast<uint8_t*>(dst->xh);
    for (int j = 0; j < 8; ++j) {
      // Block j = 2c + odd: its elements 0..15 go to chunk c of vector 2·odd, 16..31 to
      // chunk c of vector 2·odd + 1.
      const __m512i x = _mm512_loadu_si512(a + j * kB + kQ16AQs);
      const __m256i lo = _mm512_cvtepi16_epi8(x);
      const __m256i hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(x, 8));
      const size_t at = static_cast<size_t>(2 * (j % 2)) * 64 + static_cast<size_t>(j / 2) * 16;
      _mm_store_si128(reinterpret_cast<__m128i*>(xl + at), _mm256_castsi256_si128(lo));
      _mm_store_si128(reinterpret_cast<__m128i*>(xl + at + 64), _mm256_extracti128_si256(lo, 1));
      _mm_store_si128(reinterpret_cast<__m128i*>(xh + at), _mm256_castsi256_si128(hi));
      _mm_store_si128(reinterpret_cast<__m128i*>(xh + at + 64), _mm256_extracti128_si256(hi, 1));
    }
    // d (the first float) of block l / 2: q4_s's offsets of s (the second), less 4 bytes.
    dst->dx = GatherAct(a, _mm512_sub_epi32(LoadI(kLane.q4_s), _mm512_set1_epi32(4)));
    dst->s = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xAAAA, LoadI(kLane.q4_s), a, 1);
  }

  // This super-block's q as bytes, in the order the Prep matches.
  [[gnu::always_inline]] static inline void Words(const uint8_t* p, __m512i (&w)[4]) {
    const __m512i va = _mm512_loadu_si512(p + kQs);
    const __m512i vb = _mm512_loadu_si512(p + kQs + 64);
    const __m512i v0 = _mm512_shuffle_i64x2(va, vb, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i v1 = _mm512_shuffle_i64x2(va, vb, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    w[0] = _mm512_and_si512(v0, low4);
    w[1] = _mm512_and_si512(v1, low4);
    w[2] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);
    w[3] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m512 (&acc)[C]) {
    DotWith<Q4KBytesVnni, kVnni, C>(p, x, acc);
  }

  // Dot with T's q bytes (T::Words: 0..31 each, a u8 and an s8 operand alike): the part
  // Q5_K shares.
  template <class T, bool kVnni, int C>
  [[gnu::always_inline]] static inline void DotWith(const uint8_t* p, const Prep* const (&x)[C],
                                                    __m512 (&acc)[C]) {
    static_assert(kVnni, "vpdpbusd: the VNNI table only");
    // F as in Q4KLanes::Dot, its (sc_j, m_j) byte pairs unpacked from the 12 scale bytes in
    // one vector: bytes 2j / 2j+1 take scales[j] / scales[j+4] (& 63) for j < 4, and for
    // j >= 4 the low / high nibble of scales[j+4] with bits 6-7 of scales[j-4] / scales[j]
    // on top (kq::ScaleMin6).
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // d, dmin, scales
    const __m128i a0 = _mm_shuffle_epi8(
        h, _mm_setr_epi8(4, 8, 5, 9, 6, 10, 7, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    const __m128i nib = _mm_mask_blend_epi8(0xAA00, a0, _mm_srli_epi16(a0, 4));
    const __m128i low = _mm_and_si128(
        nib, _mm_setr_epi8(63, 63, 63, 63, 63, 63, 63, 63, 15, 15, 15, 15, 15, 15, 15, 15));
    constexpr char kZ = -128;  // pshufb: a zero byte
    const __m128i top = _mm_srli_epi16(
        _mm_shuffle_epi8(h,
                         _mm_setr_epi8(kZ, kZ, kZ, kZ, kZ, kZ, kZ, kZ, 4, 8, 5, 9, 6, 10, 7, 11)),
        2);
    constexpr int kOrAnd = 0xF8;  // a | (b & c)
    const __m128i scm = _mm_ternarylogic_epi32(low, top, _mm_set1_epi8(0x30), kOrAnd);
    const __m512 dd = _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int>(LoadU32(p))));
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scm)), dd);
    const __m512i ie = LoadI(kLane.q4_fe), io = LoadI(kLane.q4_fo);

    __m512i w[4];
    T::Words(p, w);
    for (int col = 0; col < C; ++col) {
      const Prep& xp = *x[col];
      __m512i se = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], xp.xh[0]);
      se = _mm512_slli_epi32(_mm512_dpbusd_epi32(se, w[1], xp.xh[1]), 8);
      se = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(se, xp.xl[0], w[0]), xp.xl[1], w[1]);
      __m512i so = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[2], xp.xh[2]);
      so = _mm512_slli_epi32(_mm512_dpbusd_epi32(so, w[3], xp.xh[3]), 8);
      so = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(so, xp.xl[2], w[2]), xp.xl[3], w[3]);
      const __m512 fdx = _mm512_mul_ps(f, xp.dx);
      __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(se), _mm512_permutexvar_ps(ie, fdx), acc[col]);
      r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(so), _mm512_permutexvar_ps(io, fdx), r);
      acc[col] = _mm512_fnmadd_ps(f, xp.s, r);
    }
  }
};

// Q5_K on bytes: Q4KBytesVnni's activations, lanes and float steps with 5-bit q bytes
// (Q5KFiveBitBytes: kquant_lanes.h), one vpternlog select and one AND per 64 bytes.
// Exactness: Σ q·xh over a lane's 8 elements is ≤ 8·31·128 in magnitude, Σ q·x = 256·Σ q·xh +
// Σ q·xl exactly, so every int32 lane equals Q5KLanes' and the results are bit-identical.
struct Q5KBytesVnni : Q4KBytesVnni {
  static constexpr GgmlType kType = GgmlType::kQ5_K;
  static constexpr size_t kBlockBytes = Q5KLayout::kBlockBytes;
  static constexpr size_t kQs = Q5KLayout::kQs;
  static constexpr size_t kQh = Q5KLayout::kQh;

  [[gnu::always_inline]] static inline void Words(const uint8_t* p, __m512i (&w)[4]) {
    Q5KFiveBitBytes(p + kQs, p + kQh, w);
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m512 (&acc)[C]) {
    DotWith<Q5KBytesVnni, kVnni, C>(p, x, acc);
  }
};

}  // namespace kx::cpu::avx512
