// Finds and loads the optional CUDA backend module (libkairox_cuda.so) at run time.
//
// kairox never links CUDA; GPU support is this dlopen()ed module with a small versioned C
// table (kernels/cuda/cuda_api.h). On a machine without the module, the driver or a GPU,
// loading fails with a message that says which, and the CPU path is unaffected.
//
// Usage:
//   absl::StatusOr<const kx::CudaApi*> cuda = kx::LoadCudaBackend();
//   if (!cuda.ok()) { kx::Log()->info("CPU only: {}", cuda.status().message()); }
//   else {
//     void* buf = nullptr;
//     KX_RETURN_IF_ERROR(kx::CudaCall(**cuda, (*cuda)->alloc(bytes, &buf), "alloc"));
//   }
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/cuda_api.h"

namespace kx {

using CudaApi = kx_cuda_api;

// Environment variable naming the module file; when set, nothing else is tried.
inline constexpr char kCudaModuleEnv[] = "KAIROX_CUDA_MODULE";

// Loads the module (no device check). Search order: $KAIROX_CUDA_MODULE; then
// <dir of the running executable>/../lib/libkairox_cuda.so; then the dynamic loader's
// default search (LD_LIBRARY_PATH, rpath, system directories). Checks the ABI version.
// The first call decides (the result, success or error, is cached for the process); the
// module is never unloaded, so the returned table is valid for the process's lifetime.
// Thread-safe. Errors: NotFound (no module file), FailedPrecondition (a module that
// does not load, or an incompatible ABI).
absl::StatusOr<const CudaApi*> LoadCudaModule();

// LoadCudaModule() plus a check that the driver reports at least one device. Errors from
// the device check are Unavailable("no CUDA device: <reason>"), e.g. the CUDA runtime's
// "CUDA driver version is insufficient for CUDA runtime version" on a machine without a
// GPU driver. Thread-safe; the device check runs on every call (it is cheap).
absl::StatusOr<const CudaApi*> LoadCudaBackend();

// Turns a module status into an absl::Status carrying the module's last error message
// for this thread: "<what>: <message>". OK stays OK.
absl::Status CudaCall(const CudaApi& api, kx_cuda_status status, absl::string_view what);

}  // namespace kx
