// Opening a device from user-facing options: `--device cpu|cuda|sim|auto`, `--vram-budget 4G`
// or `50%`, a device profile for the sim device (and bandwidth hints for cuda).
//
// - cpu: no Device at all (nullptr); the engine runs on the CPU as before.
// - cuda: the CUDA backend module and a GPU; Unavailable ("... no CUDA device ...") when
//   either is missing: a user who asked for the GPU gets an error, not a silent CPU run.
// - sim: the simulated GPU (sim_device.h) with the named profile (device_profile.h).
// - auto: cuda when LoadCudaBackend() succeeds, else cpu; logs one info line saying which
//   and why.
//
// Usage:
//   kx::DeviceOptions o;
//   KX_ASSIGN_OR_RETURN(o.kind, kx::ParseDeviceKind(flag_device));        // "auto" -> nullopt
//   KX_ASSIGN_OR_RETURN(kx::SizeSpec budget, kx::ParseSize(flag_vram));    // "4G", "50%"
//   o.vram_budget = budget;
//   o.host_budget = &ram;
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<kx::Device> dev, kx::OpenDevice(o));
//   if (dev == nullptr) { /* cpu */ }
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/memory_budget.h"
#include "base/size_parse.h"
#include "device/device.h"

namespace kx {

struct DeviceOptions {
  std::optional<DeviceKind> kind = DeviceKind::kCpu;  // nullopt: auto
  // Bytes, or a percentage of the device's total memory. Unset: the sim profile's memory;
  // for cuda the memory free when the device is opened.
  std::optional<SizeSpec> vram_budget;
  // A device profile name (device_profile.h); "" = the default one. The sim device's
  // behaviour; for cuda only bandwidth hints (and only when named).
  std::string profile;
  MemoryBudget* host_budget = nullptr;  // pinned staging buffers count here; null = not counted
  int32_t cuda_device = 0;

  // sim only (sim_device.h).
  uint64_t seed = 0;
  double sim_jitter = 0.3;
  std::optional<uint64_t> debug_skip_wait_index;
  bool debug_skip_all_waits = false;
};

// "cpu" | "cuda" | "sim" | "auto" (nullopt), case-sensitive; InvalidArgument listing the
// choices otherwise.
absl::StatusOr<std::optional<DeviceKind>> ParseDeviceKind(std::string_view text);

// The device the options ask for; nullptr for cpu (and for auto without a usable GPU).
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const DeviceOptions& options);

}  // namespace kx
