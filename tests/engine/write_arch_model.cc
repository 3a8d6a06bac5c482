// Writes one of the tiny models behind the transformers goldens
// (tests/golden/make_arch_reference.py runs it; test_arch_golden writes the
// same bytes itself and checks their sha256 against the golden's).
//
//   kx_write_arch_model VARIANT PATH     VARIANT: llama, mistral, qwen2
#include <cstdio>
#include <string>

#include "engine/tiny_model.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kx_write_arch_model VARIANT PATH\n");
    return 2;
  }
  const kx::test::TinyModelSpec spec = kx::test::ArchGoldenSpec(argv[1]);
  if (spec.arch.empty()) {
    std::fprintf(stderr, "kx_write_arch_model: unknown variant '%s'\n", argv[1]);
    return 2;
  }
  if (auto st = kx::test::WriteTinyModel(argv[2], spec, nullptr); !st.ok()) {
    std::fprintf(stderr, "kx_write_arch_model: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
