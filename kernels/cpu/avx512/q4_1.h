// AVX-512 Q4_1 weights widened to int16 for q16a_tiles.h (q4_1.cc without
// VNNI, q4_1_vnni.cc with it). Byte j of a block's qs holds element j (low
// nibble) and j+16 (high nibble).
//  - pair: the two 16-byte nibble arrays widen with one vpmovzxbw to
//    [block b bytes | block b+1 bytes]; AND gives elements 0-15, a shift 16-31.
//  - quad: vpunpck{l,h}qdq regroup four blocks' bytes 0-7 and 8-15, which
//    widen to [bytes 0-7 of b, b+1, b+2, b+3] (and 8-15); AND and shift of
//    those give elements 0-7, 16-23 (and 8-15, 24-31).
#pragma once

#include "kernels/cpu/avx512/kquant_gemm.h"
#include "kernels/cpu/avx512/q16a_tiles.h"

namespace kx::cpu::avx512 {

struct Q4_1Wide {
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_1);
  static constexpr bool kHasMin = true;
  static constexpr bool kHasQuad = true;

  static WideQuad LoadQuad(const uint8_t* p) {
    constexpr size_t kQs = offsetof(BlockQ4_1, qs);
    constexpr size_t kB = kBlockBytes;
    auto q16 = [&](int blk) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + blk * kB + kQs));
    };
    // a = [q0 | q2], b = [q1 | q3]: unpacking 64-bit halves within 128-bit
    // lanes gives the blocks in order 0, 1, 2, 3.
    const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(q16(0)), q16(2), 1);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(q16(1)), q16(3), 1);
    const __m512i v0 = _mm512_cvtepu8_epi16(_mm256_unpacklo_epi64(a, b));  // bytes 0-7
    const __m512i v1 = _mm512_cvtepu8_epi16(_mm256_unpackhi_epi64(a, b));  // bytes 8-15
    const __m512i low4 = _mm512_set1_epi16(0x0f);
    WideQuad w;
    w.q[0] = _mm512_and_si512(v0, low4);                           // elements 0-7
    w.q[1] = _mm512_and_si512(v1, low4);                           // 8-15
    w.q[2] = _mm512_srli_epi16(v0, 4);                             // 16-23
    w.q[3] = _mm512_srli_epi16(v1, 4);                             // 24-31
    __m128i dm = _mm_cvtsi32_si128(static_cast<int>(LoadU32(p)));  // d, m halves of 4 blocks
    dm = _mm_insert_epi32(dm, static_cast<int>(LoadU32(p + kB)), 1);
    dm = _mm_insert_epi32(dm, static_cast<int>(LoadU32(p + 2 * kB)), 2);
    dm = _mm_insert_epi32(dm, static_cast<int>(LoadU32(p + 3 * kB)), 3);
    const __m512 dmf = _mm512_castps256_ps512(_mm256_cvtph_ps(dm));
    w.d = _mm512_permutexvar_ps(IdxQuad(0), dmf);
    w.m = _mm512_permutexvar_ps(IdxQuad(1), dmf);
    return w;
  }

  template <bool kTwo>
  static WidePair LoadPair(const uint8_t* p) {
    constexpr size_t kQs = offsetof(BlockQ4_1, qs);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQs));
    __m256i q;
    __m128i dm = _mm_cvtsi32_si128(static_cast<int>(LoadU32(p)));  // d, m halves
    if constexpr (kTwo) {
      q = _mm256_inserti128_si256(
          _mm256_castsi128_si256(q0),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBlockBytes + kQs)), 1);
      dm = _mm_insert_epi32(dm, static_cast<int>(LoadU32(p + kBlockBytes)), 1);
    } else {
      q = _mm256_zextsi128_si256(q0);
    }
    const __m512i v = _mm512_cvtepu8_epi16(q);
    WidePair w;
    w.lo = _mm512_and_si512(v, _mm512_set1_epi16(0x0f));
    w.hi = _mm512_srli_epi16(v, 4);
    const __m512 dmf = _mm512_castps128_ps512(_mm_cvtph_ps(dm));  // [d0, m0, d1, m1]
    w.d = _mm512_permutexvar_ps(IdxPairHalves(0), dmf);
    w.m = _mm512_permutexvar_ps(IdxPairHalves(1), dmf);
    return w;
  }
};

