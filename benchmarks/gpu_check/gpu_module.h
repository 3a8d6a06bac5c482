// The real GPU for kairox-gpu-check: dlopen()s libkairox_cuda.so (only kx_cuda_get_api is
// exported, so its kernels never clash with the emulated ones linked into the program) and
// wraps the table's memory, synchronization and op lookup. Plain C++: no kairox library, no
// CUDA header.
//
// Usage:
//   GpuModule gpu;
//   std::string why;
//   if (!gpu.Open(module_path_or_empty, &why)) { puts(why.c_str()); return kSkip; }
//   DeviceBuffer buf = gpu.Alloc(bytes);   // freed by its destructor
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_api.h"

namespace kx::gpu_check {

class GpuModule;

// Device memory, freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const kx_cuda_api* api, void* ptr, uint64_t bytes)
      : api_(api), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* get() const { return ptr_; }
  uint64_t bytes() const { return bytes_; }

 private:
  const kx_cuda_api* api_ = nullptr;
  void* ptr_ = nullptr;
  uint64_t bytes_ = 0;
};

// Why Open failed, so the caller can tell "no GPU here" (skip) from "the module is broken"
// (a failure).
enum class OpenFailure { kNone, kNoModule, kNoDevice, kBrokenModule };

class GpuModule {
 public:
  GpuModule() = default;
  GpuModule(const GpuModule&) = delete;
  GpuModule& operator=(const GpuModule&) = delete;
  ~GpuModule();  // leaves the module loaded: static CUDA state must outlive exit handlers

  // Loads the module and selects device 0. `path`: the module file; empty: $KAIROX_CUDA_MODULE
  // when set (only it), else <exe dir>/lib/, <exe dir>/../lib/, then the loader's default
  // path. On failure writes the reason and returns false (failure() says which kind).
  bool Open(const std::string& path, std::string* why);
  OpenFailure failure() const { return failure_; }

  const kx_cuda_api& api() const { return *api_; }
  const std::string& module_path() const { return module_path_; }
  const kx_cuda_device_info& device() const { return device_; }

  // The op's launcher from the module (find_op), or null.
  void* FindOp(const char* name) const { return api_->find_op(name); }

  // Aborts the program with the module's message on any error: a check that cannot allocate
  // or copy has nothing left to report.
  DeviceBuffer Alloc(uint64_t bytes) const;
  void Upload(const DeviceBuffer& dst, const void* src, uint64_t bytes) const;
  void Download(void* dst, const DeviceBuffer& src, uint64_t bytes) const;
  void Fill(const DeviceBuffer& dst, uint8_t byte) const;
  void Synchronize() const;
  // Exits with `what` and the module's last error when `status` is not OK.
  void Check(kx_cuda_status status, const char* what) const;

  // Device-to-device copy bandwidth (bytes read + bytes written per second) over a buffer of
  // up to `bytes` (less when the device has less free memory): the ceiling the op timings
  // are compared with. Median of `reps` copies.
  double MeasureCopyBandwidth(uint64_t bytes, int reps) const;

 private:
  const kx_cuda_api* api_ = nullptr;
  void* handle_ = nullptr;
  std::string module_path_;
  kx_cuda_device_info device_{};
  OpenFailure failure_ = OpenFailure::kNone;
};

// Median of `samples` (which it reorders); 0 for none.
double Median(std::vector<double>* samples);

}  // namespace kx::gpu_check
