#include "kernels/cpu/layer_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"

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

void AttendChunk(const KernelTable& k, bool kv_q8, const float* q, int g, const KvRun& run,
                 int chunk, int head_dim, float scale, float* scores, float* part) {
  KX_CHECK(head_dim <= kAttnMaxHeadDim);
  const int t0 = chunk * kAttnChunkKeys;
  const int n = std::min(kAttnChunkKeys, run.n_keys - t0);
  KX_CHECK(n > 0);
  const size_t stride = run.row_stride_bytes;
  // The chunk in at most two pieces of consecutive rows: before the ring's end, then from its
  // start. Scores are per key and the values are accumulated key after key, so the pieces
  // give the bits of one piece.
  struct Piece {
    const uint8_t* k;
    const uint8_t* v;
    int t, n;      // first key (relative to the chunk) and keys
    int64_t slot;  // k_blocked: the first key's slot in run.k_blocks
  } pieces[2];
  int n_pieces = 0;
  const int contig = std::clamp(run.n_contig - t0, 0, n);
  if (contig > 0) {
    pieces[n_pieces++] = {run.k0 + static_cast<size_t>(t0) * stride,
                          run.v0 + static_cast<size_t>(t0) * stride, 0, contig,
                          int64_t{run.k_slot0} + t0};
  }
  if (contig < n) {
    const size_t w = static_cast<size_t>(t0 + contig - run.n_contig);
    pieces[n_pieces++] = {run.k_wrap + w * stride, run.v_wrap + w * stride, contig, n - contig,
                          static_cast<int64_t>(w)};
  }
  KX_CHECK(run.k_blocks == nullptr || (!kv_q8 && head_dim % kAttnKeyBlock == 0));
  // F16 rows are addressed in elements by the kernels.
  const size_t stride_elems = stride / sizeof(uint16_t);
  const int64_t pf = head_dim + 2;
  for (int i = 0; i < n_pieces; ++i) {
    const Piece& pc = pieces[i];
    if (kv_q8) {
      for (int j = 0; j < g; ++j) {
        k.vec.dot_q8_0_rows(pc.k, stride, pc.n, q + j * head_dim, head_dim,
                            scores + j * kAttnChunkKeys + pc.t);
      }
    } else if (run.k_blocks != nullptr) {
      k.attn.dot_f16_blocked(reinterpret_cast<const uint16_t*>(run.k_blocks), pc.slot, pc.n, q, g,
                             head_dim, scores + pc.t, kAttnChunkKeys);
    } else {
      k.attn.dot_f16(reinterpret_cast<const uint16_t*>(pc.k), stride_elems, pc.n, q, g, head_dim,
                     scores + pc.t, kAttnChunkKeys);
    }
  }
  for (int j = 0; j < g; ++j) {
    float* p = part + j * pf;
    p[head_dim + 1] = k.attn.exp_shifted(scores + j * kAttnChunkKeys, n, scale, &p[head_dim]);
    std::memset(p, 0, sizeof(float) * head_dim);
  }
  for (int i = 0; i < n_pieces; ++i) {
    const Piece& pc = pieces[i];
    if (kv_q8) {
      for (int j = 0; j < g; ++j) {
        k.vec.axpy_q8_0_rows(scores + j * kAttnChunkKeys + pc.t, pc.v, stride, pc.n, part + j * pf,
                             head_dim);
      }
    } else {
      k.attn.axpy_f16(scores + pc.t, kAttnChunkKeys, reinterpret_cast<const uint16_t*>(pc.v),
                      stride_elems, pc.n, g, head_dim, part, pf);
    }
  }
}

void MergeChunks(const float* parts, int n_chunks, int g, int head_dim, float* out) {
  const int64_t pf = head_dim + 2, chunk_floats = int64_t{g} * pf;
  for (int j = 0; j < g; ++j) {
    float m = -INFINITY;
    for (int c = 0; c < n_chunks; ++c) m = std::max(m, parts[c * chunk_floats + j * pf + head_dim]);
    float sum = 0.0f;
    float w[64];                    // e^(max_c − m), chunks of at most 64 at a time
    float* o = out + j * head_dim;  // q may alias out: q is not read here
    for (int c0 = 0; c0 < n_chunks; c0 += 64) {
      const int nc = std::min(64, n_chunks - c0);
      for (int c = 0; c < nc; ++c) {
        const float* p = parts + (c0 + c) * chunk_floats + j * pf;
        w[c] = n_chunks == 1 ? 1.0f : std::exp(p[head_dim] - m);
        sum += w[c] * p[head_dim + 1];
      }
      for (int c = 0; c < nc; ++c) {
        const float* p = parts + (c0 + c) * chunk_floats + j * pf;
        if (c0 + c == 0) {
          for (int i = 0; i < head_dim; ++i) o[i] = w[c] * p[i];
        } else {
          for (int i = 0; i < head_dim; ++i) o[i] += w[c] * p[i];
        }
      }
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < head_dim; ++i) o[i] *= inv;
  }
}

void AttendGroup(const KernelTable& k, bool kv_q8, const float* q, int g, const KvRun& run,
                 int head_dim, float scale, float* scratch, float* out) {
  const int n_chunks = AttnChunks(run.n_keys);
  float* scores = scratch;
  float* parts = scratch + int64_t{g} * kAttnChunkKeys;
  for (int c = 0; c < n_chunks; ++c) {
    AttendChunk(k, kv_q8, q, g, run, c, head_dim, scale, scores,
                parts + c * AttnPartFloats(g, head_dim));
  }
  MergeChunks(parts, n_chunks, g, head_dim, out);
}

}  // namespace kx::cpu
