// AVX2+FMA+F16C vector kernels: 8 lanes per step, scalar tails.
#include "kernels/cpu/avx2/simd.h"

namespace kx::cpu::avx2 {
namespace {

constexpr int kLanes = 8;

__m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float DotF16F32(const uint16_t* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {  // two chains hide FMA latency
    acc0 = _mm256_fmadd_ps(LoadHalf8(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(LoadHalf8(a + i + kLanes), _mm256_loadu_ps(b + i + kLanes), acc1);
  }
  for (; i + kLanes <= n; i += kLanes) {
    acc0 = _mm256_fmadd_ps(LoadHalf8(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = HSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += HalfToFloat(a[i]) * b[i];
  return sum;
}

void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LoadHalf8(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * HalfToFloat(x[i]);
}

void F32ToF16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);  // bit-identical to vcvtps2ph
}

float DotF32(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + kLanes), _mm256_loadu_ps(b + i + kLanes), acc1);
  }
  for (; i + kLanes <= n; i += kLanes) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = HSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// The multi-row forms: one call per head instead of one per position, with
// the single-row kernels above inlined.
void DotF16Rows(const uint16_t* rows, size_t stride, int64_t n_rows, const float* x, int64_t n,
                float* dst) {
  for (int64_t t = 0; t < n_rows; ++t) dst[t] = DotF16F32(rows + t * stride, x, n);
}

void AxpyF16Rows(const float* coeff, const uint16_t* rows, size_t stride, int64_t n_rows, float* y,
                 int64_t n) {
  for (int64_t t = 0; t < n_rows; ++t) AxpyF16(coeff[t], rows + t * stride, y, n);
}

// Q8_0 KV rows: a block is 32 int8 = four 8-lane quarters widened to float;
// the block's products are scaled by its d into one accumulator per row.
// d through F16C inline (_cvtsh_ss): HalfToFloat is an out-of-line call.
__m256 Q8Quarter(const int8_t* qs) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs))));
}

void DotQ8_0Rows(const uint8_t* rows, size_t stride, int64_t n_rows, const float* x, int64_t n,
                 float* dst) {
  const int64_t nb = n / kQK;
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = rows + t * stride;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
      const float* xb = x + b * kQK;
      __m256 s0 = _mm256_mul_ps(Q8Quarter(qs), _mm256_loadu_ps(xb));
      __m256 s1 = _mm256_mul_ps(Q8Quarter(qs + kLanes), _mm256_loadu_ps(xb + kLanes));
      s0 = _mm256_fmadd_ps(Q8Quarter(qs + 2 * kLanes), _mm256_loadu_ps(xb + 2 * kLanes), s0);
      s1 = _mm256_fmadd_ps(Q8Quarter(qs + 3 * kLanes), _mm256_loadu_ps(xb + 3 * kLanes), s1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(LoadU16(blk))), _mm256_add_ps(s0, s1), acc);
    }
    dst[t] = HSum(acc);
  }
}

void AxpyQ8_0Rows(const float* coeff, const uint8_t* rows, size_t stride, int64_t n_rows, float* y,
                  int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = rows + t * stride;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
      const __m256 s = _mm256_set1_ps(coeff[t] * _cvtsh_ss(LoadU16(blk)));
      float* yb = y + b * kQK;
      for (int k = 0; k < kQK; k += kLanes) {
        _mm256_storeu_ps(yb + k, _mm256_fmadd_ps(s, Q8Quarter(qs + k), _mm256_loadu_ps(yb + k)));
      }
    }
  }
}

}  // namespace

const VecKernels kVec = {&DotF16F32,  &AxpyF16,     &F32ToF16,    &DotF32,
                         &DotF16Rows, &AxpyF16Rows, &DotQ8_0Rows, &AxpyQ8_0Rows};

}  // namespace kx::cpu::avx2
