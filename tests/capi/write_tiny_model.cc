// Writes a tiny random llama model (tests/engine/tiny_model.h) for the C ABI
// tests and the Python tests, which cannot call the C++ writer themselves.
//
//   kx_write_tiny_model PATH [N_CTX_TRAIN]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/tiny_model.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: kx_write_tiny_model PATH [N_CTX_TRAIN]\n");
    return 2;
  }
  kx::test::TinyModelSpec spec;
  if (argc == 3) {
    char* end = nullptr;
    const long long n = std::strtoll(argv[2], &end, 10);
    if (*end != '\0' || n <= 0 || n > 0x7fffffffLL) {
      std::fprintf(stderr, "kx_write_tiny_model: bad N_CTX_TRAIN '%s'\n", argv[2]);
      return 2;
    }
    spec.n_ctx_train = static_cast<int>(n);
  }
  if (auto st = kx::test::WriteTinyModel(argv[1], spec, nullptr); !st.ok()) {
    std::fprintf(stderr, "kx_write_tiny_model: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
