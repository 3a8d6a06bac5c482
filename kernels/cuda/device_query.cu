#include <cstddef>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_query.cuh"

namespace kx::cuda {

cudaError_t QueryDeviceCount(int* count) { return cudaGetDeviceCount(count); }

cudaError_t QueryDeviceInfo(int device, kx_cuda_device_info* info) {
  cudaDeviceProp prop{};
  KX_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  int previous = 0;
  KX_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous));
  KX_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const cudaError_t mem_err = cudaMemGetInfo(&free_bytes, &total_bytes);
  KX_CUDA_RETURN_IF_ERROR(cudaSetDevice(previous));
  KX_CUDA_RETURN_IF_ERROR(mem_err);

  // Fill a full-size copy, then hand back only what the caller's struct has room for:
  // an older caller passes a smaller struct_size (the struct is append-only).
  kx_cuda_device_info full{};
  full.struct_size = info->struct_size;
  // prop.name is NUL-terminated within its 256 bytes; copy at most what fits.
  std::snprintf(full.name, sizeof(full.name), "%s", prop.name);
  full.total_memory_bytes = static_cast<uint64_t>(total_bytes);
  full.free_memory_bytes = static_cast<uint64_t>(free_bytes);
  full.compute_capability_major = prop.major;
  full.compute_capability_minor = prop.minor;
  full.multiprocessor_count = prop.multiProcessorCount;
  const size_t n = info->struct_size < sizeof(full) ? info->struct_size : sizeof(full);
  std::memcpy(info, &full, n);
  return cudaSuccess;
}

}  // namespace kx::cuda
