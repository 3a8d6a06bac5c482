// The non-matmul pieces of a transformer layer on the CPU — RMSNorm, RoPE, one head's
// decode attention — written once, for the engine's forward pass (lib/engine/forward.cc)
// and the sim device's ops (lib/device/sim_ops), so a layer computed on the simulated device
// gives the CPU path's result bit for bit. The CUDA versions are kernels/cuda/*.cu.
//
// Usage (one token, one head):
//   kx::cpu::RmsNorm(x, norm_w, xn, n_embd, eps);
//   kx::cpu::RopeHead(q_head, cos_t, sin_t, n_rot, /*neox=*/false);
//   kx::cpu::AttendHead(kernels.vec, /*kv_q8=*/false, q_head, k0, v0, kv_row_bytes,
//                       n_keys, head_dim, scale, scores, out);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace kx::cpu {

// dst[i] = src[i] · (mean(src²) + eps)^-½ · weight[i]; the sum of squares in double.
// dst may equal src.
void RmsNorm(const float* src, const float* weight, float* dst, int64_t n, float eps);

// RoPE's inverse frequencies base^(−2i/n_rot), i < n_rot/2, rounded to float from double.
std::vector<float> RopeInvFreq(float base, int n_rot);

// cos/sin of position·inv_freq[i] in double, rounded to float, for positions pos0 .. pos0+n−1:
// cos_dst[b·half + i] (half = n_inv_freq).
void RopeTables(const float* inv_freq, int n_inv_freq, int64_t pos0, int n, float* cos_dst,
                float* sin_dst);

// Rotates the first n_rot dimensions of one head in place: adjacent pairs (2i, 2i+1) as
// llama GGUFs store Q/K, or NeoX halves (i, i + n_rot/2) as Qwen2 and Gemma do.
void RopeHead(float* h, const float* cos_t, const float* sin_t, int n_rot, bool neox);

// One query head against n_keys consecutive cached positions of its KV head:
// scores = scale·(q·k_t), softmax (max subtracted, float), out = Σ_t p_t·v_t.
// k0/v0: the first key's and value's head row; consecutive positions are row_stride_bytes
// apart. F16 rows (kv_q8 false; row_stride_bytes even) or Q8_0 blocks (kv_q8 true; head_dim a
// multiple of 32). scores: n_keys floats of scratch; out: head_dim floats (overwritten).
void AttendHead(const VecKernels& vec, bool kv_q8, const float* q, const uint8_t* k0,
                const uint8_t* v0, size_t row_stride_bytes, int n_keys, int head_dim, float scale,
                float* scores, float* out);

}  // namespace kx::cpu
