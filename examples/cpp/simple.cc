// simple.cc: generate text with kairox from C++ through kairox.hpp, the
// header-only RAII wrapper over the C ABI (errors are kairox::Error).
//
//   simple [MODEL.gguf] ["prompt"]
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <kairox/kairox.hpp>

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : "";
  if (path.empty() && std::getenv("KAIROX_MODEL")) path = std::getenv("KAIROX_MODEL");
  if (path.empty()) {
    path = std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") +
           "/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  const std::string question = argc > 2 ? argv[2] : "Name three colors of the rainbow.";
  try {
    kairox::Model model(path);
    kairox::SessionParams sp;
    sp.n_ctx = 1024;
    kairox::Session session(model, sp);
    kairox::Sampler greedy = kairox::Sampler::Greedy();

    const std::string prompt = model.ApplyChatTemplate({{"user", question}});
    std::cout << "kairox " << kairox::Version() << "\n> " << question << "\n";
    kairox::GenerateParams gp;
    gp.max_tokens = 64;
    const kairox::GenerateResult r = session.Generate(
        prompt, gp,
        [](std::string_view piece) {
          std::cout << piece << std::flush;
          return true;  // false would stop
        },
        &greedy);
    std::cout << "\n";
    const kx_stats st = session.Stats();
    std::fprintf(stderr, "[%d prompt tokens, %d generated; %.1f t/s generation]\n", r.n_prompt,
                 r.n_tokens, st.gen_tokens_per_second);
    return r.n_tokens > 0 ? 0 : 1;
  } catch (const kairox::Error& e) {
    std::fprintf(stderr, "simple: %s\n", e.what());
    return 1;
  }
}
