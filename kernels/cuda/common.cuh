// Shared by the CUDA sources of the module: turning cudaError_t into the module's
// kx_cuda_status plus a per-thread message, which lib/device turns into an absl::Status.
#pragma once

#include "kernels/cuda/compat.cuh"

#include "kernels/cuda/cuda_api.h"

namespace kx::cuda {

// Records "<what> (<file>:<line>): <CUDA message> (<CUDA error name>)" as the calling
// thread's last error and maps the CUDA error to a module status. Clears CUDA's sticky
// per-thread "last error" so one failure is not reported twice.
kx_cuda_status RecordCudaError(cudaError_t err, const char* what, const char* file, int line);

// Records a message that is not a CUDA error (argument checks) and returns `status`.
kx_cuda_status RecordError(kx_cuda_status status, const char* message);

// The calling thread's last message; "" after a success-only history.
const char* LastError();

}  // namespace kx::cuda

// Evaluates a CUDA runtime call; on failure returns the mapped kx_cuda_status from the
// enclosing function (which must return kx_cuda_status).
#define KX_CUDA_CHECK(expr)                                                        \
  do {                                                                             \
    const cudaError_t kx_cuda_err_ = (expr);                                       \
    if (kx_cuda_err_ != cudaSuccess)                                               \
      return ::kx::cuda::RecordCudaError(kx_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Inside launchers that return cudaError_t: propagates a failure unchanged.
#define KX_CUDA_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    const cudaError_t kx_cuda_err_ = (expr);              \
    if (kx_cuda_err_ != cudaSuccess) return kx_cuda_err_; \
  } while (0)
