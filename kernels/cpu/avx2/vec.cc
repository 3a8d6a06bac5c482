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

void AxpyF16Rows(const float* coeff, const uint16_t* rows, size_t stride, int64_t n_rows,
                 float* y, int64_t n) {
  for (int64_t t = 0; t < n_rows; ++t) AxpyF16(coeff[t], rows + t * stride, y, n);
}

}  // namespace

const VecKernels kVec = {&DotF16F32, &AxpyF16, &F32ToF16, &DotF32, &DotF16Rows, &AxpyF16Rows};

}  // namespace kx::cpu::avx2
