// Always-on invariant checks. A failed KX_CHECK is a bug in kairox, not bad
// input: it prints file:line and aborts. Bad input gets an absl::Status.
#pragma once

namespace kx::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const char* msg);
}  // namespace kx::internal

#define KX_CHECK(cond)                                                  \
  do {                                                                  \
    if (__builtin_expect(!(cond), 0))                                   \
      ::kx::internal::CheckFailed(__FILE__, __LINE__, #cond, nullptr);  \
  } while (0)

#define KX_CHECK_MSG(cond, msg)                                         \
  do {                                                                  \
    if (__builtin_expect(!(cond), 0))                                   \
      ::kx::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg));    \
  } while (0)
