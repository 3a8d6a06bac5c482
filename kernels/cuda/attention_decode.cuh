/* Attention of one query token over a layer's KV cache (decode, batch 1): the op
 * "attention_decode", the CPU engine's RunAttentionPart (lib/engine/forward.cc) for one token.
 *
 * With D = head_dim, G = n_head / n_kv_head (grouped-query attention: query head h reads KV
 * head h / G), the keys first = window > 0 ? max(0, pos − window + 1) : 0 through pos, and
 * K_t, V_t the head's row of position t in the caches (kv_cache.cuh; Q8_0 values d·q):
 *   s_t = scale · Σ_i q[h][i] · K_t[i]
 *   dst[h][i] = Σ_t softmax(s)_t · V_t[i]      (softmax over t in [first, pos], in float,
 *                                               after subtracting the largest s_t)
 * q and dst are F32 [n_head][D]; dst may equal q. Cache rows [first, pos] must hold the
 * token's keys and values (rope_store_kv.cuh writes them). The CPU computes the same sums
 * in another order: results agree to float rounding (the tests derive the bound), not bits.
 *
 * Long contexts are split across blocks (flash-decoding): each block keeps a running max,
 * sum and weighted V over its share of positions, and a second kernel combines the shares.
 * The partial results go to `workspace`, which bounds the split count:
 *   splits ≤ workspace_bytes / (n_head · (D + 2) · 4)   (and ≤ KX_CUDA_ATTENTION_MAX_SPLITS)
 * kx_cuda_attention_decode_workspace_bytes() gives the size that allows every split; NULL
 * (or a workspace too small for two splits) means one block per KV head, which is correct
 * for any length but slow for long ones. The workspace is scratch: nothing is kept in it
 * between calls, and calls on different streams need their own.
 *
 * Bytes moved: 2 · (pos − first + 1) · n_kv_head · (F16: 2·D, Q8_0: 34·D/32) for K and V,
 * plus q and dst (8·n_head·D): the KV rows dominate, each read once (a KV head's query heads
 * share the read). */
#ifndef KAIROX_KERNELS_CUDA_ATTENTION_DECODE_CUH_
#define KAIROX_KERNELS_CUDA_ATTENTION_DECODE_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/kv_cache.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* The most blocks one KV head's positions are split into. */
#define KX_CUDA_ATTENTION_MAX_SPLITS 64

typedef struct kx_cuda_attention_decode_args {
  uint32_t struct_size;   /* sizeof(kx_cuda_attention_decode_args) */
  const float* q;         /* [n_head][head_dim], RoPE already applied */
  const uint8_t* k_cache; /* the layer's K cache (kv_cache.cuh); F16: 16-byte aligned */
  const uint8_t* v_cache; /* the layer's V cache; F16: 16-byte aligned */
  float* dst;             /* [n_head][head_dim] */
  float* workspace;       /* scratch for split contexts, or NULL (see above) */
  uint64_t workspace_bytes;
  int32_t kv_type;   /* kx_cuda_kv_type */
  int64_t n_head;    /* > 0, a multiple of n_kv_head */
  int64_t n_kv_head; /* > 0 */
  int64_t head_dim;  /* a multiple of 8 in [8, 256]; Q8_0: a multiple of 32 */
  int64_t pos;       /* the query's position, >= 0 */
  int64_t window;    /* 0: all positions [0, pos]; else (pos − window, pos] */
  float scale;       /* multiplies q·k (the engine's hp.attn_scale) */
} kx_cuda_attention_decode_args;

/* Workspace bytes that allow the most splits for these shapes. */
static inline uint64_t kx_cuda_attention_decode_workspace_bytes(int64_t n_head, int64_t head_dim) {
  if (n_head <= 0 || head_dim <= 0) return 0;
  return (uint64_t)n_head * KX_CUDA_ATTENTION_MAX_SPLITS * (uint64_t)(head_dim + 2) * 4u;
}

/* Checks the arguments, then enqueues the kernel(s) on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_attention_decode(const kx_cuda_attention_decode_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_ATTENTION_DECODE_CUH_ */
