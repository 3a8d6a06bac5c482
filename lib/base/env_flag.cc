#include "base/env_flag.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "base/log.h"

namespace kx {

std::optional<bool> ParseFlag(std::string_view value) {
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!value.empty() && blank(value.front())) value.remove_prefix(1);
  while (!value.empty() && blank(value.back())) value.remove_suffix(1);
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  return std::nullopt;
}

std::optional<bool> EnvFlag(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  std::optional<bool> flag = ParseFlag(raw);
  if (!flag.has_value()) {
    // Once per (name, value): these are read per engine or per mapping, not once.
    static std::mutex mu;
    static std::set<std::pair<std::string, std::string>> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.emplace(name, raw).second) {
      Log().warn("{}={} is not an on/off value (0/1, false/true, off/on, no/yes): ignored", name,
                 raw);
    }
  }
  return flag;
}

}  // namespace kx
