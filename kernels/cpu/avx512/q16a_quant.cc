// AVX-512 QuantizeQ16A (internal.h): the activation quantizer of every
// quantized type's matvec, byte for byte the scalar one (ref/q16a.cc) —
// amax ignoring NaN, d = amax/32767, q = x/d by IEEE division clamped to
// ±32767 with NaN to -32767, rounded half to even, s = d·Σq — 16 lanes at a
// time. It runs serially before every matvec (decode quantizes ~3 300
// activations per layer of SmolLM2), where the scalar loop's divisions cost
// ~2 ns per element.
#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"

namespace kx::cpu::avx512 {

void QuantizeQ16AVec(const float* x, int64_t n, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  const __m512 qmax = _mm512_set1_ps(static_cast<float>(kQ16AMax));
  const __m512 qmin = _mm512_set1_ps(-static_cast<float>(kQ16AMax));
  const int64_t nb = n / kQ16ABlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQ16ABlock;
    const __m512 lo = _mm512_loadu_ps(xb), hi = _mm512_loadu_ps(xb + 16);
    // max(|x|, m) keeps m where x is NaN (max_ps returns its second operand
    // then), as the scalar std::max(amax, |x|) does.
    const __m512 m = _mm512_max_ps(_mm512_abs_ps(hi), _mm512_max_ps(_mm512_abs_ps(lo),
                                                                    _mm512_setzero_ps()));
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / static_cast<float>(kQ16AMax);
    BlockQ16A blk;
    blk.d = d;
    if (d == 0.0f) {
      std::memset(blk.qs, 0, sizeof blk.qs);
      blk.s = 0.0f;
    } else {
      const __m512 vd = _mm512_set1_ps(d);
      // max(v, qmin) gives qmin for a NaN v; the clamp before rounding gives
      // what the scalar clamp after rounding gives (|x/d| ≤ 32767·(1 + ε)).
      const __m512i qlo = _mm512_cvtps_epi32(
          _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(lo, vd), qmin), qmax));
      const __m512i qhi = _mm512_cvtps_epi32(
          _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(hi, vd), qmin), qmax));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs), _mm512_cvtepi32_epi16(qlo));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs + 16), _mm512_cvtepi32_epi16(qhi));
      const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));  // |Σq| < 2^24
      blk.s = d * static_cast<float>(sum);
    }
    std::memcpy(out + b * sizeof(BlockQ16A), &blk, sizeof blk);
  }
}

}  // namespace kx::cpu::avx512