#ifdef __AVX512VBMI__
// With VBMI (q4_1_vbmi.cc): the quad's 80 bytes are two loads, and byte /
// word permutes pick the nibble bytes straight into zero-extended int16 lanes
// and the d, m halves straight into their lane pattern: 3 permutes instead of
// the ~12 shuffle-port operations of the generic quad decode (inserts,
// unpacks, widenings, inserts of the scales, float permutes), which compete
// with vpdpwssd and the FMAs for the same vector pipes.
struct Q4_1VbmiIndices {
  alignas(64) uint8_t lo[64];   // word k ← byte 4 + 20·(k/8) + k%8 (elements 0-7 | 16-23)
  alignas(64) uint8_t hi[64];   // word k ← byte 12 + 20·(k/8) + k%8 (8-15 | 24-31)
  alignas(64) uint16_t dm[32];  // words 0-15: d of block k/4; 16-31: m of block (k-16)/4
};
inline constexpr Q4_1VbmiIndices MakeQ4_1VbmiIndices() {
  Q4_1VbmiIndices t{};
  constexpr int kQs = static_cast<int>(offsetof(BlockQ4_1, qs));
  constexpr int kB = static_cast<int>(sizeof(BlockQ4_1));
  for (int k = 0; k < 32; ++k) {
    t.lo[2 * k] = static_cast<uint8_t>(kQs + kB * (k / 8) + k % 8);
    t.hi[2 * k] = static_cast<uint8_t>(kQs + 8 + kB * (k / 8) + k % 8);
    t.lo[2 * k + 1] = t.hi[2 * k + 1] = 0;  // zeroed by the mask
    const int half_words = kB / 2;          // 10 words per block; d at word 0, m at word 1
    t.dm[k] =
        static_cast<uint16_t>(k < 16 ? half_words * (k / 4) : half_words * ((k - 16) / 4) + 1);
  }
  return t;
}
struct Q4_1WideVbmi : Q4_1Wide {
  static constexpr Q4_1VbmiIndices kIdx = MakeQ4_1VbmiIndices();
  static constexpr __mmask64 kEvenBytes = 0x5555555555555555ull;
  static constexpr __mmask64 kTail = (1ull << (4 * kBlockBytes - 64)) - 1;  // bytes 64-79

  static WideQuad LoadQuad(const uint8_t* p) {
    const __m512i z0 = _mm512_loadu_si512(p);
    const __m512i z1 = _mm512_maskz_loadu_epi8(kTail, p + 64);  // never reads past the quad
    const __m512i v0 =
        _mm512_maskz_permutex2var_epi8(kEvenBytes, z0, _mm512_load_si512(kIdx.lo), z1);
    const __m512i v1 =
        _mm512_maskz_permutex2var_epi8(kEvenBytes, z0, _mm512_load_si512(kIdx.hi), z1);
    const __m512i low4 = _mm512_set1_epi16(0x0f);
    WideQuad w;
    w.q[0] = _mm512_and_si512(v0, low4);  // elements 0-7 of the 4 blocks
    w.q[1] = _mm512_and_si512(v1, low4);  // 8-15
    w.q[2] = _mm512_srli_epi16(v0, 4);    // 16-23
    w.q[3] = _mm512_srli_epi16(v1, 4);    // 24-31
    const __m512i dm = _mm512_permutexvar_epi16(_mm512_load_si512(kIdx.dm), z0);
    w.d = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
    w.m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1));
    return w;
  }
};
#endif

template <bool kVnni>
using Q4_1Entry = Q16AEntry<Q4_1Wide, kVnni>;
// Matmul on kGemmMinCols columns or more: legacy_gemm.h (rows in vector lanes;
// 2× the quad tiles' speed at 512 columns, docs/performance.md).
template <class Small, bool kVnni>
using Q4_1Gemm = KGemmEntry<Small, LGemm512<Q4_1Layout, simd::Q4_1Decode, kVnni>>;

}  // namespace kx::cpu::avx512
