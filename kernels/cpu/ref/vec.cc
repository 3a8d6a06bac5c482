// Scalar vector kernels: the oracle for the SIMD versions, and the fallback.
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

}  // namespace

const VecKernels kVec = {&DotF16F32, &AxpyF16, &F32ToF16, &DotF32};

}  // namespace kx::cpu::ref
