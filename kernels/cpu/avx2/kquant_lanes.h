// AVX2 Q4_K, Q5_K and Q6_K matvec / matmul in lane order: the scheme of
// avx512/kquant_lanes.h (read its header first) on 256-bit vectors.
//  - Q4_K: four 32-byte loads A0..A3 of the nibble bytes; vperm2i128 pairs
//    them into V = [A0 | A1 low halves], [A0 | A1 high halves] and the same
//    for A2, A3, so a sum's int32 lanes 4c..4c+3 hold one block (four sums
//    per super-block: blocks (0, 2), (4, 6), (1, 3), (5, 7)).
//  - Q5_K: Q4_K's lanes and Prep with 5-bit q words (Q5KLanes).
//  - Q6_K: per 32-element block one 6-bit q vector (low nibbles with qh bits
//    0-1 and so on, by AND / shift / OR), split into even and odd int16 words:
//    a sum per block, lanes 0-3 / 4-7 its two 16-element sub-blocks; the −32
//    is the prepared −32·Σx each sum starts from.
// Every int32 lane sums ≤ 8 products (exact, and exact as a float); float:
// d·sc (dmin·m), times d_x, one fma per super-block, the horizontal sum; rows
// reduced per kChunkSb super-blocks as in the AVX-512 version. Activations
// are prepared by vector shuffles (pshufb, vpermq, vperm2i128).
//
// Without AVX-512 the kernels are bound by the vector ports, not by memory
// (one core: ~12 GB/s against a ~17 GB/s read rate), so operations are
// counted per super-block. Q4_K: two of the four nibble positions of a
// 16-bit word are masked in place instead of shifted down (0x0f00 = 256·q,
// 0x00f0 = 16·q): their madd sums are 256× / 16× the exact Σ q·x (≤ 2^29)
// and one arithmetic shift per sum divides exactly — 8 shifts instead of 12,
// the same int32 lanes. Both: d·sc meets the block's d_x once per
// super-block (Prep holds d_x in the scales' lane order) and is then
// permuted, instead of a permute, a broadcast and a multiply per sum; Q4_K's
// d and dmin come from one half-to-float conversion. The products are the
// same, so the results are bit-identical to the per-sum form (compared on
// random and extreme rows when written; tests/kernels/test_kernels_isa.cc
// checks the limits against the reference). Measured: docs/performance.md.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx2 {

inline constexpr size_t kQ16AQs = offsetof(BlockQ16A, qs);

inline __m256i Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i LoadA(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }

template <bool kVnni>
inline __m256i DotW(__m256i acc, __m256i w, __m256i x) {
#ifdef __AVXVNNI__
  if constexpr (kVnni) return _mm256_dpwssd_avx_epi32(acc, w, x);
#endif
  return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct LaneTables {
  alignas(32) int32_t q4_fe[8];       // sum of blocks (b, b+2): lanes → index 2·(l/4)
  alignas(32) int32_t q4_fo[8];       // (b+1, b+3): 2·(l/4) + 1
  alignas(32) int32_t q6_f[4][8];     // sum of block J: lanes → sc 2·(J % 4) + l/4 of F_{J/4}
  alignas(32) int8_t even_words[32];  // pshufb: words 0, 2, 4, 6 of each 128-bit lane, then odd
};
inline constexpr LaneTables MakeLaneTables() {
  LaneTables t{};
  for (int l = 0; l < 8; ++l) {
    t.q4_fe[l] = 2 * (l / 4);
    t.q4_fo[l] = 2 * (l / 4) + 1;
    for (int j = 0; j < 4; ++j) t.q6_f[j][l] = 2 * j + l / 4;
  }
  for (int i = 0; i < 32; ++i) {
    const int b = i % 16, word = b / 2, byte = b % 2;  // word 0-3: even, 4-7: odd
    t.even_words[i] = static_cast<int8_t>((word < 4 ? 4 * word : 4 * (word - 4) + 2) + byte);
  }
  return t;
}
inline constexpr LaneTables kLane = MakeLaneTables();

// x's 16 words in a 256-bit register → [even words | odd words] (8 each).
inline __m256i EvenOdd(__m256i x) {
  const __m256i v = _mm256_shuffle_epi8(x, LoadA(kLane.even_words));
  return _mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0));
}

