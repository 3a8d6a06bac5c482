#include "kernels/cpu/layer_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kx::cpu {

void RmsNorm(const float* src, const float* weight, float* dst, int64_t n, float eps) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(src[i]) * src[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * scale * weight[i];
}

std::vector<float> RopeInvFreq(float base, int n_rot) {
  std::vector<float> inv_freq(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(static_cast<double>(base), -2.0 * i / n_rot));
  }
  return inv_freq;
}

void RopeTables(const float* inv_freq, int n_inv_freq, int64_t pos0, int n, float* cos_dst,
                float* sin_dst) {
  for (int b = 0; b < n; ++b) {
    const double pos = static_cast<double>(pos0 + b);
    for (int i = 0; i < n_inv_freq; ++i) {
      const double theta = pos * inv_freq[i];
      cos_dst[b * n_inv_freq + i] = static_cast<float>(std::cos(theta));
      sin_dst[b * n_inv_freq + i] = static_cast<float>(std::sin(theta));
    }
  }
}

void RopeHead(float* h, const float* cos_t, const float* sin_t, int n_rot, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = h[a], x1 = h[b];
    h[a] = x0 * cos_t[i] - x1 * sin_t[i];
    h[b] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

void AttendHead(const VecKernels& vec, bool kv_q8, const float* q, const uint8_t* k0,
                const uint8_t* v0, size_t row_stride_bytes, int n_keys, int head_dim, float scale,
                float* scores, float* out) {
  // F16 rows are addressed in elements by the vector kernels.
  const size_t stride_elems = row_stride_bytes / sizeof(uint16_t);
  if (kv_q8) {
    vec.dot_q8_0_rows(k0, row_stride_bytes, n_keys, q, head_dim, scores);
  } else {
    vec.dot_f16_rows(reinterpret_cast<const uint16_t*>(k0), stride_elems, n_keys, q, head_dim,
                     scores);
  }
  float max_s = -INFINITY;
  for (int t = 0; t < n_keys; ++t) {
    scores[t] *= scale;
    max_s = std::max(max_s, scores[t]);
  }
  float sum = 0.0f;
  for (int t = 0; t < n_keys; ++t) {
    scores[t] = std::exp(scores[t] - max_s);
    sum += scores[t];
  }
  const float inv = 1.0f / sum;
  for (int t = 0; t < n_keys; ++t) scores[t] *= inv;
  std::memset(out, 0, sizeof(float) * head_dim);
  if (kv_q8) {
    vec.axpy_q8_0_rows(scores, v0, row_stride_bytes, n_keys, out, head_dim);
  } else {
    vec.axpy_f16_rows(scores, reinterpret_cast<const uint16_t*>(v0), stride_elems, n_keys, out,
                      head_dim);
  }
}

}  // namespace kx::cpu
