/* RMSNorm over rows, optionally added into a residual: the op "rms_norm".
 *
 * For each row r < n_rows (rows contiguous, n elements each; all arrays F32, device memory):
 *   scale_r = (float)(1 / sqrt(Σ_i (double)src[r][i]² / n + (double)eps))   (a double sum)
 *   y[r][i] = (src[r][i] · scale_r) · weight[i]                         (two float products)
 *   dst[r][i] = y[r][i]                        when residual is NULL
 *   dst[r][i] = residual[r][i] + y[r][i]       otherwise (one float add, never fused)
 * which is the CPU engine's RmsNorm (lib/engine/forward.cc) and, with a residual, its
 * post-norm-then-residual stages (AttnResidualStage / FfnResidualStage: ffo normed in place,
 * then x += ffo) in one pass. The weight is shared by every row: rows = 1 for the hidden
 * state (n = n_embd), rows = n_head with n = head_dim for Gemma 3's per-head QK-norm.
 * Only the double sum's order differs from the CPU, so results agree to the last bit except
 * where that changes the rounding of scale_r (by one ulp).
 *
 * Aliasing: dst may equal src or residual (in place); nothing else may overlap.
 * n_rows = 0 is a no-op. Bytes moved: n_rows · n · 4 · (2, or 3 with a residual) + n · 4. */
#ifndef KAIROX_KERNELS_CUDA_RMS_NORM_CUH_
#define KAIROX_KERNELS_CUDA_RMS_NORM_CUH_

#include <stdint.h>

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kx_cuda_rms_norm_args {
  uint32_t struct_size;  /* sizeof(kx_cuda_rms_norm_args) */
  const float* src;      /* [n_rows][n] */
  const float* weight;   /* [n] */
  const float* residual; /* [n_rows][n], or NULL */
  float* dst;            /* [n_rows][n] */
  int64_t n_rows;        /* >= 0 */
  int64_t n;             /* > 0 when n_rows > 0 */
  float eps;             /* >= 0 */
} kx_cuda_rms_norm_args;

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). */
kx_cuda_status kx_cuda_rms_norm(const kx_cuda_rms_norm_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_RMS_NORM_CUH_ */