struct Q4KLanes {
  static constexpr GgmlType kType = GgmlType::kQ4_K;
  static constexpr size_t kBlockBytes = Q4KLayout::kBlockBytes;
  static constexpr size_t kQs = Q4KLayout::kQs;
  // Sum k = 2·half + odd covers blocks b0 = 4·half + odd (lanes 0-3) and
  // b0 + 2 (lanes 4-7): q[4k + v] match its weight words v (elements 2w,
  // 2w+1, 16+2w, 17+2w of the block); dx[j] / s[j] = block j's d_x / s.
  struct alignas(32) Prep {
    __m256i q[16];
    __m256 dx;
    __m256 s;
  };

  static void Prepare(const uint8_t* a, Prep* dst) {
    constexpr size_t kB = sizeof(BlockQ16A);
    for (int k = 0; k < 4; ++k) {
      const int b0 = 4 * (k / 2) + k % 2, b1 = b0 + 2;
      for (int i = 0; i < 2; ++i) {  // elements 16i..16i+15: [even | odd] of b0, of b1
        const __m256i e0 = EvenOdd(Load(a + b0 * kB + kQ16AQs + 32 * i));
        const __m256i e1 = EvenOdd(Load(a + b1 * kB + kQ16AQs + 32 * i));
        dst->q[4 * k + 2 * i] = _mm256_permute2x128_si256(e0, e1, 0x20);      // even
        dst->q[4 * k + 2 * i + 1] = _mm256_permute2x128_si256(e0, e1, 0x31);  // odd
      }
    }
    const __m256i at = _mm256_setr_epi32(0, 18, 36, 54, 72, 90, 108, 126);  // BlockQ16A floats
    dst->dx = _mm256_i32gather_ps(reinterpret_cast<const float*>(a), at, 4);
    dst->s = _mm256_i32gather_ps(reinterpret_cast<const float*>(a + 4), at, 4);
  }

  // d·sc_j (fsc) and dmin·m_j (fm) at lane j: the header Q5_K shares.
  [[gnu::always_inline]] static inline void Scales(const uint8_t* p, __m256* fsc_out,
                                                   __m256* fm_out) {
    const uint8_t* s = p + 4;
    uint32_t a, b, c;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + 4, 4);
    std::memcpy(&c, s + 8, 4);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, kTop = 0x30303030;
    const uint64_t sc = (a & k6) | static_cast<uint64_t>((c & k4) | ((a >> 2) & kTop)) << 32;
    const uint64_t m = (b & k6) | static_cast<uint64_t>(((c >> 4) & k4) | ((b >> 2) & kTop)) << 32;
    // d and dmin in one conversion, each broadcast from its lane.
    uint32_t dd;
    std::memcpy(&dd, p, 4);
    const __m256 dm = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd))));
    *fsc_out = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc)))),
        _mm256_permutevar8x32_ps(dm, _mm256_setzero_si256()));
    *fm_out = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(m)))),
        _mm256_permutevar8x32_ps(dm, _mm256_set1_epi32(1)));
  }

  // Sum k's lanes take block 4·(k/2) + k%2 + 2·(l/4): idx[k] permutes f·d_x to them.
  [[gnu::always_inline]] static inline void SumLanes(__m256i (&idx)[4]) {
    const __m256i ie = LoadA(kLane.q4_fe), io = LoadA(kLane.q4_fo);
    const __m256i four = _mm256_set1_epi32(4);
    idx[0] = ie;
    idx[1] = io;
    idx[2] = _mm256_add_epi32(ie, four);
    idx[3] = _mm256_add_epi32(io, four);
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m256 (&acc)[C]) {
    __m256 fsc, fm;
    Scales(p, &fsc, &fm);
    __m256i idx[4];
    SumLanes(idx);
    const __m256i m0 = _mm256_set1_epi16(0x000f), m1 = _mm256_set1_epi16(0x00f0);
    const __m256i m2 = _mm256_set1_epi16(0x0f00);
    for (int col = 0; col < C; ++col) {
      const Prep& xp = *x[col];
      // (d·sc_j)·d_x(j) per block j: the per-lane product f·dx of one lane order, permuted.
      const __m256 fdx = _mm256_mul_ps(fsc, xp.dx);
      __m256 r = acc[col];
      for (int half = 0; half < 2; ++half) {
        const __m256i a0 = Load(p + kQs + 64 * half), a1 = Load(p + kQs + 64 * half + 32);
        const __m256i v0 = _mm256_permute2x128_si256(a0, a1, 0x20);  // bytes 0-15 of each 32
        const __m256i v1 = _mm256_permute2x128_si256(a0, a1, 0x31);  // 16-31
        const __m256i* q = xp.q + 8 * half;
        // Nibbles masked in place, not shifted down: a word's 0x0f00 nibble is 256·q and
        // its 0x00f0 nibble 16·q, so those products sum to 256× (16×) the exact Σ q·x
        // (≤ 4·3840·32767 < 2^31) and one arithmetic shift per sum divides exactly.
        const __m256i lo = _mm256_add_epi32(
            _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(v0, m0), q[0]),
                             _mm256_madd_epi16(_mm256_and_si256(v1, m0), q[2])),
            _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(v0, m2), q[1]),
                                               _mm256_madd_epi16(_mm256_and_si256(v1, m2), q[3])),
                              8));
        r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_permutevar8x32_ps(fdx, idx[2 * half]),
                            r);
        const __m256i hi = _mm256_add_epi32(
            _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(v0, m1), q[4]),
                                               _mm256_madd_epi16(_mm256_and_si256(v1, m1), q[6])),
                              4),
            _mm256_add_epi32(_mm256_madd_epi16(_mm256_srli_epi16(v0, 12), q[5]),
                             _mm256_madd_epi16(_mm256_srli_epi16(v1, 12), q[7])));
        r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi),
                            _mm256_permutevar8x32_ps(fdx, idx[2 * half + 1]), r);
      }
      acc[col] = _mm256_fnmadd_ps(fm, xp.s, r);
    }
  }
};

