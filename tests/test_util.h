// Helpers shared by the test programs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace kx::test {

// Exit code CTest reports as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

// Prints why and exits as skipped. Catch2 v2 has no SKIP(); use this before
// any assertion ran, from the first TEST_CASE of a program that needs it.
[[noreturn]] inline void Skip(const std::string& why) {
  std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
  std::exit(kSkipExitCode);
}

inline std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// The default model's path, or skip with a message when it is not there.
std::string DefaultModelOrSkip();

// A seeded generator; the seed is printed so a failure can be reproduced
// (KAIROX_TEST_SEED overrides it).
inline std::mt19937_64 SeededRng(uint64_t default_seed) {
  uint64_t seed = default_seed;
  if (const char* s = std::getenv("KAIROX_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::fprintf(stderr, "test seed: %llu\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

}  // namespace kx::test
