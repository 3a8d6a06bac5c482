/* Element-wise ops of a transformer layer, each registered under its own name: "add",
 * "scale", "swiglu", "geglu". One kernel template serves all four, hence one file.
 *
 * All arrays are F32 device memory of n elements; dst may equal any input (in place), other
 * overlaps are not allowed; n = 0 is a no-op. Each result is rounded as the CPU engine's
 * expression is (no FMA contraction), so the only differences from the CPU are the device's
 * expf (within 2 ulp, CUDA's documented bound).
 *   add     dst[i] = a[i] + b[i]                  the residual adds (forward.cc x += ffo),
 *                                                 and biases
 *   scale   dst[i] = src[i] · scale               Gemma's embedding scale √n_embd (EmbedStage)
 *   swiglu  dst[i] = gate[i] / (1 + expf(−gate[i])) · up[i]
 *                                                 SiLU(gate)·up (model/llama_ffn_activation.cc)
 *   geglu   dst[i] = g / (1 + expf(−2·√(2/π)·(g + 0.044715·g·g·g)))·up[i],  g = gate[i]
 *           (= 0.5·g·(1 + tanh(…)), as the CPU evaluates it)  GELU-tanh(gate)·up (Gemma)
 * Memory-bound: add and the gated ops move 12·n bytes, scale 8·n; 16-byte loads when every
 * pointer is 16-byte aligned. */
#ifndef KAIROX_KERNELS_CUDA_ELEMENTWISE_CUH_
#define KAIROX_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kx_cuda_add_args {
  uint32_t struct_size; /* sizeof(kx_cuda_add_args) */
  const float* a;
  const float* b;
  float* dst;
  int64_t n; /* >= 0 */
} kx_cuda_add_args;

typedef struct kx_cuda_scale_args {
  uint32_t struct_size; /* sizeof(kx_cuda_scale_args) */
  const float* src;
  float* dst;
  int64_t n; /* >= 0 */
  float scale;
} kx_cuda_scale_args;

/* The gated FFN activations' arguments (swiglu and geglu share the layout). */
typedef struct kx_cuda_glu_args {
  uint32_t struct_size; /* sizeof(kx_cuda_glu_args) */
  const float* gate;
  const float* up;
  float* dst;
  int64_t n; /* >= 0 */
} kx_cuda_glu_args;
typedef kx_cuda_glu_args kx_cuda_swiglu_args;
typedef kx_cuda_glu_args kx_cuda_geglu_args;

/* Each checks its arguments, then enqueues its kernel on `stream` (a cudaStream_t; NULL =
 * the default stream). */
kx_cuda_status kx_cuda_add(const kx_cuda_add_args* args, void* stream);
kx_cuda_status kx_cuda_scale(const kx_cuda_scale_args* args, void* stream);
kx_cuda_status kx_cuda_swiglu(const kx_cuda_swiglu_args* args, void* stream);
kx_cuda_status kx_cuda_geglu(const kx_cuda_geglu_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_ELEMENTWISE_CUH_ */
