// Device profiles: the numbers that make the simulated GPU behave like a real one (memory
// size, PCIe and device-memory bandwidth, copy latency), and bandwidth hints for the cuda
// device. They live in lib/device/profiles.json, compiled into the library; the environment
// variable KAIROX_DEVICE_PROFILE=/path.json replaces that file with another of the same
// schema (a "default" name and a "profiles" object of name -> profile):
//
//   "rtx4090-pcie4": {"description": "...", "memory": "24GiB", "h2d_gb_per_s": 24.0,
//                     "d2h_gb_per_s": 24.0, "copy_latency_us": 10.0, "device_gb_per_s": 1008.0,
//                     "shared_h2d_link": true}
//
// Every key is required but shared_h2d_link (default false); errors name the file, the
// profile and the key.
//
// Usage:
//   KX_ASSIGN_OR_RETURN(kx::DeviceProfile p, kx::LoadDeviceProfile(""));  // the default
//   KX_ASSIGN_OR_RETURN(kx::DeviceProfile h, kx::LoadDeviceProfile("h100-pcie5"));
//   double seconds = p.CopySeconds(bytes, kx::CopyDirection::kHostToDevice);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kx {

// Environment variable naming a profiles file that replaces the built-in one.
inline constexpr char kDeviceProfileEnv[] = "KAIROX_DEVICE_PROFILE";

enum class CopyDirection : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

struct DeviceProfile {
  std::string name;
  std::string description;
  uint64_t memory_bytes = 0;
  double h2d_bytes_per_s = 0.0;
  double d2h_bytes_per_s = 0.0;
  double copy_latency_s = 0.0;      // per host<->device copy, before the first byte lands
  double device_bytes_per_s = 0.0;  // device memory; a device-to-device copy moves 2x bytes
  // sim: host-to-device copies of every stream share one link, one at a time, critical first
  // (sim_device.h); false: each stream has its own copy engine (no contention).
  bool shared_h2d_link = false;

  // The modelled duration of one copy: latency + bytes / bandwidth for host<->device;
  // 2 * bytes / device bandwidth (a read and a write) for device-to-device.
  double CopySeconds(uint64_t bytes, CopyDirection direction) const;
};

struct DeviceProfileSet {
  std::string default_name;
  std::vector<DeviceProfile> profiles;  // sorted by name

  // The profile called `name` ("" = default_name), or NotFound listing the names.
  absl::StatusOr<DeviceProfile> Find(std::string_view name) const;
};

// Parses a profiles file's text. `source` names it in errors (a path, or "built-in").
// InvalidArgument naming the profile and key for a missing key, a wrong type, a
// non-positive bandwidth or memory, a negative latency, or a default that is not listed.
absl::StatusOr<DeviceProfileSet> ParseDeviceProfiles(std::string_view json_text,
                                                     std::string_view source);

// The profiles in effect: $KAIROX_DEVICE_PROFILE's file if set, else the built-in ones.
absl::StatusOr<DeviceProfileSet> LoadDeviceProfiles();

// LoadDeviceProfiles() then Find(name).
absl::StatusOr<DeviceProfile> LoadDeviceProfile(std::string_view name);

}  // namespace kx
