#include "device/device_profile.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "base/size_parse.h"
#include "device/profiles_embedded.h"
#include "nlohmann/json.hpp"

namespace kx {
namespace {

constexpr double kGigabyte = 1e9;  // vendors quote link and memory bandwidth in GB/s
constexpr double kMicrosecond = 1e-6;

using Json = nlohmann::json;

// "<source>: profile '<name>': <key> <problem>".
absl::Status KeyError(std::string_view source, std::string_view profile, std::string_view key,
                      std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": profile '",
                                                 std::string(profile), "': key '", std::string(key),
                                                 "' ", std::string(problem)));
}

absl::StatusOr<double> NumberKey(const Json& p, std::string_view source, std::string_view name,
                                 const char* key, bool allow_zero) {
  auto it = p.find(key);
  if (it == p.end()) return KeyError(source, name, key, "is missing");
  if (!it->is_number()) return KeyError(source, name, key, "must be a number");
  const double v = it->get<double>();
  if (!(allow_zero ? v >= 0.0 : v > 0.0) || v > 1e18) {
    return KeyError(source, name, key, allow_zero ? "must be >= 0" : "must be > 0");
  }
  return v;
}

absl::StatusOr<DeviceProfile> ParseProfile(const Json& p, std::string_view source,
                                           const std::string& name) {
  if (!p.is_object()) return KeyError(source, name, name, "must be an object");
  DeviceProfile out;
  out.name = name;
  auto desc = p.find("description");
  if (desc == p.end()) return KeyError(source, name, "description", "is missing");
  if (!desc->is_string()) return KeyError(source, name, "description", "must be a string");
  out.description = desc->get<std::string>();

  auto mem = p.find("memory");
  if (mem == p.end()) return KeyError(source, name, "memory", "is missing");
  if (!mem->is_string()) return KeyError(source, name, "memory", "must be a size like \"24GiB\"");
  absl::StatusOr<SizeSpec> size = ParseSize(mem->get<std::string>());
  if (!size.ok()) return KeyError(source, name, "memory", std::string(size.status().message()));
  if (size->is_percent || size->bytes == 0) {
    return KeyError(source, name, "memory", "must be a positive byte size, not a percentage");
  }
  out.memory_bytes = size->bytes;

  KX_ASSIGN_OR_RETURN(const double h2d, NumberKey(p, source, name, "h2d_gb_per_s", false));
  KX_ASSIGN_OR_RETURN(const double d2h, NumberKey(p, source, name, "d2h_gb_per_s", false));
  KX_ASSIGN_OR_RETURN(const double lat, NumberKey(p, source, name, "copy_latency_us", true));
  KX_ASSIGN_OR_RETURN(const double dev, NumberKey(p, source, name, "device_gb_per_s", false));
  out.h2d_bytes_per_s = h2d * kGigabyte;
  out.d2h_bytes_per_s = d2h * kGigabyte;
  out.copy_latency_s = lat * kMicrosecond;
  out.device_bytes_per_s = dev * kGigabyte;
  // Optional (older files lack it): false keeps every stream on its own copy engine.
  if (auto link = p.find("shared_h2d_link"); link != p.end()) {
    if (!link->is_boolean()) return KeyError(source, name, "shared_h2d_link", "must be a boolean");
    out.shared_h2d_link = link->get<bool>();
  }
  return out;
}

}  // namespace

double DeviceProfile::CopySeconds(uint64_t bytes, CopyDirection direction) const {
  const double b = static_cast<double>(bytes);
  switch (direction) {
    case CopyDirection::kHostToDevice:
      return copy_latency_s + b / h2d_bytes_per_s;
    case CopyDirection::kDeviceToHost:
      return copy_latency_s + b / d2h_bytes_per_s;
    case CopyDirection::kDeviceToDevice:
      return 2.0 * b / device_bytes_per_s;
  }
  return 0.0;
}

absl::StatusOr<DeviceProfile> DeviceProfileSet::Find(std::string_view name) const {
  const std::string_view want = name.empty() ? std::string_view(default_name) : name;
  std::vector<std::string> names;
  for (const DeviceProfile& p : profiles) {
    if (p.name == want) return p;
    names.push_back(p.name);
  }
  return absl::NotFoundError(absl::StrCat("no device profile '", std::string(want),
                                          "'; known: ", absl::StrJoin(names, ", "), " (",
                                          kDeviceProfileEnv, " names another file)"));
}

absl::StatusOr<DeviceProfileSet> ParseDeviceProfiles(std::string_view json_text,
                                                     std::string_view source) {
  const Json j = Json::parse(json_text.begin(), json_text.end(), nullptr,
                             /*allow_exceptions=*/false);
  const std::string src(source);
  if (j.is_discarded()) return absl::InvalidArgumentError(src + ": not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(src + ": must be a JSON object");
  auto def = j.find("default");
  if (def == j.end() || !def->is_string()) {
    return absl::InvalidArgumentError(src + ": key 'default' (a profile name) is missing");
  }
  auto profiles = j.find("profiles");
  if (profiles == j.end() || !profiles->is_object() || profiles->empty()) {
    return absl::InvalidArgumentError(
        src + ": key 'profiles' (an object of name -> profile) is missing or empty");
  }
  DeviceProfileSet set;
  set.default_name = def->get<std::string>();
  for (auto it = profiles->begin(); it != profiles->end(); ++it) {
    KX_ASSIGN_OR_RETURN(DeviceProfile p, ParseProfile(it.value(), source, it.key()));
    set.profiles.push_back(std::move(p));
  }
  if (!set.Find("").ok()) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": key 'default' names '", set.default_name,
                                                   "', which is not a profile"));
  }
  return set;
}

absl::StatusOr<DeviceProfileSet> LoadDeviceProfiles() {
  const char* path = std::getenv(kDeviceProfileEnv);
  if (path == nullptr || *path == '\0') {
    return ParseDeviceProfiles(EmbeddedDeviceProfilesJson(), "built-in device profiles");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(kDeviceProfileEnv, "='", path, "': cannot open the file"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseDeviceProfiles(text.str(), absl::StrCat(kDeviceProfileEnv, "='", path, "'"));
}

absl::StatusOr<DeviceProfile> LoadDeviceProfile(std::string_view name) {
  KX_ASSIGN_OR_RETURN(const DeviceProfileSet set, LoadDeviceProfiles());
  return set.Find(name);
}

}  // namespace kx
