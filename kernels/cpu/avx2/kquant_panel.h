// AVX2: a whole 8-row panel of one Q4_K or Q6_K super-block decoded straight into the
// K-quant matmul's transposed order (kquant_gemm.h Chunk: vector p of block j
// holds elements (2p, 2p+1) of the 8 rows, row r in dword r, as int16 sc·q).
//
// Why: the generic decode widens each row's 32 q of a block to int16
// (vpmovsxbw, cross-lane: port 5 only), stores them, and transposes 8 rows ×
// 16 dwords per block (unpacks and vperm2i128). In pp512 on Qwen2.5-1.5B that
// decode cost ~570 cycles per panel and super-block, ~8.6 % of the AVX2
// matmul at the engine's 64 columns (bench_matmul: 50.5 GMAC/s at 64 columns,
// 54.0 at 256, same kernel). Here the transpose runs on the packed nibbles: a
// 16-bit word of a Q4_K chunk is one element pair of two blocks (low nibbles:
// block 2k, high: 2k+1), so 4 rows × 8 words per 128-bit lane (rows 0-3 in the
// low lane, 4-7 in the high one) need two in-lane unpack stages per 16 pairs,
// and widening the nibbles with zeros (vpunpck{l,h}bw, in-lane) puts every
// row's pair in its dword in row order. The sub-block scales are transposed
// once per super-block (the header's sc pairs are already one dword per
// block). The values are those of the generic decode, bit for bit.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/simd_decode.h"

namespace kx::cpu::avx2 {

// 8 rows × 8 dwords → 8 vectors of one dword of every row (dst[k · dst_stride],
// row i in dword i).
inline void Transpose8x32(const __m256i (&r)[8], __m256i* dst, size_t dst_stride) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + k], lane L: rows 4g..4g+3 at dword 4L + k; then the two 128-bit lanes.
  for (int g = 0; g < 2; ++g) {
    u[4 * g + 0] = _mm256_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm256_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm256_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm256_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    dst[k * dst_stride] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    dst[(4 + k) * dst_stride] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

// 16 bytes at q of 8 rows (row_bytes apart) → c[i], per 128-bit lane: 16-bit word 2i of its 4
// rows (bytes 0-7), then word 2i + 1 (bytes 8-15); rows 0-3 in the low lane, 4-7 in the high.
// Widening a c[i] with zeros (vpunpck{l,h}bw) then puts row r's bytes in dword r.
inline void TransposeWords(const uint8_t* q, size_t row_bytes, __m256i (&c)[4]) {
  __m256i a[4];  // lane 0: row i's 8 words; lane 1: row i + 4's
  for (int i = 0; i < 4; ++i) {
    const uint8_t* r = q + static_cast<size_t>(i) * row_bytes;
    a[i] = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 4 * row_bytes)), 1);
  }
  const __m256i b0 = _mm256_unpacklo_epi16(a[0], a[1]), b1 = _mm256_unpackhi_epi16(a[0], a[1]);
  const __m256i b2 = _mm256_unpacklo_epi16(a[2], a[3]), b3 = _mm256_unpackhi_epi16(a[2], a[3]);
  c[0] = _mm256_unpacklo_epi32(b0, b2);
  c[1] = _mm256_unpackhi_epi32(b0, b2);
  c[2] = _mm256_unpacklo_epi32(b1, b3);
  c[3] = _mm256_unpackhi_epi32(b1, b3);
}

inline void PrefetchRows(const uint8_t* next, size_t row_bytes, size_t block_bytes, int rows) {
  for (int r = 0; r < rows; ++r) {
    const char* f = reinterpret_cast<const char*>(next + static_cast<size_t>(r) * row_bytes);
    for (size_t o = 0; o < block_bytes; o += 64) _mm_prefetch(f + o, _MM_HINT_T0);
  }
}

// Layouts without a panel decoder take kquant_gemm.h's generic one.
template <class L>
struct PanelDecode {};

template <>
struct PanelDecode<Q4KLayout> {
  static constexpr bool kDecodes = true;
  static constexpr int kRows = 8;

  // Chunk: KGemm's (w[8][16][1] vectors, d[8], mm[8][8]); next: where the
  // following super-block of these rows starts (prefetched).
  template <class Chunk>
  static void Decode(const uint8_t* w, size_t row_bytes, const uint8_t* next, Chunk* ch) {
    __m256i sc[kRows], mins[kRows];
    alignas(32) float neg_dmin[kRows];
    PrefetchRows(next, row_bytes, Q4KLayout::kBlockBytes, kRows);
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
      KHeader h;
      simd::Q4KDecode::Header(p, &h);
      ch->d[r] = h.d;
      neg_dmin[r] = -h.dmin;
      // sc, m: int16 pairs (s_j, s_j), one dword per 32-element block.
      sc[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(h.sc));
      mins[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(h.m));
    }
    __m256i scv[kRows], mv[kRows];  // [block]: dword r = row r's pair
    Transpose8x32(sc, scv, 1);
    Transpose8x32(mins, mv, 1);
    const __m256 nd = _mm256_load_ps(neg_dmin);
    const __m256i low16 = _mm256_set1_epi32(0xffff);
    for (int j = 0; j < kRows; ++j) {  // −dmin·m, as the generic decode rounds it
      const __m256 m = _mm256_cvtepi32_ps(_mm256_and_si256(mv[j], low16));
      _mm256_store_ps(&ch->mm[j][0], _mm256_mul_ps(nd, m));
    }

