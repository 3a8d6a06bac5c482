/* Decode's matrix-vector product over weights in their GGUF blocks: the op "matvec".
 *
 *   y[r] = Σ_{i<n} W[r][i]·x[i]          for r < rows   (accumulate = 0)
 *   y[r] = y[r] + Σ_{i<n} W[r][i]·x[i]   for r < rows   (accumulate ≠ 0: residual adds)
 *
 * W: `rows` rows of n elements of ggml type `type`, row r starting at w + r·row_bytes, each row
 *    the type's blocks exactly as a GGUF file stores them (row_bytes >= the row's bytes; any
 *    bytes between rows must be readable). W[r][i] is the element as ggml dequantizes it.
 *    Types: F32 0, F16 1, BF16 30, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13,
 *    Q6_K 14 (ggml ids); any other is KX_CUDA_ERROR_UNSUPPORTED, naming it.
 *    n must be a multiple of the block size (32; 256 for K-quants; 1 for float types), and w
 *    and row_bytes multiples of the blocks' alignment: Q4_K, Q5_K 16 bytes; Q5_1 8; Q4_1 4;
 *    Q4_0, Q5_0, Q8_0, Q6_K, F16, BF16 2; F32 4 (GGUF data and cudaMalloc satisfy all of
 *    them; float rows 16-byte aligned with n a multiple of 16 bytes are read 16 bytes at a time).
 * x: F32 [n], 16-byte aligned.  y: F32 [rows]; must not overlap x or W.
 * Arithmetic: float32, each weight as scale·q + offset with ggml's scale and offset per run of
 *    elements, summed per thread and then across a warp (no atomics: the same inputs give the
 *    same bits every run). The result equals Σ W·x up to float32 summation error.
 * All pointers are device pointers; no workspace. rows = 0 is a no-op; n = 0 sets y to 0
 * (leaves it with accumulate) and reads neither w nor x.
 *
 * Traffic (what a timing should compare with the memory bandwidth): rows · (n / block) ·
 * block_bytes of W, read once; 4·n bytes of x from DRAM (re-read from L1/L2 by every warp);
 * 4·rows of y written (and read with accumulate). E.g. Qwen2.5-1.5B ffn_down, Q6_K 1536 × 8960:
 * 11.3 MB of W. */
#ifndef KAIROX_KERNELS_CUDA_MATVEC_CUH_
#define KAIROX_KERNELS_CUDA_MATVEC_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kx_cuda_matvec_args {
  uint32_t struct_size; /* sizeof(kx_cuda_matvec_args) */
  uint32_t type;        /* ggml type id of W */
  const void* w;
  int64_t row_bytes; /* bytes from one row of W to the next */
  int64_t n;         /* elements per row */
  int64_t rows;
  const float* x;     /* [n] */
  float* y;           /* [rows] */
  int32_t accumulate; /* nonzero: y += W·x */
} kx_cuda_matvec_args;

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_matvec(const kx_cuda_matvec_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_MATVEC_CUH_ */
