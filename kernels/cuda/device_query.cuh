// Device enumeration: how many GPUs the driver exposes and what each one is.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_api.h"

namespace kx::cuda {

// Number of usable devices. Fails (cudaErrorInsufficientDriver, cudaErrorNoDevice, ...)
// when there is no driver or no GPU; the error says which.
cudaError_t QueryDeviceCount(int* count);

// Name, memory (total and currently free), compute capability and SM count of `device`.
// Fills the fields of `info` that its struct_size covers; leaves the current device as it
// was. Creates the device's primary context if it does not exist yet (for the free memory).
cudaError_t QueryDeviceInfo(int device, kx_cuda_device_info* info);

}  // namespace kx::cuda
