#include "device/device_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kx {
namespace {

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// <dir of /proc/self/exe>/../lib/<module>, or "" when the executable cannot be located.
std::string NextToExecutable() {
  std::vector<char> buf(PATH_MAX + 1, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), PATH_MAX);
  if (n <= 0) return "";
  std::string exe(buf.data(), static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  if (slash == std::string::npos) return "";
  return absl::StrCat(exe.substr(0, slash), "/../lib/", KX_CUDA_MODULE_NAME);
}

std::string DlError() {
  const char* e = ::dlerror();
  return e ? e : "unknown dlopen error";
}

// RTLD_LOCAL: the module's symbols stay out of the global namespace. A file that is
// there but does not load (missing dependency, wrong architecture) is FailedPrecondition,
// not NotFound: that is a broken installation rather than an absent option.
absl::StatusOr<void*> Open(const std::string& path) {
  if (!FileExists(path)) {
    return absl::NotFoundError(absl::StrCat("CUDA backend module '", path, "' does not exist"));
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load CUDA backend module '", path, "': ", DlError()));
  }
  return handle;
}

absl::StatusOr<void*> FindModule() {
  if (const char* env = std::getenv(kCudaModuleEnv); env != nullptr && *env != '\0') {
    return Open(env);  // explicit: do not silently fall back to another copy
  }
  std::vector<std::string> tried;
  const std::string beside = NextToExecutable();
  if (!beside.empty()) {
    if (FileExists(beside)) return Open(beside);  // present but broken: say so
    tried.push_back(beside);
  }
  void* handle = ::dlopen(KX_CUDA_MODULE_NAME, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  tried.push_back(
      absl::StrCat(KX_CUDA_MODULE_NAME, " on the default library path (", DlError(), ")"));
  return absl::NotFoundError(absl::StrCat("CUDA backend module not found; tried ",
                                          absl::StrJoin(tried, ", "), ". Set ", kCudaModuleEnv,
                                          " to its path"));
}

absl::StatusOr<const CudaApi*> LoadOnce() {
  absl::StatusOr<void*> handle = FindModule();
  if (!handle.ok()) return handle.status();
  // Never dlclose: the static CUDA runtime registers exit-time handlers in the module.
  ::dlerror();
  void* sym = ::dlsym(*handle, KX_CUDA_GET_API_SYMBOL);
  if (sym == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA backend module has no ", KX_CUDA_GET_API_SYMBOL, ": ", DlError()));
  }
  const auto get_api = reinterpret_cast<kx_cuda_get_api_fn>(sym);
  const CudaApi* api = get_api(KX_CUDA_ABI_VERSION);
  if (api == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA backend module does not support ABI version ", KX_CUDA_ABI_VERSION,
                     " (the module is older than kairox; rebuild it)"));
  }
  if (api->abi_version < KX_CUDA_ABI_VERSION || api->struct_size < sizeof(CudaApi)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA backend module reports ABI ", api->abi_version, " with a ", api->struct_size,
        "-byte table; kairox needs ABI ", KX_CUDA_ABI_VERSION, " (", sizeof(CudaApi), " bytes)"));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CudaApi*> LoadCudaModule() {
  static const absl::StatusOr<const CudaApi*> loaded = LoadOnce();  // thread-safe init
  return loaded;
}

absl::StatusOr<const CudaApi*> LoadCudaBackend() {
  absl::StatusOr<const CudaApi*> api = LoadCudaModule();
  if (!api.ok()) return api.status();
  int32_t count = 0;
  if ((*api)->device_count(&count) != KX_CUDA_OK) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", (*api)->last_error()));
  }
  if (count <= 0) {
    return absl::UnavailableError("no CUDA device: the driver reports 0 devices");
  }
  return api;
}

absl::Status CudaCall(const CudaApi& api, kx_cuda_status status, absl::string_view what) {
  if (status == KX_CUDA_OK) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", api.last_error());
  switch (status) {
    case KX_CUDA_ERROR_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(message);
    case KX_CUDA_ERROR_NO_DEVICE:
      return absl::UnavailableError(message);
    case KX_CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case KX_CUDA_ERROR_UNSUPPORTED:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace kx
