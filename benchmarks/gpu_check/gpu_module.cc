#include "benchmarks/gpu_check/gpu_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace kx::gpu_check {
namespace {

// Where the module sits relative to the program in the two builds: the standalone project
// puts the program in the build root and the module in lib/, the main project uses bin/ and
// lib/.
std::vector<std::string> CandidatePaths(const std::string& explicit_path) {
  if (!explicit_path.empty()) return {explicit_path};
  if (const char* env = std::getenv("KAIROX_CUDA_MODULE"); env != nullptr && *env != '\0') {
    return {env};
  }
  std::vector<std::string> paths;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir.resize(dir.rfind('/'));
    paths.push_back(dir + "/lib/" KX_CUDA_MODULE_NAME);
    paths.push_back(dir + "/../lib/" KX_CUDA_MODULE_NAME);
  }
  paths.push_back(KX_CUDA_MODULE_NAME);  // LD_LIBRARY_PATH, rpath, system directories
  return paths;
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (api_ != nullptr) api_->free(ptr_);
    api_ = std::exchange(other.api_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (api_ != nullptr) api_->free(ptr_);
}

GpuModule::~GpuModule() = default;

bool GpuModule::Open(const std::string& path, std::string* why) {
  std::string tried;
  for (const std::string& candidate : CandidatePaths(path)) {
    // A bare name goes to the loader's search; a path must exist to be worth a dlopen.
    const bool bare = candidate.find('/') == std::string::npos;
    if (!bare && !FileExists(candidate)) {
      tried += "\n  " + candidate + ": no such file";
      continue;
    }
    handle_ = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* err = dlerror();
      if (bare) {
        tried += "\n  " + candidate + " (loader search): " + (err ? err : "not found");
        continue;
      }
      // The file is there but does not load: a broken build, not a missing GPU.
      failure_ = OpenFailure::kBrokenModule;
      *why = "cannot load " + candidate + ": " + (err ? err : "?");
      return false;
    }
    module_path_ = candidate;
    break;
  }
  if (handle_ == nullptr) {
    failure_ = OpenFailure::kNoModule;
    *why = "no CUDA module (" KX_CUDA_MODULE_NAME
           " is built only where nvcc is found; --module PATH names one):" +
           tried;
    return false;
  }
  auto get = reinterpret_cast<kx_cuda_get_api_fn>(dlsym(handle_, KX_CUDA_GET_API_SYMBOL));
  api_ = get ? get(KX_CUDA_ABI_VERSION) : nullptr;
  if (api_ == nullptr || api_->struct_size < sizeof(kx_cuda_api) || api_->find_op == nullptr) {
    failure_ = OpenFailure::kBrokenModule;
    *why = module_path_ + ": no ABI " + std::to_string(KX_CUDA_ABI_VERSION) +
           " table (an older module? rebuild it)";
    api_ = nullptr;
    return false;
  }
  int32_t count = 0;
  if (api_->device_count(&count) != KX_CUDA_OK || count < 1) {
    failure_ = OpenFailure::kNoDevice;
    *why =
        std::string("no usable CUDA device: ") +
        (count < 1 && *api_->last_error() == '\0' ? "the driver reports none" : api_->last_error());
    return false;
  }
  device_.struct_size = sizeof device_;
  if (api_->set_device(0) != KX_CUDA_OK || api_->device_info(0, &device_) != KX_CUDA_OK) {
    failure_ = OpenFailure::kNoDevice;
    *why = std::string("CUDA device 0 is not usable: ") + api_->last_error();
    return false;
  }
  return true;
}

void GpuModule::Check(kx_cuda_status status, const char* what) const {
  if (status == KX_CUDA_OK) return;
  std::fprintf(stderr, "kairox-gpu-check: %s failed (status %d): %s\n", what, status,
               api_->last_error());
  std::exit(EXIT_FAILURE);
}

DeviceBuffer GpuModule::Alloc(uint64_t bytes) const {
  void* ptr = nullptr;
  Check(api_->alloc(std::max<uint64_t>(bytes, 1), &ptr), "alloc");
  return DeviceBuffer(api_, ptr, bytes);
}

void GpuModule::Upload(const DeviceBuffer& dst, const void* src, uint64_t bytes) const {
  Check(api_->memcpy_h2d(dst.get(), src, bytes), "memcpy_h2d");
}

void GpuModule::Download(void* dst, const DeviceBuffer& src, uint64_t bytes) const {
  Check(api_->memcpy_d2h(dst, src.get(), bytes), "memcpy_d2h");
}

void GpuModule::Fill(const DeviceBuffer& dst, uint8_t byte) const {
  Check(api_->memset_bytes(dst.get(), byte, dst.bytes()), "memset_bytes");
}

void GpuModule::Synchronize() const { Check(api_->synchronize(), "synchronize"); }

double GpuModule::MeasureCopyBandwidth(uint64_t bytes, int reps) const {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  Check(api_->mem_get_info(&free_bytes, &total_bytes), "mem_get_info");
  // Two buffers in at most half of what is free; far beyond any L2 either way.
  bytes = std::min(bytes, free_bytes / 4);
  const DeviceBuffer src = Alloc(bytes);
  const DeviceBuffer dst = Alloc(bytes);
  Fill(src, 0x5a);
  Synchronize();
  std::vector<double> seconds;
  for (int i = 0; i < reps + 1; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Check(api_->memcpy_d2d_async(dst.get(), src.get(), bytes, nullptr), "memcpy_d2d_async");
    Synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (i > 0) seconds.push_back(dt.count());  // the first copy warms up clocks and TLBs
  }
  return 2.0 * static_cast<double>(bytes) / Median(&seconds);
}

double Median(std::vector<double>* samples) {
  if (samples->empty()) return 0.0;
  const size_t mid = samples->size() / 2;
  std::nth_element(samples->begin(), samples->begin() + static_cast<std::ptrdiff_t>(mid),
                   samples->end());
  return (*samples)[mid];
}

}  // namespace kx::gpu_check
