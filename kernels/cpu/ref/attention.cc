// Scalar attention kernels (kernels.h AttnKernels): the oracle for the SIMD versions and
// the fallback. Each query head's sums run in row order, as the single-head kernels do.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/internal.h"

namespace kx::cpu::ref {
namespace {

void DotF16(const uint16_t* rows, size_t stride, int64_t n_rows, const float* qs, int n_q,
            int64_t n, float* dst, int64_t dst_stride) {
  for (int j = 0; j < n_q; ++j) {
    const float* q = qs + j * n;
    for (int64_t t = 0; t < n_rows; ++t) {
      const uint16_t* k = rows + t * stride;
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i) acc += HalfToFloat(k[i]) * q[i];
      dst[j * dst_stride + t] = acc;
    }
  }
}

// DotF16's sums, key by key, from the blocked layout.
void DotF16Blocked(const uint16_t* blocks, int64_t key0, int64_t n_keys, const float* qs, int n_q,
                   int64_t n, float* dst, int64_t dst_stride) {
  for (int j = 0; j < n_q; ++j) {
    const float* q = qs + j * n;
    for (int64_t t = key0; t < key0 + n_keys; ++t) {
      const uint16_t* k = blocks + t / kAttnKeyBlock * kAttnKeyBlock * n + t % kAttnKeyBlock;
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i) acc += HalfToFloat(k[i * kAttnKeyBlock]) * q[i];
      dst[j * dst_stride + t - key0] = acc;
    }
  }
}

void AxpyF16(const float* p, int64_t p_stride, const uint16_t* rows, size_t stride, int64_t n_rows,
             int n_y, int64_t n, float* ys, int64_t y_stride) {
  for (int j = 0; j < n_y; ++j) {
    float* y = ys + j * y_stride;
    for (int64_t t = 0; t < n_rows; ++t) {
      const float c = p[j * p_stride + t];
      const uint16_t* v = rows + t * stride;
      for (int64_t i = 0; i < n; ++i) y[i] += c * HalfToFloat(v[i]);
    }
  }
}

float ExpShifted(float* x, int64_t n, float scale, float* max) {
  float m = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    x[t] *= scale;
    m = std::max(m, x[t]);
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < n; ++t) {
    x[t] = std::exp(x[t] - m);
    sum += x[t];
  }
  *max = m;
  return sum;
}

}  // namespace

const AttnKernels kAttn = {&DotF16, &AxpyF16, &DotF16Blocked, &ExpShifted};

}  // namespace kx::cpu::ref
