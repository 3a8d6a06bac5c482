// Named ops of the CUDA module: each kernels/cuda/<op>.cu registers its C launcher under the
// op's name (KX_CUDA_REGISTER_OP), and the module's table hands it out through
// kx_cuda_api::find_op, so a new kernel never grows the core table (ggml's get_proc_address
// idea). The launcher's type is declared in the op's header, kernels/cuda/<op>.cuh:
//
//   kx_cuda_status kx_cuda_<op>(const kx_cuda_<op>_args* args, void* stream);
//
// Usage (inside the module):
//   KX_CUDA_REGISTER_OP(rms_norm, kx_cuda_rms_norm)   // at namespace scope in rms_norm.cu
//   void* fn = kx::cuda::FindOp("rms_norm");           // null: no such op
// Under the CUDA emulator (kernels/cuda/emu) the macro registers too, so a test can list
// every op and call it by name exactly as the module does.
#pragma once

namespace kx::cuda {

// The launcher registered under `name`, or null. Thread-safe after static initialisation.
void* FindOp(const char* name);

// The number of registered ops and the i-th name (registration order is unspecified).
int OpCount();
const char* OpName(int i);

// Adds an op; returns true so it can initialise a namespace-scope constant. Aborts on a
// duplicate name or a full registry (a build bug, found by any test that loads the module).
bool RegisterOp(const char* name, void* launcher);

}  // namespace kx::cuda

#define KX_CUDA_REGISTER_OP(name, launcher)                     \
  namespace {                                                   \
  [[maybe_unused]] const bool kx_cuda_registered_##name =       \
      ::kx::cuda::RegisterOp(#name, reinterpret_cast<void*>(&launcher)); \
  }
