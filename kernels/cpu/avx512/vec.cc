// AVX-512 vector kernels: 16 lanes per step, masked tails.
#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"

namespace kx::cpu::avx512 {
namespace {

constexpr int kLanes = 16;

__mmask16 TailMask(int64_t left) {
  return left >= kLanes ? static_cast<__mmask16>(0xffff)
                        : static_cast<__mmask16>((1u << left) - 1);
}

float DotF16F32(const uint16_t* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {  // two chains hide FMA latency
    acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))),
                           _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i + kLanes))),
        _mm512_loadu_ps(b + i + kLanes), acc1);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a + i)),
                           _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i);
    const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, xv, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void F32ToF16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

float DotF32(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + kLanes), _mm512_loadu_ps(b + i + kLanes), acc1);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// The multi-row forms: one call per head instead of one per position, with
// the single-row kernels above inlined.
void DotF16Rows(const uint16_t* rows, size_t stride, int64_t n_rows, const float* x, int64_t n,
                float* dst) {
  for (int64_t t = 0; t < n_rows; ++t) dst[t] = DotF16F32(rows + t * stride, x, n);
}

void AxpyF16Rows(const float* coeff, const uint16_t* rows, size_t stride, int64_t n_rows,
                 float* y, int64_t n) {
  for (int64_t t = 0; t < n_rows; ++t) AxpyF16(coeff[t], rows + t * stride, y, n);
}

}  // namespace

const VecKernels kVec = {&DotF16F32, &AxpyF16, &F32ToF16, &DotF32, &DotF16Rows, &AxpyF16Rows};

}  // namespace kx::cpu::avx512
