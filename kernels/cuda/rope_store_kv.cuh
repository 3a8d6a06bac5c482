/* Q/K/V of n_tokens tokens after their projections, up to the KV cache: the op
 * "rope_store_kv". The CPU engine's QkvBiasStage, QkNormStage and RopeStage
 * (lib/engine/forward.cc) in one launch.
 *
 * For token t < n_tokens at position pos_t = pos + t, with D = head_dim (all F32 unless noted,
 * device memory; q is [n_tokens][n_head·D], k and v are [n_tokens][n_kv_head·D]):
 *   1. bias (each of q_bias, k_bias, v_bias may be NULL):  x[i] += bias[i]   (float add)
 *   2. QK-norm (q_norm / k_norm may be NULL; [D] weights): every Q (K) head is replaced by
 *      rms_norm of the head (rms_norm.cuh's exact arithmetic, eps = norm_eps).
 *   3. RoPE on every Q and K head, the first n_rot dimensions (pairs i < n_rot/2):
 *        inv_freq_i = (float)pow((double)freq_base, -2.0·i / n_rot)
 *        c_i = (float)cos((double)pos_t · inv_freq_i),  s_i = (float)sin(… the same θ)
 *        (x_a, x_b) ← (x_a·c_i − x_b·s_i, x_a·s_i + x_b·c_i), each product and the sum
 *        rounded on its own, with a = 2i, b = 2i + 1 (KX_CUDA_ROPE_ADJACENT: llama GGUFs) or
 *        a = i, b = i + n_rot/2 (KX_CUDA_ROPE_NEOX: Qwen2, Gemma).
 *      The angles are the CPU's RopeTables / RopeInvFreq (lib/engine/engine.cc), computed
 *      in double on the device: they match the CPU's floats except where the device's
 *      double cos/sin/pow (≤ 2 ulp of a double) round to the other neighbouring float.
 *   4. K and V (after steps 1-3) stored into the layer's caches at row pos_t, laid out as
 *      kv_cache.cuh says: F16 values are __float2half_rn(x), Q8_0 blocks are exactly what
 *      the CPU's cpu::QuantizeRow(Q8_0) writes for the same floats (d = half(max|x| / 127),
 *      q = clamp(rint(x / d), −127, 127), q = 0 when d = 0).
 * q and k are updated in place (as the CPU leaves them: attention reads the rotated q);
 * v is updated in place only by its bias. The caches are written only at rows
 * [pos, pos + n_tokens). q, k, v and the two caches must not overlap one another (the
 * read-only inputs may be shared). n_tokens = 0 is a no-op.
 * Bytes moved per token: q and k read and written, v read (and written with a bias), biases
 * and norm weights read, two cache rows written: about 4·D·(3·n_head + 7·n_kv_head) plus
 * 2·kv_row_bytes — ~12 KB for SmolLM2, so a decode token's launch costs more than its bytes
 * (one launch instead of four is the point). */
#ifndef KAIROX_KERNELS_CUDA_ROPE_STORE_KV_CUH_
#define KAIROX_KERNELS_CUDA_ROPE_STORE_KV_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/kv_cache.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* How RoPE pairs a head's dimensions (the engine's RopeStyle). */
typedef enum kx_cuda_rope_style {
  KX_CUDA_ROPE_ADJACENT = 0, /* (x0, x1), (x2, x3), ... */
  KX_CUDA_ROPE_NEOX = 1      /* (x0, x_{n_rot/2}), (x1, x_{n_rot/2 + 1}), ... */
} kx_cuda_rope_style;

typedef struct kx_cuda_rope_store_kv_args {
  uint32_t struct_size; /* sizeof(kx_cuda_rope_store_kv_args) */
  float* q;             /* [n_tokens][n_head · head_dim], in place */
  float* k;             /* [n_tokens][n_kv_head · head_dim], in place */
  float* v;             /* [n_tokens][n_kv_head · head_dim], in place (bias only) */
  const float* q_bias;  /* [n_head · head_dim] or NULL */
  const float* k_bias;  /* [n_kv_head · head_dim] or NULL */
  const float* v_bias;  /* [n_kv_head · head_dim] or NULL */
  const float* q_norm;  /* [head_dim] or NULL: Gemma 3's per-head RMSNorm of Q */
  const float* k_norm;  /* [head_dim] or NULL: the same for K */
  uint8_t* k_cache;     /* the layer's K cache (kv_cache.cuh), rows [0, pos + n_tokens) */
  uint8_t* v_cache;     /* the layer's V cache */
  int32_t kv_type;      /* kx_cuda_kv_type */
  int32_t rope_style;   /* kx_cuda_rope_style */
  int64_t n_tokens;     /* >= 0 */
  int64_t pos;          /* position of token 0, >= 0 */
  int64_t n_head;       /* > 0 */
  int64_t n_kv_head;    /* > 0 */
  int64_t head_dim;     /* even, <= 1024; Q8_0: a multiple of 32 */
  int64_t n_rot;        /* even, 2 <= n_rot <= head_dim (the engine's hp.n_rot) */
  float freq_base;      /* > 0: the layer's RoPE base (Gemma 3: 10 000 local, 10⁶ global) */
  float norm_eps;       /* >= 0; used only with q_norm / k_norm */
} kx_cuda_rope_store_kv_args;

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_rope_store_kv(const kx_cuda_rope_store_kv_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_ROPE_STORE_KV_CUH_ */
