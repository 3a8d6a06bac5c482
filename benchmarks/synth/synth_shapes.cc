// The named shapes of kairox-synth: the hyper-parameters of the real models
// (their config.json / GGUF metadata), whose ReLU-family variants the sparse
// systems were evaluated on (kairox.txt §8: ProSparse-LLaMA2-7B/13B,
// Bamboo-7B from Mistral; powerinfer.txt: ReluLLaMA).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "synth/synth_model.h"

namespace kx::synth {
namespace {

std::vector<SynthShape> Shapes() {
  // name, follows, layers, hidden, FFN, heads, KV heads, vocab, context, RoPE base.
  auto s = [](const char* name, const char* follows, int l, int e, int f, int h, int kv, int v,
              int ctx, float base) {
    SynthShape x;
    x.name = name;
    x.follows = follows;
    x.n_layer = l;
    x.n_embd = e;
    x.n_ff = f;
    x.n_head = h;
    x.n_head_kv = kv;
    x.n_vocab = v;
    x.n_ctx_train = ctx;
    x.rope_freq_base = base;
    return x;
  };
  return {
      // Small enough for a unit test: the generator and a forward pass in well under a second.
      s("tiny", "none (test shape)", 4, 256, 1024, 8, 4, 512, 512, 10000.0f),
      s("1b", "TinyLlama-1.1B", 22, 2048, 5632, 32, 4, 32000, 2048, 10000.0f),
      // Llama 3.2 3B ties its LM head to the embedding; the synthetic model needs its own
      // head (the successor map), so it carries 128256 x 3072 more weights than the real one.
      s("3b", "Llama-3.2-3B (untied head)", 28, 3072, 8192, 24, 8, 128256, 131072, 500000.0f),
      s("7b", "Llama-2-7B (ReluLLaMA-7B, ProSparse-LLaMA2-7B)", 32, 4096, 11008, 32, 32, 32000,
        4096, 10000.0f),
      s("7b-mistral", "Mistral-7B-v0.1 (Bamboo-7B, TurboSparse-Mistral)", 32, 4096, 14336, 32, 8,
        32000, 32768, 10000.0f),
      s("13b", "Llama-2-13B (ReluLLaMA-13B, ProSparse-LLaMA2-13B)", 40, 5120, 13824, 40, 40, 32000,
        4096, 10000.0f),
  };
}

}  // namespace

const std::vector<std::string>& ShapeNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const SynthShape& s : Shapes()) v.push_back(s.name);
    return v;
  }();
  return names;
}

absl::StatusOr<SynthShape> ShapeByName(const std::string& name) {
  for (const SynthShape& s : Shapes()) {
    if (s.name == name) return s;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown shape '", name, "' (known: ", absl::StrJoin(ShapeNames(), ", "), ")"));
}

}  // namespace kx::synth
