/* The sparse FFN's down projection over down blocks on the GPU: the op "sparse_down_blocks".
 * The CPU twin is DownBlocksFn (kernels/cpu/kernels.h) as SparseFfn calls it for bundles of
 * layout DownLayout::kBlocks (lib/sparse/bundle.h).
 *
 * Each listed group i < n_listed is one Q4_1 block of ffn_down's columns (GS = 32 neurons),
 * its share of ffn_down stored at
 *   part_i = arena + slots[i]·slot_stride + down_offset          (BundleLayout::down_offset())
 * in the down-blocks layout (kernels/cpu/down_blocks.h: tiles of 16 output rows, 320 bytes
 * each: 16 half d, 16 half m, then 8 chunks of 16 rows × 2 quant bytes). With
 * W_i[e][j] = d_e·q_ej + m_e (element j of output row e's block), for e < n_embd:
 *   y[e] += Σ_i Σ_{j<32} coef[32·i + j] · W_i[e][j]
 * computed in float as, per group and row, d·(Σ_j c_j·q_j) + m·(Σ_j c_j) with the float
 * coefficients as given (the CPU kernel quantizes them to 16 bits first; this op does not).
 * A group whose 32 coefficients are all zero is not read (the threshold cut them all).
 *
 * Reduction: deterministic (sparse_down_common.cuh): groups in fixed chunks of
 * KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK, each chunk's partial y in the workspace, summed
 * in chunk order; y's bits do not vary between runs or GPUs. workspace: device memory of at
 * least kx_cuda_sparse_down_blocks_workspace_bytes(n_embd, n_listed) bytes (0 — and NULL
 * allowed — up to one chunk), 4-byte aligned, not read before written, contents undefined after.
 *
 * Requirements: n_embd a positive multiple of 16; arena and coef 16-byte aligned; slot_stride
 * a multiple of 16; down_offset even. slots are not range-checked on the device. All pointers
 * are device memory; y must not overlap the other buffers. n_listed = 0 is a no-op (y
 * unchanged).
 *
 * Bytes moved (the GPU check's bandwidth yardstick): n_embd·20 per listed group with a
 * nonzero coefficient, n_listed·128 (coef), n_embd·8 (y), and with several chunks
 * n_chunks·n_embd·8 more (partials written and read back). */
#ifndef KAIROX_KERNELS_CUDA_SPARSE_DOWN_BLOCKS_CUH_
#define KAIROX_KERNELS_CUDA_SPARSE_DOWN_BLOCKS_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KX_CUDA_SPARSE_DOWN_BLOCKS_GROUP_SIZE 32
#define KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK 8

typedef struct kx_cuda_sparse_down_blocks_args {
  uint32_t struct_size; /* sizeof(kx_cuda_sparse_down_blocks_args) */
  const uint8_t* arena; /* bundle slots */
  uint64_t slot_stride; /* bytes between slots */
  uint64_t down_offset; /* bytes from a bundle's start to its down part */
  const int32_t* slots; /* [n_listed] slot of each listed group */
  int64_t n_listed;     /* >= 0 */
  int64_t n_embd;       /* output rows, a multiple of 16 */
  const float* coef;    /* [n_listed·32], coef[32·i + j] scales neuron j of listed group i */
  float* y;             /* [n_embd] accumulated into */
  void* workspace;      /* see above; may be NULL when the size function says 0 */
  uint64_t workspace_bytes;
} kx_cuda_sparse_down_blocks_args;

/* Bytes of workspace a call with these sizes needs (0 for n_listed <= 8). */
static inline uint64_t kx_cuda_sparse_down_blocks_workspace_bytes(int64_t n_embd,
                                                                  int64_t n_listed) {
  const int64_t chunks = (n_listed + KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK - 1) /
                         KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK;
  return chunks > 1 && n_embd > 0 ? (uint64_t)chunks * (uint64_t)n_embd * 4u : 0u;
}

/* Checks the arguments, then enqueues the kernel(s) on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_sparse_down_blocks(const kx_cuda_sparse_down_blocks_args* args,
                                          void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_SPARSE_DOWN_BLOCKS_CUH_ */
