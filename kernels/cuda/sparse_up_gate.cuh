/* The sparse FFN's gate/up step on the GPU over device-resident neuron bundles: the op
 * "sparse_up_gate". The CPU twin is lib/sparse/sparse_ffn.h (SparseFfn's GateUp + Keep).
 *
 * The device holds bundles (lib/sparse/bundle.h), copied byte for byte as the sidecar stores
 * them, in slots of an arena: the bundle in slot s starts at arena + s·slot_stride, and
 *   up rows   j < GS at  bundle + j·up_row_bytes
 *   gate rows j < GS at  bundle + GS·up_row_bytes + j·gate_row_bytes
 * with row_bytes = n_embd / block_size · block_bytes of the row's ggml type (BundleLayout's
 * up_row_bytes, gate_row_bytes and gate_offset()). For each listed group i < n_listed (its
 * bundle in slot slots[i]) and neuron j < GS:
 *   u = up_j·x,  g = gate_j·x                          (float sums over float x)
 *   A = act(g, u)        silu g/(1+e^-g); gelu_tanh g/(1+e^(-2y)), y = √(2/π)(g+0.044715g³)
 *                        (= 0.5·g·(1+tanh y));
 *                        relu max(g,0); fatrelu g·[g > act_threshold]; drelu max(g,0)·[u > 0]
 *                        (model/llama_ffn_activation.h ActivatedValue)
 *   keep = predicted(i, j) and |A| > threshold           (CATS cut; predicted: bit j of
 *                                                         masks[i], every neuron if masks is NULL)
 *   coef[i·GS + j] = keep ? A·u : 0
 *   bit j of kept[i] = keep; bits >= GS are 0             (kept may be NULL)
 * Rows of unpredicted neurons are not read. coef is what sparse_down_blocks / sparse_down_rows
 * multiply with; unlike the CPU it is not quantized to 16 bits (the GPU computes with floats).
 *
 * Types (up_type, gate_type: ggml ids, tensor/dtype.h): those kernels/cuda/quant_decode.cuh
 * decodes — F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; others give
 * KX_CUDA_ERROR_UNSUPPORTED. n_embd must be whole blocks of both types. arena and x 16-byte
 * aligned, slot_stride a multiple of 16 (bundle strides are multiples of 64); rows must sit at
 * their decoder's alignment (always true for bundle.h's layouts). All pointers are device
 * memory; slots are not range-checked on the device. n_listed = 0 is a no-op (nothing
 * written). Deterministic: the same inputs give the same bits on every run.
 *
 * Bytes moved (the GPU check's bandwidth yardstick): Σ over listed groups of
 * popcount(predicted) · (up_row_bytes + gate_row_bytes), plus n_listed·GS·4 (coef) and
 * n_embd·4 (x, read once per row from L1/L2 after the first). */
#ifndef KAIROX_KERNELS_CUDA_SPARSE_UP_GATE_CUH_
#define KAIROX_KERNELS_CUDA_SPARSE_UP_GATE_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The activation, numbered as kx::FfnActivation (model/llama.h). */
enum {
  KX_CUDA_FFN_ACT_SILU = 0,
  KX_CUDA_FFN_ACT_GELU_TANH = 1,
  KX_CUDA_FFN_ACT_RELU = 2,
  KX_CUDA_FFN_ACT_FATRELU = 3,
  KX_CUDA_FFN_ACT_DRELU = 4
};

typedef struct kx_cuda_sparse_up_gate_args {
  uint32_t struct_size;  /* sizeof(kx_cuda_sparse_up_gate_args) */
  const uint8_t* arena;  /* bundle slots */
  uint64_t slot_stride;  /* bytes between slots, >= the bundle's bytes */
  const int32_t* slots;  /* [n_listed] slot of each listed group */
  const uint32_t* masks; /* [n_listed] predicted neurons (bit j = neuron j), or NULL: all */
  int64_t n_listed;      /* >= 0 */
  int64_t n_embd;        /* > 0 */
  int32_t group_size;    /* GS: 4, 8, 16 or 32 */
  int32_t up_type;       /* ggml type id */
  int32_t gate_type;     /* ggml type id */
  int32_t activation;    /* KX_CUDA_FFN_ACT_* */
  float threshold;       /* the CATS cut: |A| <= threshold is dropped (0: exact zeros only) */
  float act_threshold;   /* FATReLU's t; ignored by the other activations */
  const float* x;        /* [n_embd] the FFN input (normed) */
  float* coef;           /* [n_listed·GS] written */
  uint32_t* kept;        /* [n_listed] written, or NULL */
} kx_cuda_sparse_up_gate_args;

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). No workspace. */
kx_cuda_status kx_cuda_sparse_up_gate(const kx_cuda_sparse_up_gate_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_SPARSE_UP_GATE_CUH_ */