// Q5_K in lane order: Q4KLanes' activations, lanes and float steps (the header and the
// element order are Q4_K's) with 5-bit q. The fifth bit of element 32j + b is bit j of qh[b];
// a nibble vector's 128-bit lane holds blocks 2c (low nibbles) and 2c+1 (high) of chunk
// c = 2·half + lane at elements b = 0..15 (v0) or 16..31 (v1), so those 16 qh bytes, in both
// lanes, shifted per 64-bit lane (vpsllvq / vpsrlvq: for shifts of at most 4 no byte's bit 4
// takes a neighbour's bit) put block 2c's bit (2c+1's) at bit 4 of byte b. Per 32 nibble bytes:
// AND, OR into 5-bit q bytes (two per 16-bit word), then AND 0x00ff / a shift by 8 into
// words — no in-place masks: 256·31·32767 summed over 4 products would still fit, but the
// shift down costs what the mask does, and the sums then need no arithmetic shift. Exact:
// 8 products of |q·x| ≤ 31·32767 per int32 lane.
struct Q5KLanes : Q4KLanes {
  static constexpr GgmlType kType = GgmlType::kQ5_K;
  static constexpr size_t kBlockBytes = Q5KLayout::kBlockBytes;
  static constexpr size_t kQs = Q5KLayout::kQs;
  static constexpr size_t kQh = Q5KLayout::kQh;

