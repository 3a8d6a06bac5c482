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

// Q8_0 KV rows: a block is 32 int8 = two 16-lane halves widened to float;
// the block's products are scaled by its d into one accumulator per row.
// d through F16C inline (_cvtsh_ss): HalfToFloat is an out-of-line call.
__m512 Q8Half(const int8_t* qs) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))));
}

void DotQ8_0Rows(const uint8_t* rows, size_t stride, int64_t n_rows, const float* x, int64_t n,
                 float* dst) {
  const int64_t nb = n / kQK;
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = rows + t * stride;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
      const __m512 s = _mm512_fmadd_ps(
          Q8Half(qs), _mm512_loadu_ps(x + b * kQK),
          _mm512_mul_ps(Q8Half(qs + kLanes), _mm512_loadu_ps(x + b * kQK + kLanes)));
      acc = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(LoadU16(blk))), s, acc);
    }
    dst[t] = _mm512_reduce_add_ps(acc);
  }
}

void AxpyQ8_0Rows(const float* coeff, const uint8_t* rows, size_t stride, int64_t n_rows, float* y,
                  int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t b = 0; b < nb; ++b) {  // y's block stays in registers across the rows
    __m512 y0 = _mm512_loadu_ps(y + b * kQK), y1 = _mm512_loadu_ps(y + b * kQK + kLanes);
    for (int64_t t = 0; t < n_rows; ++t) {
      const uint8_t* blk = rows + t * stride + b * sizeof(BlockQ8_0);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
      const __m512 s = _mm512_set1_ps(coeff[t] * _cvtsh_ss(LoadU16(blk)));
      y0 = _mm512_fmadd_ps(s, Q8Half(qs), y0);
      y1 = _mm512_fmadd_ps(s, Q8Half(qs + kLanes), y1);
    }
    _mm512_storeu_ps(y + b * kQK, y0);
    _mm512_storeu_ps(y + b * kQK + kLanes, y1);
  }
}

}  // namespace

const VecKernels kVec = {&DotF16F32,  &AxpyF16,     &F32ToF16,    &DotF32,
                         &DotF16Rows, &AxpyF16Rows, &DotQ8_0Rows, &AxpyQ8_0Rows};

}  // namespace kx::cpu::avx512
