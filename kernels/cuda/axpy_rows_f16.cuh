// Sparse FFN down-projection on the GPU: dst += sum over active rows of coeff * W[row],
// W in F16, one row per neuron (PowerInfer's ffn_down_t layout). Memory-bound: every
// active row is read once, with 16-byte loads when the layout allows.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kx::cuda {

struct AxpyRowsF16Params {
  const __half* w;       // [n_rows][w_row_stride], device
  int64_t n_cols;        // > 0
  int64_t w_row_stride;  // >= n_cols
  const int32_t* rows;   // [n_active] row indices, device
  const float* coeff;    // [n_active], coeff[k] scales row rows[k], device
  int64_t n_active;      // >= 0
  float* dst;            // [n_cols], accumulated into, device
};

// Enqueues the kernel on `stream`. Arguments are assumed valid (the C entry point checks
// them); returns the launch error, if any. No workspace; dst is updated with atomics.
cudaError_t LaunchAxpyRowsF16(const AxpyRowsF16Params& params, cudaStream_t stream);

}  // namespace kx::cuda
