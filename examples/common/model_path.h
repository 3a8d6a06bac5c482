// The model a program loads when none is given. Header-only, for the programs.
#pragma once

#include <cstdlib>
#include <string>

namespace kx::cli {

// The default model path: $KAIROX_MODEL, else the cache cmake/fetch_model.sh fills.
inline std::string DefaultModelPath() {
  if (const char* m = std::getenv("KAIROX_MODEL"); m && *m) return m;
  std::string dir;
  if (const char* d = std::getenv("KAIROX_MODEL_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/kairox/models";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/kairox/models";
  }
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace kx::cli
