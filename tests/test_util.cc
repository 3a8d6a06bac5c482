#include "test_util.h"

#include <sys/stat.h>

namespace kx::test {

std::string DefaultModelOrSkip() {
  std::string path = EnvOr("KAIROX_TEST_MODEL", "");
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    Skip("default model not found at '" + path +
         "' (run cmake/fetch_model.sh, or set KAIROX_TEST_MODEL)");
  }
  return path;
}

}  // namespace kx::test
