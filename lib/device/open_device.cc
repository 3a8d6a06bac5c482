#include "device/open_device.h"

#include "base/log.h"
#include "device/cuda_device.h"
#include "device/device_loader.h"
#include "device/sim_device.h"

namespace kx {
namespace {

absl::StatusOr<std::unique_ptr<Device>> OpenSim(const DeviceOptions& options) {
  SimOptions sim;
  KX_ASSIGN_OR_RETURN(sim.profile, LoadDeviceProfile(options.profile));
  if (options.vram_budget) {
    sim.vram_limit = ResolveSize(*options.vram_budget, sim.profile.memory_bytes);
    if (sim.vram_limit == 0) {
      return absl::InvalidArgumentError("sim device: the VRAM budget resolves to 0 bytes");
    }
  }
  sim.host_budget = options.host_budget;
  sim.seed = options.seed;
  sim.jitter = options.sim_jitter;
  sim.debug_skip_wait_index = options.debug_skip_wait_index;
  sim.debug_skip_all_waits = options.debug_skip_all_waits;
  KX_ASSIGN_OR_RETURN(std::unique_ptr<SimDevice> dev, SimDevice::Create(sim));
  return std::unique_ptr<Device>(std::move(dev));
}

absl::StatusOr<std::unique_ptr<Device>> OpenCuda(const CudaApi& api, const DeviceOptions& options) {
  CudaDeviceOptions cuda;
  cuda.device = options.cuda_device;
  cuda.vram_budget = options.vram_budget;
  cuda.host_budget = options.host_budget;
  if (!options.profile.empty()) {
    KX_ASSIGN_OR_RETURN(cuda.profile, LoadDeviceProfile(options.profile));
  }
  KX_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> dev, CudaDevice::Create(api, cuda));
  return std::unique_ptr<Device>(std::move(dev));
}

}  // namespace

absl::StatusOr<std::optional<DeviceKind>> ParseDeviceKind(std::string_view text) {
  if (text == "cpu") return DeviceKind::kCpu;
  if (text == "cuda") return DeviceKind::kCuda;
  if (text == "sim") return DeviceKind::kSim;
  if (text == "auto") return std::optional<DeviceKind>();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", std::string(text), "'; choose one of cpu, cuda, sim, auto"));
}

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const DeviceOptions& options) {
  if (!options.kind) {
    absl::StatusOr<const CudaApi*> api = LoadCudaBackend();
    if (!api.ok()) {
      Log().info("device auto: cpu, because no GPU is usable: {}",
                 std::string(api.status().message()));
      return std::unique_ptr<Device>();
    }
    KX_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, OpenCuda(**api, options));
    Log().info("device auto: {}, because the CUDA backend loaded and found a GPU", dev->name());
    return dev;
  }
  switch (*options.kind) {
    case DeviceKind::kCpu:
      return std::unique_ptr<Device>();
    case DeviceKind::kSim:
      return OpenSim(options);
    case DeviceKind::kCuda: {
      absl::StatusOr<const CudaApi*> api = LoadCudaBackend();
      if (!api.ok()) {
        return absl::UnavailableError(
            absl::StrCat("device 'cuda' was requested, but there is no CUDA device to use: ",
                         api.status().message()));
      }
      return OpenCuda(**api, options);
    }
  }
  return absl::InvalidArgumentError("OpenDevice: unknown DeviceKind");
}

}  // namespace kx
