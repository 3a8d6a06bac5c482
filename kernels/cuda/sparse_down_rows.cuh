/* The sparse FFN's down projection over down_t rows on the GPU: the op "sparse_down_rows".
 * The CPU twin is AxpyRowsFn (kernels/cpu/kernels.h) as SparseFfn calls it for bundles of
 * layout DownLayout::kRows (lib/sparse/bundle.h). axpy_rows_f16 is the same idea over a plain
 * F16 matrix with an index list; this op reads the rows inside device-resident bundles.
 *
 * Listed group i < n_listed has its bundle in slot slots[i]; neuron j < GS of it has its
 * ffn_down_t row (n_embd elements of down_type) at
 *   arena + slots[i]·slot_stride + down_offset + j·down_row_bytes
 * (BundleLayout::down_offset(); down_row_bytes = n_embd / block_size · block_bytes). For
 * e < n_embd:
 *   y[e] += Σ_i Σ_{j<GS} coef[GS·i + j] · down_t_ij[e]
 * in float; rows whose coefficient is 0 (not kept, or not predicted) are not read. Types
 * (down_type, ggml ids): the down_t types bundle.h can write (QuantizeRow's) — F32 (0), F16
 * (1), Q4_0 (2), Q4_1 (3), Q5_0 (6), Q5_1 (7), Q8_0 (8), BF16 (30) —, decoded by
 * kernels/cuda/quant_decode.cuh; K-quants give KX_CUDA_ERROR_UNSUPPORTED.
 *
 * Reduction: deterministic (sparse_down_common.cuh): the n_listed·GS neuron slots in fixed
 * chunks of KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK, each chunk's partial y in the workspace,
 * summed in chunk order; y's bits do not vary between runs or GPUs. workspace: device memory
 * of at least kx_cuda_sparse_down_rows_workspace_bytes(n_embd, n_listed, GS) bytes (0 — and
 * NULL allowed — up to one chunk), 4-byte aligned; contents undefined after.
 *
 * Requirements: GS 4, 8, 16 or 32; n_embd positive whole blocks of down_type; arena 16-byte
 * aligned; slot_stride a multiple of 16; down_offset and the row bytes multiples of the
 * decoder's alignment (2; 4 for Q4_1; 8 for Q5_1; F16/BF16/F32 rows are read 16 bytes at a
 * time when both are multiples of 16, element by element otherwise). slots are not
 * range-checked on the device. All pointers are device memory; y must not overlap the other
 * buffers. n_listed = 0 is a no-op (y unchanged).
 *
 * Bytes moved (the GPU check's bandwidth yardstick): down_row_bytes per nonzero coefficient,
 * n_listed·GS·4 (coef), n_embd·8 (y), and with several chunks n_chunks·n_embd·8 more. */
#ifndef KAIROX_KERNELS_CUDA_SPARSE_DOWN_ROWS_CUH_
#define KAIROX_KERNELS_CUDA_SPARSE_DOWN_ROWS_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK 128

typedef struct kx_cuda_sparse_down_rows_args {
  uint32_t struct_size; /* sizeof(kx_cuda_sparse_down_rows_args) */
  const uint8_t* arena; /* bundle slots */
  uint64_t slot_stride; /* bytes between slots */
  uint64_t down_offset; /* bytes from a bundle's start to its first down_t row */
  const int32_t* slots; /* [n_listed] slot of each listed group */
  int64_t n_listed;     /* >= 0 */
  int32_t group_size;   /* GS */
  int32_t down_type;    /* ggml type id of the down_t rows */
  int64_t n_embd;       /* elements per row = outputs */
  const float* coef;    /* [n_listed·GS], coef[GS·i + j] scales neuron j of listed group i */
  float* y;             /* [n_embd] accumulated into */
  void* workspace;      /* see above; may be NULL when the size function says 0 */
  uint64_t workspace_bytes;
} kx_cuda_sparse_down_rows_args;

/* Bytes of workspace a call with these sizes needs (0 up to 128 neuron slots). */
static inline uint64_t kx_cuda_sparse_down_rows_workspace_bytes(int64_t n_embd, int64_t n_listed,
                                                                int32_t group_size) {
  const int64_t rows = n_listed * group_size;
  const int64_t chunks =
      (rows + KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK - 1) / KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK;
  return chunks > 1 && n_embd > 0 ? (uint64_t)chunks * (uint64_t)n_embd * 4u : 0u;
}

/* Checks the arguments, then enqueues the kernel(s) on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_sparse_down_rows(const kx_cuda_sparse_down_rows_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_SPARSE_DOWN_ROWS_CUH_ */
