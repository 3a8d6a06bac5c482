// The cuda device: Device over the CUDA backend module's C table (device_loader.h). Thin on
// purpose: three non-blocking cudaStreams, cudaEvents without timing, cudaMalloc'd memory
// under the VRAM budget, cudaHostAlloc'd staging buffers, ops found by name in the module
// (kx_cuda_api::find_op) once and cached by Device. Module statuses become absl::Status
// through CudaCall (naming the call and the module's message). CUDA's own errors are sticky
// after a kernel fault, so this device's are too. Poison is a no-op here.
//
// Each call first makes the device current on the calling thread (cudaSetDevice, once per
// thread), because the CUDA runtime's current device is per thread.
//
// Usage (OpenDevice does this for DeviceKind::kCuda):
//   KX_ASSIGN_OR_RETURN(const kx::CudaApi* api, kx::LoadCudaBackend());
//   kx::CudaDeviceOptions o;
//   o.vram_budget = kx::SizeSpec{.is_percent = true, .percent = 90.0};
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<kx::CudaDevice> gpu, kx::CudaDevice::Create(*api, o));
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "base/size_parse.h"
#include "device/device.h"
#include "device/device_loader.h"

namespace kx {

struct CudaDeviceOptions {
  int32_t device = 0;
  // Bytes, or a percentage of the device's total memory; unset: its free memory at creation.
  std::optional<SizeSpec> vram_budget;
  MemoryBudget* host_budget = nullptr;  // pinned buffers count here; null = not counted
  // Bandwidth hints reported by Info(); unset: unknown (0).
  std::optional<DeviceProfile> profile;
};

class CudaDevice final : public Device {
 public:
  // Unavailable/InvalidArgument from the module (no such device, a budget above the total).
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(const CudaApi& api,
                                                            const CudaDeviceOptions& options);
  // Synchronizes, then destroys the streams.
  ~CudaDevice() override;

 protected:
  absl::StatusOr<DeviceInfo> DoInfo() override;
  absl::StatusOr<void*> DoAlloc(uint64_t bytes) override;
  void DoFree(void* ptr, uint64_t bytes) override;
  absl::StatusOr<void*> DoAllocPinned(uint64_t bytes) override;
  void DoFreePinned(void* ptr, uint64_t bytes) override;
  absl::Status DoPoison(void* ptr, uint64_t bytes) override;
  absl::StatusOr<void*> DoCreateEvent(bool timing) override;
  absl::StatusOr<double> DoEventElapsedSeconds(void* start, void* end) override;
  void DoDestroyEvent(void* event) override;
  absl::Status DoRecordEvent(StreamKind stream, void* event) override;
  absl::Status DoStreamWaitEvent(StreamKind stream, void* event) override;
  absl::Status DoEventSynchronize(void* event) override;
  absl::StatusOr<bool> DoEventQuery(void* event) override;
  absl::Status DoStreamSynchronize(StreamKind stream) override;
  absl::Status DoCopy(StreamKind stream, CopyDirection direction, void* dst, const void* src,
                      uint64_t bytes) override;
  absl::Status DoMemset(StreamKind stream, void* dst, uint8_t value, uint64_t bytes) override;
  const void* DoFindOp(std::string_view op) override;
  absl::Status DoLaunch(StreamKind stream, const OpRef& op, const void* args) override;

 private:
  CudaDevice(const CudaApi& api, const CudaDeviceOptions& options, std::string name,
             uint64_t vram_limit);
  // cudaSetDevice on this thread unless it already chose this device.
  absl::Status MakeCurrent();
  void* stream(StreamKind kind) const { return streams_[static_cast<int>(kind)]; }

  const CudaApi& api_;
  const int32_t device_;
  const std::optional<DeviceProfile> profile_;
  void* streams_[kStreamCount] = {};
};

}  // namespace kx
