// Helpers shared by the test programs.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

// 1 in an ASan or TSan build (GCC defines __SANITIZE_*__, clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KX_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KX_TEST_SANITIZED 1
#endif
#endif
#ifndef KX_TEST_SANITIZED
#define KX_TEST_SANITIZED 0
#endif

namespace kx::test {

// Sanitizer builds run compute several times slower: a test whose premise is "this
// injected delay outlasts the compute" scales the delay by this.
inline constexpr bool kSanitized = KX_TEST_SANITIZED != 0;

// Exit code CTest reports as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

// Prints why and exits as skipped. Catch2 v2 has no SKIP(); use this before
// any assertion ran, from the first TEST_CASE of a program that needs it.
[[noreturn]] inline void Skip(const std::string& why) {
  std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
  std::exit(kSkipExitCode);
}

// This test process's own directory for `name`: $TMPDIR (or /tmp) + /kx_test_<name>_<pid>,
// made on first use and left for the OS to clean. Files written under it by one test case
// are there for the next (a model prepared once per program).
inline std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/kx_test_" + name + "_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);  // EEXIST after the first call
  return dir;
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
