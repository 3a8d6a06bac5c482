/* The hybrid sparse FFN's merge on the GPU: the op "sparse_ffn_merge". The GPU computes the
 * FFN over the groups whose bundles it holds (sparse_up_gate, then sparse_down_blocks or
 * sparse_down_rows into device_partial), the CPU the rest (SparseFfn into host_partial); this
 * adds both to the residual stream:
 *   dst[i] = residual[i] + (device_partial[i] + host_partial[i])      for i < n
 * in float, in that order (the two FFN halves first: together they are the CPU's FFN output
 * y, which the CPU forward adds as x += y). A NULL residual, device_partial or host_partial
 * counts as zeros and is not read: residual = NULL gives the FFN output alone, for
 * architectures that norm it before the residual add (Gemma 3: then rms_norm with its
 * residual). The merge happens on the device, as KAIROX merges the CPU's output back into the
 * GPU (paper, Figure 7a); the opposite direction is a copy of device_partial to the host.
 *
 * host_partial may be device memory (copied up beforehand) or mapped pinned host memory
 * (cudaHostAlloc(..., cudaHostAllocMapped)): the kernel then reads it over PCIe once, with no
 * separate copy. dst may equal residual (in place); nothing else may overlap dst. n = 0 is a
 * no-op. Bitwise deterministic (one thread per element, no reduction).
 *
 * Bytes moved: n·4 per non-NULL input, n·4 for dst (16-byte loads when every pointer is
 * 16-byte aligned). */
#ifndef KAIROX_KERNELS_CUDA_SPARSE_FFN_MERGE_CUH_
#define KAIROX_KERNELS_CUDA_SPARSE_FFN_MERGE_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kx_cuda_sparse_ffn_merge_args {
  uint32_t struct_size;        /* sizeof(kx_cuda_sparse_ffn_merge_args) */
  int64_t n;                   /* elements, >= 0 */
  const float* residual;       /* [n] or NULL */
  const float* device_partial; /* [n] or NULL */
  const float* host_partial;   /* [n] or NULL (device or mapped pinned host memory) */
  float* dst;                  /* [n], may equal residual */
} kx_cuda_sparse_ffn_merge_args;

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). No workspace. */
kx_cuda_status kx_cuda_sparse_ffn_merge(const kx_cuda_sparse_ffn_merge_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_SPARSE_FFN_MERGE_CUH_ */
