/* Weights from their GGUF blocks to plain floats on the device, once at upload, for the
 * prefill path that multiplies with cuBLAS: the op "dequantize".
 *
 *   dst[r·dst_row_stride + i] = convert(W[r][i])   for r < rows, i < n
 *
 * W: as in matvec.cuh (the same types, block sizes, alignments; row r at src + r·src_row_bytes).
 * W[r][i] is the float the CPU's dequantize (kx::cpu TypeKernels::dequantize, which matches
 * gguf-py's dequantization) gives, bit for bit; convert is the identity for dst_type F32 (0)
 * and round-to-nearest-even to IEEE half for F16 (1). Other dst types:
 * KX_CUDA_ERROR_UNSUPPORTED.
 * dst: rows × dst_row_stride elements of dst_type, 16-byte aligned, with dst_row_stride >= n
 *      and dst_row_stride·(element bytes) a multiple of 16; elements past n in a row are not
 *      written. Must not overlap src.
 * All pointers are device pointers; no workspace. rows = 0 or n = 0 is a no-op.
 *
 * Traffic: rows · row bytes of W read, rows · n · (2 or 4) bytes written. */
#ifndef KAIROX_KERNELS_CUDA_DEQUANTIZE_CUH_
#define KAIROX_KERNELS_CUDA_DEQUANTIZE_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kx_cuda_dequantize_args {
  uint32_t struct_size; /* sizeof(kx_cuda_dequantize_args) */
  uint32_t type;        /* ggml type id of W */
  const void* src;
  int64_t src_row_bytes; /* bytes from one row of W to the next */
  int64_t n;             /* elements per row */
  int64_t rows;
  uint32_t dst_type; /* ggml type id of dst: F32 (0) or F16 (1) */
  void* dst;
  int64_t dst_row_stride; /* elements from one row of dst to the next */
} kx_cuda_dequantize_args;

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_dequantize(const kx_cuda_dequantize_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_DEQUANTIZE_CUH_ */
