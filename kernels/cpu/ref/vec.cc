// Scalar vector kernels: the oracle for the SIMD versions, and the fallback.
#include <cstddef>

#include "kernels/cpu/internal.h"

namespace kx::cpu::ref {
namespace {

float DotF16F32(const uint16_t* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += HalfToFloat(a[i]) * b[i];
  return acc;
}

void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * HalfToFloat(x[i]);
}

void F32ToF16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

float DotF32(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
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

// Q8_0 KV rows: each block's int products are summed in float, then scaled
// once by the block's d (the SIMD versions sum in another order).
void DotQ8_0Rows(const uint8_t* rows, size_t stride, int64_t n_rows, const float* x, int64_t n,
                 float* dst) {
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = rows + t * stride;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
      float s = 0.0f;
      for (int j = 0; j < kQK; ++j) s += static_cast<float>(qs[j]) * x[b * kQK + j];
      acc += HalfToFloat(LoadU16(blk)) * s;
    }
    dst[t] = acc;
  }
}

void AxpyQ8_0Rows(const float* coeff, const uint8_t* rows, size_t stride, int64_t n_rows, float* y,
                  int64_t n) {
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = rows + t * stride;
    for (int64_t b = 0; b < n / kQK; ++b) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
      const float s = coeff[t] * HalfToFloat(LoadU16(blk));
      for (int j = 0; j < kQK; ++j) y[b * kQK + j] += s * static_cast<float>(qs[j]);
    }
  }
}

}  // namespace

const VecKernels kVec = {&DotF16F32,  &AxpyF16,     &F32ToF16,    &DotF32,
                         &DotF16Rows, &AxpyF16Rows, &DotQ8_0Rows, &AxpyQ8_0Rows};

}  // namespace kx::cpu::ref
