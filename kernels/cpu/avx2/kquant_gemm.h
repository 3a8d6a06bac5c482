// AVX2 vector traits for the K-quant and legacy-quant matmuls
// (kernels/cpu/kquant_gemm.h, legacy_gemm.h): 8 rows per vector (vpmaddwd +
// vpaddd), tiles of 8 rows × 4 columns — K-quants: 4 int32 sums, 4 per-block
// float parts and 4 accumulators, 12 of the 16 registers (legacy types: no
// parts, their weight scales instead).
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2/kquant_panel.h"
#include "kernels/cpu/kquant_gemm.h"
#include "kernels/cpu/legacy_gemm.h"

namespace kx::cpu::avx2 {

struct GemmVec {
  using I = __m256i;
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kRowVecs = 1;
  static constexpr int kCols = 4;
  // Whole panels of the layouts it specializes decode without the generic transpose.
  template <class L>
  using Panel = PanelDecode<L>;

  // The empty asm keeps each sum a running sum (avx512/kquant_gemm.h says why).
  static I Dot(I acc, I w, I x) {
    I r = _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
    asm("" : "+x"(r));
    return r;
  }
  static I Bcast32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
  }
  static F BcastF(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_ps(v);
  }
  static F Cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static I ZeroI() { return _mm256_setzero_si256(); }
  static F ZeroF() { return _mm256_setzero_ps(); }
  static F LoadF(const float* p) { return _mm256_load_ps(p); }
  // Lanes < valid all ones.
  static I Mask(int valid) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F LoadY(const float* p, int valid) {
    return valid >= kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Mask(valid));
  }
  static void StoreY(float* p, F v, int valid) {
    if (valid >= kLanes) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm256_maskstore_ps(p, Mask(valid), v);
    }
  }

  template <int J>
  static void WidenScaled(__m256i q8, const KHeader& h, int16_t* dst) {
    const __m256i lo = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q8)),
                                          _mm256_set1_epi16(h.sc[2 * J]));
    const __m256i hi = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q8, 1)),
                                          _mm256_set1_epi16(h.sc[2 * J + 1]));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 16), hi);
  }

  // Legacy blocks (legacy_gemm.h): 32 q as int16, two vpmovsxbw.
  static void Widen(__m256i q8, int16_t* dst) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst),
                       _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q8)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 16),
                       _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q8, 1)));
  }

  // 8 rows of 16 dwords (int16 pairs) → 16 vectors: pairs 0-7, then 8-15.
  static void TransposePairs(const int16_t* rows, I* dst, size_t dst_stride) {
    for (int half = 0; half < 2; ++half) {
      I r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(rows + 32 * i + 16 * half));
      }
      Transpose8x32(r, dst + 8 * half * dst_stride, dst_stride);
    }
  }
};

template <class L, class D>
using KGemm256 = KGemm<GemmVec, L, D>;
template <class L, class D>
using LGemm256 = LGemm<GemmVec, L, D>;

}  // namespace kx::cpu::avx2