  // Chunk c's fifth bits (odd: of block 2c+1) at bit 4 of each byte, half h's lanes.
  [[gnu::always_inline]] static inline __m256i HighBits(__m256i h, int half, int odd) {
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    if (half == 0) {  // c = 0, 1: left by 4 − 2c (3 − 2c)
      const __m256i n = odd ? _mm256_setr_epi64x(3, 3, 1, 1) : _mm256_setr_epi64x(4, 4, 2, 2);
      return _mm256_and_si256(_mm256_sllv_epi64(h, n), bit4);
    }
    // c = 2, 3: right by 2c − 4 (2c − 3)
    const __m256i n = odd ? _mm256_setr_epi64x(1, 1, 3, 3) : _mm256_setr_epi64x(0, 0, 2, 2);
    return _mm256_and_si256(_mm256_srlv_epi64(h, n), bit4);
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m256 (&acc)[C]) {
    __m256 fsc, fm;
    Scales(p, &fsc, &fm);
    __m256i idx[4];
    SumLanes(idx);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i low8 = _mm256_set1_epi16(0xff);
    const __m256i qh[2] = {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQh))),
        _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQh + 16)))};
    __m256 fdx[C];
    for (int col = 0; col < C; ++col) fdx[col] = _mm256_mul_ps(fsc, x[col]->dx);
    for (int half = 0; half < 2; ++half) {
      const __m256i a0 = Load(p + kQs + 64 * half), a1 = Load(p + kQs + 64 * half + 32);
      const __m256i v[2] = {_mm256_permute2x128_si256(a0, a1, 0x20),   // bytes 0-15 of each 32
                            _mm256_permute2x128_si256(a0, a1, 0x31)};  // 16-31
      // Q4KLanes::Dot's word order: w[2i], w[2i+1] = the even / odd elements of v[i]'s low
      // nibbles; w[4 + 2i], w[5 + 2i] of its high nibbles.
      __m256i w[8];
      for (int i = 0; i < 2; ++i) {
        const __m256i qe = _mm256_or_si256(_mm256_and_si256(v[i], low4), HighBits(qh[i], half, 0));
        const __m256i qo = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[i], 4), low4),
                                           HighBits(qh[i], half, 1));
        w[2 * i] = _mm256_and_si256(qe, low8);
        w[2 * i + 1] = _mm256_srli_epi16(qe, 8);
        w[4 + 2 * i] = _mm256_and_si256(qo, low8);
        w[5 + 2 * i] = _mm256_srli_epi16(qo, 8);
      }
      for (int col = 0; col < C; ++col) {
        const __m256i* q = x[col]->q + 8 * half;
        const __m256i lo = DotW<kVnni>(
            DotW<kVnni>(DotW<kVnni>(_mm256_madd_epi16(w[0], q[0]), w[1], q[1]), w[2], q[2]), w[3],
            q[3]);
        const __m256i hi = DotW<kVnni>(
            DotW<kVnni>(DotW<kVnni>(_mm256_madd_epi16(w[4], q[4]), w[5], q[5]), w[6], q[6]), w[7],
            q[7]);
        acc[col] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo),
                                   _mm256_permutevar8x32_ps(fdx[col], idx[2 * half]), acc[col]);
        acc[col] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi),
                                   _mm256_permutevar8x32_ps(fdx[col], idx[2 * half + 1]), acc[col]);
      }
    }
    for (int col = 0; col < C; ++col) acc[col] = _mm256_fnmadd_ps(fm, x[col]->s, acc[col]);
  }
};

struct Q6KLanes {
  static constexpr GgmlType kType = GgmlType::kQ6_K;
  static constexpr size_t kBlockBytes = Q6KLayout::kBlockBytes;
  // Per block J: q[2J] / q[2J+1] its even / odd elements, neg32[J] = −32·Σx
  // per lane (elements 4l..4l+3); dx[h] lane i = d_x of block 4h + i/2 (the
  // lane order of the scales' F_h).
  struct alignas(32) Prep {
    __m256i q[16];
    __m256i neg32[8];
    __m256 dx[2];
  };

  static void Prepare(const uint8_t* a, Prep* dst) {
    constexpr size_t kB = sizeof(BlockQ16A);
    const __m256i m32 = _mm256_set1_epi16(-32);
    for (int j = 0; j < kActBlocksK; ++j) {
      const __m256i lo = EvenOdd(Load(a + j * kB + kQ16AQs));       // elements 0-15
      const __m256i hi = EvenOdd(Load(a + j * kB + kQ16AQs + 32));  // 16-31
      const __m256i e = _mm256_permute2x128_si256(lo, hi, 0x20);
      const __m256i o = _mm256_permute2x128_si256(lo, hi, 0x31);
      dst->q[2 * j] = e;
      dst->q[2 * j + 1] = o;
      dst->neg32[j] = _mm256_add_epi32(_mm256_madd_epi16(e, m32), _mm256_madd_epi16(o, m32));
    }
    const __m256i at = _mm256_setr_epi32(0, 0, 18, 18, 36, 36, 54, 54);  // BlockQ16A floats
    dst->dx[0] = _mm256_i32gather_ps(reinterpret_cast<const float*>(a), at, 4);
    dst->dx[1] = _mm256_i32gather_ps(reinterpret_cast<const float*>(a + 4 * kB), at, 4);
  }

