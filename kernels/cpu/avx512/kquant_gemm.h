// AVX-512 vector traits for the K-quant and legacy-quant matmuls
// (kernels/cpu/kquant_gemm.h, legacy_gemm.h): 16 rows per vector, panels of
// 32 rows, tiles of 32 rows × 4 columns — K-quants: 8 int32 sums, 8 per-block
// float parts and 8 accumulators, 24 of the 32 registers, the rest for the
// two weight vectors and the broadcast column (legacy types: no parts, the
// block's two weight-scale vectors instead).
#pragma once

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/kquant_gemm.h"
#include "kernels/cpu/legacy_gemm.h"

namespace kx::cpu::avx512 {

template <bool kVnni>
struct GemmVec {
  using I = __m512i;
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kRowVecs = 2;
  static constexpr int kCols = 4;

  static I Dot(I acc, I w, I x) {
    if constexpr (kVnni) {
      return _mm512_dpwssd_epi32(acc, w, x);
    } else {
      // The empty asm keeps each sum a running sum: GCC otherwise regroups the
      // 16 integer adds of a block and holds the products meanwhile, spilling
      // them (AVX2 gemm 39 → 49 GMAC/s, AVX-512 57 → 67, bench_matmul).
      I r = _mm512_add_epi32(acc, _mm512_madd_epi16(w, x));
      asm("" : "+v"(r));
      return r;
    }
  }
  static I Bcast32(const uint8_t* p) { return _mm512_set1_epi32(static_cast<int>(LoadU32(p))); }
  static F BcastF(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return _mm512_set1_ps(v);
  }
  static F Cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static I ZeroI() { return _mm512_setzero_si512(); }
  static F ZeroF() { return _mm512_setzero_ps(); }
  static F LoadF(const float* p) { return _mm512_load_ps(p); }
  static __mmask16 Mask(int valid) {
    return valid >= kLanes ? static_cast<__mmask16>(0xFFFF)
                           : static_cast<__mmask16>((1u << valid) - 1);
  }
  static F LoadY(const float* p, int valid) { return _mm512_maskz_loadu_ps(Mask(valid), p); }
  static void StoreY(float* p, F v, int valid) { _mm512_mask_storeu_ps(p, Mask(valid), v); }

  // One vpmovsxbw and one vpmullw by [sc_2J × 16 | sc_2J+1 × 16] (vpermw of the header's sc).
  template <int J>
  static void WidenScaled(__m256i q8, const KHeader& h, int16_t* dst) {
    const __m512i idx =
        _mm512_inserti64x4(_mm512_set1_epi16(2 * J), _mm256_set1_epi16(2 * J + 1), 1);
    const __m512i sc =
        _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(h.sc)));
    _mm512_store_si512(
        dst, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q8), _mm512_permutexvar_epi16(idx, sc)));
  }

  // Legacy blocks (legacy_gemm.h): 32 q as int16, one vpmovsxbw.
  static void Widen(__m256i q8, int16_t* dst) { _mm512_store_si512(dst, _mm512_cvtepi8_epi16(q8)); }

  // 16 rows of 16 dwords (int16 pairs) → 16 vectors of one pair of every row:
  // 32-bit and 64-bit interleaves within 128-bit lanes (u[4g + k], lane L:
  // rows 4g..4g+3 at pair 4L + k), then a 4×4 transpose of 128-bit lanes.
  static void TransposePairs(const int16_t* rows, I* dst, size_t dst_stride) {
    I r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(rows + 32 * i);
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; ++g) {
      u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
      u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
      u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
      u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int k = 0; k < 4; ++k) {
      const I p = _mm512_shuffle_i64x2(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0));
      const I q = _mm512_shuffle_i64x2(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1));
      const I r2 = _mm512_shuffle_i64x2(u[8 + k], u[12 + k], _MM_SHUFFLE(2, 0, 2, 0));
      const I s = _mm512_shuffle_i64x2(u[8 + k], u[12 + k], _MM_SHUFFLE(3, 1, 3, 1));
      dst[(0 + k) * dst_stride] = _mm512_shuffle_i64x2(p, r2, _MM_SHUFFLE(2, 0, 2, 0));
      dst[(4 + k) * dst_stride] = _mm512_shuffle_i64x2(q, s, _MM_SHUFFLE(2, 0, 2, 0));
      dst[(8 + k) * dst_stride] = _mm512_shuffle_i64x2(p, r2, _MM_SHUFFLE(3, 1, 3, 1));
      dst[(12 + k) * dst_stride] = _mm512_shuffle_i64x2(q, s, _MM_SHUFFLE(3, 1, 3, 1));
    }
  }
};

template <class L, class D, bool kVnni>
using KGemm512 = KGemm<GemmVec<kVnni>, L, D>;
template <class L, class D, bool kVnni>
using LGemm512 = LGemm<GemmVec<kVnni>, L, D>;

}  // namespace kx::cpu::avx512
