/* Sparse FFN down-projection over F16 rows (PowerInfer's ffn_down_t axpy): the op
 * "axpy_rows_f16". Its argument struct is kx_cuda_axpy_rows_f16_args in cuda_api.h (it was
 * part of the core table before ops were looked up by name). Memory-bound: every active row
 * is read once, with 16-byte loads when the layout allows. */
#ifndef KAIROX_KERNELS_CUDA_AXPY_ROWS_F16_CUH_
#define KAIROX_KERNELS_CUDA_AXPY_ROWS_F16_CUH_

#include "kernels/cuda/cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks the arguments, then enqueues the kernel on `stream` (a cudaStream_t; NULL = the
 * default stream). n_active = 0 is a no-op. */
kx_cuda_status kx_cuda_axpy_rows_f16(const kx_cuda_axpy_rows_f16_args* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_AXPY_ROWS_F16_CUH_ */
