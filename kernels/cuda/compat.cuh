// What every kernel source of the module includes instead of the CUDA headers: under nvcc the
// real CUDA runtime, under the host compiler the CUDA emulator (kernels/cuda/emu), so one
// source is both the module's kernel and the test suite's emulated kernel.
//
//   KX_LAUNCH(kernel, grid, block, stream, args...)            → cudaError_t of the launch
//   KX_LAUNCH_SMEM(kernel, grid, block, smem_bytes, stream, args...)
//   KX_EXTERN_SHARED(float, buf);   // dynamic shared memory, inside the kernel body
//
// `kernel` must be one token: name a template instantiation through a local pointer
// (`auto* k = &MyKernel<4>; KX_LAUNCH(k, ...)`). Kernels stay inside what the emulator
// models (cuda_emu.h): no tensor-core MMA or inline PTX without an emulated path.
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define KX_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) \
  ((kernel)<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__), cudaGetLastError())
#define KX_EXTERN_SHARED(type, name) extern __shared__ type name[]
#define KX_CUDA_EMULATED 0
#else
#include "kernels/cuda/emu/cuda_emu.h"

#define KX_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)              \
  (static_cast<void>(stream),                                               \
   ::kx::emu::Launch((grid), (block), (smem), [&]() { (kernel)(__VA_ARGS__); }))
#define KX_EXTERN_SHARED(type, name) \
  type* name = reinterpret_cast<type*>(::kx::emu::Self().dynamic_shared)
#define KX_CUDA_EMULATED 1
#endif

#define KX_LAUNCH(kernel, grid, block, stream, ...) \
  KX_LAUNCH_SMEM(kernel, grid, block, 0, stream, __VA_ARGS__)
