#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace kx::internal {

void CheckFailed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "kairox: check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg ? " — " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace kx::internal
