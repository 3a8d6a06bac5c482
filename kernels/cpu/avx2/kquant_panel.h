// AVX2: a whole 8-row panel of one Q4_K super-block decoded straight into the
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
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
      const char* f = reinterpret_cast<const char*>(next + static_cast<size_t>(r) * row_bytes);
      for (size_t o = 0; o < Q4KLayout::kBlockBytes; o += 64) _mm_prefetch(f + o, _MM_HINT_T0);
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
    const size_t rb4 = 4 * row_bytes;
    for (int k = 0; k < 4; ++k) {    // 32-byte chunk k: blocks 2k (low nibbles), 2k+1 (high)
      for (int h = 0; h < 2; ++h) {  // bytes 16h..16h+15: pairs 8h..8h+7
        __m256i a[4];                // lane 0: row i's 8 words; lane 1: row i + 4's
        for (int i = 0; i < 4; ++i) {
          const uint8_t* q =
              w + static_cast<size_t>(i) * row_bytes + Q4KLayout::kQs + 32 * k + 16 * h;
          a[i] = _mm256_inserti128_si256(
              _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))),
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + rb4)), 1);
        }
        const __m256i b0 = _mm256_unpacklo_epi16(a[0], a[1]),
                      b1 = _mm256_unpackhi_epi16(a[0], a[1]);
        const __m256i b2 = _mm256_unpacklo_epi16(a[2], a[3]),
                      b3 = _mm256_unpackhi_epi16(a[2], a[3]);
        // c[i], per lane: word 2i of its 4 rows (bytes 0-7), then word 2i + 1 (bytes 8-15).
        const __m256i c[4] = {_mm256_unpacklo_epi32(b0, b2), _mm256_unpackhi_epi32(b0, b2),
                              _mm256_unpacklo_epi32(b1, b3), _mm256_unpackhi_epi32(b1, b3)};
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

}  // namespace kx::cpu::avx2