    const __m256i nib = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {    // 32-byte chunk k: blocks 2k (low nibbles), 2k+1 (high)
      for (int h = 0; h < 2; ++h) {  // bytes 16h..16h+15: pairs 8h..8h+7
        __m256i c[4];
        TransposeWords(w + Q4KLayout::kQs + 32 * k + 16 * h, row_bytes, c);
        for (int i = 0; i < 4; ++i) {
          const int p = 8 * h + 2 * i;
          const __m256i lo = _mm256_and_si256(c[i], nib);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c[i], 4), nib);
          ch->w[2 * k][p][0] = _mm256_mullo_epi16(_mm256_unpacklo_epi8(lo, zero), scv[2 * k]);
          ch->w[2 * k][p + 1][0] = _mm256_mullo_epi16(_mm256_unpackhi_epi8(lo, zero), scv[2 * k]);
          ch->w[2 * k + 1][p][0] =
              _mm256_mullo_epi16(_mm256_unpacklo_epi8(hi, zero), scv[2 * k + 1]);
          ch->w[2 * k + 1][p + 1][0] =
              _mm256_mullo_epi16(_mm256_unpackhi_epi8(hi, zero), scv[2 * k + 1]);
        }
      }
    }
  }
};

// Q6_K: block J = 4·hh + s of half hh has its low 4 bits in the ql chunk 64·hh + 32·(s % 2)
// (nibble s / 2) and its top 2 in the qh chunk 32·hh (bits 2s), and a scale per 16 elements
// (pairs 0-7, 8-15); q − 32 is widened, then multiplied by its scale, as the generic decode.
template <>
struct PanelDecode<Q6KLayout> {
  static constexpr bool kDecodes = true;
  static constexpr int kRows = 8;

  template <class Chunk>
  static void Decode(const uint8_t* w, size_t row_bytes, const uint8_t* next, Chunk* ch) {
    PrefetchRows(next, row_bytes, Q6KLayout::kBlockBytes, kRows);
    __m256i first[kRows], second[kRows];  // per row: dword J = scale of pairs 0-7 / 8-15, twice
    const __m256i low16 = _mm256_set1_epi32(0xffff);
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
      ch->d[r] = simd::Half(p + Q6KLayout::kD);
      const __m256i sc = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + Q6KLayout::kScales)));
      const __m256i even = _mm256_and_si256(sc, low16), odd = _mm256_srli_epi32(sc, 16);
      first[r] = _mm256_or_si256(even, _mm256_slli_epi32(even, 16));
      second[r] = _mm256_or_si256(odd, _mm256_slli_epi32(odd, 16));
    }
    __m256i scv[2][kRows];  // [pairs 8·half..][block]: dword r = row r's scale, twice
    Transpose8x32(first, scv[0], 1);
    Transpose8x32(second, scv[1], 1);

    const __m256i nib = _mm256_set1_epi8(0x0f), top = _mm256_set1_epi8(0x30);
    const __m256i zero = _mm256_setzero_si256(), bias = _mm256_set1_epi16(32);
    for (int hh = 0; hh < 2; ++hh) {
      for (int half = 0; half < 2; ++half) {  // bytes 16·half..: pairs 8·half..8·half + 7
        __m256i qh[4], ql0[4], ql1[4];
        TransposeWords(w + Q6KLayout::kQh + 32 * hh + 16 * half, row_bytes, qh);
        TransposeWords(w + Q6KLayout::kQl + 64 * hh + 16 * half, row_bytes, ql0);
        TransposeWords(w + Q6KLayout::kQl + 64 * hh + 32 + 16 * half, row_bytes, ql1);
        for (int i = 0; i < 4; ++i) {
          const int p = 8 * half + 2 * i;
          const __m256i q[4] = {
              _mm256_or_si256(_mm256_and_si256(ql0[i], nib),
                              _mm256_and_si256(_mm256_slli_epi16(qh[i], 4), top)),
              _mm256_or_si256(_mm256_and_si256(ql1[i], nib),
                              _mm256_and_si256(_mm256_slli_epi16(qh[i], 2), top)),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0[i], 4), nib),
                              _mm256_and_si256(qh[i], top)),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1[i], 4), nib),
                              _mm256_and_si256(_mm256_srli_epi16(qh[i], 2), top))};
          for (int s = 0; s < 4; ++s) {
            const int j = 4 * hh + s;
            const __m256i lo = _mm256_sub_epi16(_mm256_unpacklo_epi8(q[s], zero), bias);
            const __m256i hi = _mm256_sub_epi16(_mm256_unpackhi_epi8(q[s], zero), bias);
            ch->w[j][p][0] = _mm256_mullo_epi16(lo, scv[half][j]);
            ch->w[j][p + 1][0] = _mm256_mullo_epi16(hi, scv[half][j]);
          }
        }
      }
    }
  }
};

}  // namespace kx::cpu::avx2
