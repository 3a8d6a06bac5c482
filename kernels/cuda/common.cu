// The per-thread error message behind kx_cuda_api::last_error, and the mapping from
// CUDA runtime errors to the module's status codes.
#include <cstdio>
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace kx::cuda {
namespace {

constexpr size_t kMessageLen = 1024;
// A fixed buffer, not std::string: recording an error must not itself fail.
thread_local char tls_message[kMessageLen] = "";

kx_cuda_status MapCudaError(cudaError_t err) {
  switch (err) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidConfiguration:
      return KX_CUDA_ERROR_INVALID_ARGUMENT;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return KX_CUDA_ERROR_NO_DEVICE;
    case cudaErrorMemoryAllocation:
      return KX_CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorNotSupported:
      return KX_CUDA_ERROR_UNSUPPORTED;
    default:
      return KX_CUDA_ERROR_RUNTIME;
  }
}

}  // namespace

kx_cuda_status RecordCudaError(cudaError_t err, const char* what, const char* file, int line) {
  const char* slash = std::strrchr(file, '/');  // the file name is enough to find it
  std::snprintf(tls_message, kMessageLen, "%s (%s:%d): %s (%s)", what, slash ? slash + 1 : file,
                line, cudaGetErrorString(err), cudaGetErrorName(err));
  // Non-sticky errors stay queryable through cudaGetLastError; clear them so the next
  // launch check does not see this one again.
  (void)cudaGetLastError();
  return MapCudaError(err);
}

kx_cuda_status RecordError(kx_cuda_status status, const char* message) {
  std::snprintf(tls_message, kMessageLen, "%s", message);
  return status;
}

const char* LastError() { return tls_message; }

}  // namespace kx::cuda
