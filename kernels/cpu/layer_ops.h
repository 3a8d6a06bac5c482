// The non-matmul pieces of a transformer layer on the CPU — RMSNorm, RoPE, one KV head's
// decode attention — written once, for the engine's forward pass (lib/engine/forward.cc)
// and the sim device's ops (lib/device/sim_ops), so a layer computed on the simulated device
// gives the CPU path's result bit for bit. The CUDA versions are kernels/cuda/*.cu.
//
// Usage (one token; one KV head and its g query heads):
//   kx::cpu::RmsNorm(x, norm_w, xn, n_embd, eps);
//   kx::cpu::RopeHead(q_head, cos_t, sin_t, n_rot, /*neox=*/false);
//   kx::cpu::AttendGroup(kernels, /*kv_q8=*/false, q_group, g, k0, v0, kv_row_bytes,
//                        n_keys, head_dim, scale, scratch, out);
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

// Decode attention, one KV head at a time: the g query heads that share it (GQA) against
// n_keys consecutive cached positions, scores = scale·(q·k_t), softmax, out = Σ_t p_t·v_t.
// The keys are taken in chunks of kAttnChunkKeys, each chunk's softmax partial kept as
// [acc (head_dim) | max | sum] per head (acc = Σ_t e^(s_t − max)·v_t), and the chunks merged
// in order. The chunking depends on n_keys only, so the result does not depend on how many
// threads share the chunks (the engine runs one chunk per task in decode) nor on whether the
// sim device or the CPU computes it.
//
// k0/v0: the first key's and value's head row; consecutive positions are row_stride_bytes
// apart. F16 rows (kv_q8 false; row_stride_bytes even) or Q8_0 blocks (kv_q8 true; head_dim a
// multiple of 32). q: g heads of head_dim floats, consecutive; head_dim ≤ kAttnMaxHeadDim.
inline constexpr int kAttnChunkKeys = 256;
inline int AttnChunks(int n_keys) { return (n_keys + kAttnChunkKeys - 1) / kAttnChunkKeys; }
// Floats of one chunk's partial for g heads.
inline int64_t AttnPartFloats(int g, int head_dim) { return int64_t{g} * (head_dim + 2); }
// Scratch floats AttendGroup needs for up to max_keys keys.
inline int64_t AttnScratchFloats(int max_keys, int g, int head_dim) {
  return int64_t{g} * kAttnChunkKeys + AttnChunks(max_keys) * AttnPartFloats(g, head_dim);
}

// The n_keys cached positions one KV head attends over, in position order: key t's rows at
// k0/v0 + t·row_stride_bytes for t < n_contig, then (a ring that wraps: the engine's
// sliding-window layers) at k_wrap/v_wrap + (t − n_contig)·row_stride_bytes. Every kernel
// takes the keys in the same order either way, so a wrapped run gives the bits of an
// unwrapped one.
//
// K in blocks instead (k_blocks set; F16, head_dim a multiple of kAttnKeyBlock): the head's
// keys in kernels.h dot_f16_blocked's layout from slot 0 at k_blocks, key t in slot
// k_slot0 + t for t < n_contig, then in slot t − n_contig; k0 and k_wrap are then unused.
// The scores are the same bits (dot_f16_blocked); StoreKeyBlocked writes a key there.
struct KvRun {
  const uint8_t* k0 = nullptr;
  const uint8_t* v0 = nullptr;
  size_t row_stride_bytes = 0;
  int n_keys = 0;
  int n_contig = 0;  // ≥ n_keys: no wrap
  const uint8_t* k_wrap = nullptr;
  const uint8_t* v_wrap = nullptr;
  const uint8_t* k_blocks = nullptr;
  int k_slot0 = 0;
};

// Writes one key of head_dim F16 values (a row) into slot `slot` of a blocked K run
// (KvRun::k_blocks): element i at blocks[(slot / B)·B·head_dim + i·B + slot % B], B =
// kAttnKeyBlock.
inline void StoreKeyBlocked(const uint16_t* key, int64_t head_dim, uint16_t* blocks, int64_t slot) {
  uint16_t* dst = blocks + slot / kAttnKeyBlock * kAttnKeyBlock * head_dim + slot % kAttnKeyBlock;
  for (int64_t i = 0; i < head_dim; ++i) dst[i * kAttnKeyBlock] = key[i];
}

// Chunk c of the run (keys [c·kAttnChunkKeys, ...)): its partial into part
// (AttnPartFloats). scores: g·kAttnChunkKeys floats of scratch.
void AttendChunk(const KernelTable& k, bool kv_q8, const float* q, int g, const KvRun& run,
                 int chunk, int head_dim, float scale, float* scores, float* part);
inline void AttendChunk(const KernelTable& k, bool kv_q8, const float* q, int g, const uint8_t* k0,
                        const uint8_t* v0, size_t row_stride_bytes, int n_keys, int chunk,
                        int head_dim, float scale, float* scores, float* part) {
  AttendChunk(k, kv_q8, q, g, KvRun{k0, v0, row_stride_bytes, n_keys, n_keys}, chunk, head_dim,
              scale, scores, part);
}

// out (g·head_dim floats) from the n_chunks partials, parts consecutive; out may alias q.
void MergeChunks(const float* parts, int n_chunks, int g, int head_dim, float* out);

// Every chunk, then the merge: scratch of AttnScratchFloats(n_keys, g, head_dim) floats.
void AttendGroup(const KernelTable& k, bool kv_q8, const float* q, int g, const KvRun& run,
                 int head_dim, float scale, float* scratch, float* out);
inline void AttendGroup(const KernelTable& k, bool kv_q8, const float* q, int g, const uint8_t* k0,
                        const uint8_t* v0, size_t row_stride_bytes, int n_keys, int head_dim,
                        float scale, float* scratch, float* out) {
  AttendGroup(k, kv_q8, q, g, KvRun{k0, v0, row_stride_bytes, n_keys, n_keys}, head_dim, scale,
              scratch, out);
}

}  // namespace kx::cpu
