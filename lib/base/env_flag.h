// On/off switches read from the environment (KAIROX_HUGE_PAGES, KAIROX_KV_K_BLOCKED,
// KAIROX_SIDECAR_AUTO, ...), parsed one way everywhere.
//
//   if (kx::EnvFlag("KAIROX_HUGE_PAGES") == false) { ... }   // the user switched it off
#pragma once

#include <optional>
#include <string_view>

namespace kx {

// The switch `name` as the user set it: false for 0, false, off, no; true for 1, true, on,
// yes (any case, surrounding blanks ignored); nullopt when unset or empty. Any other value is
// nullopt too, after a warning that names the variable, the value and what it accepts, so a
// typo does not pass silently (once per name and value).
std::optional<bool> EnvFlag(const char* name);

// The same parse of a value (tests; nullopt for anything not listed above, no warning).
std::optional<bool> ParseFlag(std::string_view value);

}  // namespace kx