  template <bool kVnni, int C>
  [[gnu::always_inline]] static inline void Dot(const uint8_t* p, const Prep* const (&x)[C],
                                                __m256 (&acc)[C]) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + Q6KLayout::kScales));
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(LoadU16(p + Q6KLayout::kD)));
    const __m256 fsc[2] = {
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), d),
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc8, sc8))), d)};
    // (d·sc)·d_x per 16-element sub-block, once per super-block and column: the products
    // the per-block f·d_x gave, bit for bit, with one permute per block left.
    __m256 fdx[C][2];
    for (int col = 0; col < C; ++col) {
      for (int h = 0; h < 2; ++h) fdx[col][h] = _mm256_mul_ps(fsc[h], x[col]->dx[h]);
    }
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i hi2 = _mm256_set1_epi8(0x30);
    const __m256i lo2 = _mm256_set1_epi8(0x03);
    const __m256i low8 = _mm256_set1_epi16(0xff);
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = Load(p + Q6KLayout::kQh + 32 * h);
      for (int i = 0; i < 2; ++i) {  // ql bytes 32i..: blocks 4h + i (low nibbles), 4h + 2 + i
        const __m256i l = Load(p + Q6KLayout::kQl + 64 * h + 32 * i);
        const __m256i hb = i == 0 ? qh : _mm256_srli_epi16(qh, 2);
        const __m256i q[2] = {_mm256_or_si256(_mm256_and_si256(l, low4),
                                              _mm256_slli_epi16(_mm256_and_si256(hb, lo2), 4)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), low4),
                                              _mm256_and_si256(hb, hi2))};
        for (int part = 0; part < 2; ++part) {
          const int j = 4 * h + 2 * part + i;
          const __m256i we = _mm256_and_si256(q[part], low8);
          const __m256i wo = _mm256_srli_epi16(q[part], 8);
          for (int col = 0; col < C; ++col) {
            const Prep& xp = *x[col];
            const __m256i sum =
                DotW<kVnni>(DotW<kVnni>(xp.neg32[j], we, xp.q[2 * j]), wo, xp.q[2 * j + 1]);
            const __m256 f = _mm256_permutevar8x32_ps(fdx[col][j / 4], LoadA(kLane.q6_f[j % 4]));
            acc[col] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), f, acc[col]);
          }
        }
      }
    }
  }
};

// Super-blocks per chunk (see ChunkedPrepEntry in tile_driver.h): rows run
// 4 KiB (Q6_K) of weights per chunk; matmul prepares up to kKLanePrepBytes of
// activations per panel of columns (8 columns of a chunk).
inline constexpr int64_t kChunkSb = 16;
inline constexpr size_t kKLanePrepBytes = 128 * 1024;

template <class T, bool kVnni>
struct KLaneTiles {
  using Prep = typename T::Prep;
#ifdef KX_KLANE_PREFETCH_TILES  // tuning experiments only
  static constexpr int kPrefetchTiles = KX_KLANE_PREFETCH_TILES;
#else
  static constexpr int kPrefetchTiles = 2;  // as q16a_tiles.h
#endif
  static constexpr int kLine = 64;

  template <int R, int C>
  static void Tile(const TileArgs& args, int64_t r0, int64_t c0) {
    const TileArgs t = args;  // a local copy: no reloads through the reference
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t nsb = t.n / kQK_K;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const Prep* xp[C];
      for (int c = 0; c < C; ++c) {
        xp[c] = reinterpret_cast<const Prep*>(t.prep + (c0 + c) * t.prep_stride) + sb;
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = t.w + (r0 + r) * t.row_bytes + sb * T::kBlockBytes;
        const char* f = reinterpret_cast<const char*>(p) + kPrefetchTiles * R * t.row_bytes;
        for (size_t o = 0; o < T::kBlockBytes; o += kLine) _mm_prefetch(f + o, _MM_HINT_T0);
        T::template Dot<kVnni, C>(p, xp, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        float& y = t.y[(c0 + c) * t.ldy + r0 + r];
        const float v = HorizontalSum(acc[r][c]);
        y = t.accumulate ? y + v : v;
      }
    }
  }
};

template <class T, bool kVnni>
struct KLaneEntry : ChunkedPrepEntry<T, KLaneTiles<T, kVnni>, kChunkSb, kKLanePrepBytes, 4, 4, 4> {
  using E = ChunkedPrepEntry<T, KLaneTiles<T, kVnni>, kChunkSb, kKLanePrepBytes, 4, 4, 4>;
  static constexpr TypeKernels Make(void (*dequantize)(const void*, float*, int64_t)) {
    return {T::kType, &Q16AActBytes, &QuantizeQ16A, &E::Matvec, &E::Matmul, dequantize};
  }
};

}  // namespace kx::cpu::avx2
