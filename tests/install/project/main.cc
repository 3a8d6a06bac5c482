// Uses the installed C++ wrapper (on the shared or the static library): a few greedy tokens.
#include <iostream>

#include <kairox/kairox.hpp>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    kairox::Model model(argv[1]);
    kairox::Session session(model);
    kairox::Sampler greedy = kairox::Sampler::Greedy();
    kairox::GenerateParams gp;
    gp.max_tokens = 8;
    const kairox::GenerateResult r = session.Generate("Hello", gp, {}, &greedy);
    std::cout << argv[0] << ": kairox " << kairox::Version() << ": " << r.n_tokens
              << " tokens: " << r.text << "\n";
    return 0;
  } catch (const kairox::Error& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
}
