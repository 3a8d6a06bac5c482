// Engine: one loaded model and one sequence (KV cache) evaluated on the CPU.
//
// Usage:
//   kx::EngineOptions opts;  opts.n_threads = 2;  opts.n_ctx = 2048;
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<kx::Engine> engine, kx::Engine::Load(path, opts));
//   std::vector<int32_t> ids = engine->tokenizer().Encode(prompt, true, true);
//   KX_RETURN_IF_ERROR(engine->Eval(ids));            // prefill; logits of the last token
//   std::span<const float> logits = engine->Logits();
// Not thread-safe: one thread drives an Engine at a time (it owns a thread
// pool for its own work).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace kx {

class Tokenizer;
class GgufFile;
class Model;
struct LlamaHParams;

struct EngineOptions {
  int n_threads = 0;    // 0: all cores the process may use
  int n_ctx = 0;        // 0: min(model's trained context, 4096)
  int n_batch = 64;     // tokens per prefill batch
};

// Wall time per op kind, accumulated since the last ResetProfile().
struct OpProfile {
  struct Entry {
    const char* name;
    int64_t ns;
    int64_t calls;
  };
  std::vector<Entry> entries;
  int64_t tokens = 0;
};

class Engine {
 public:
  // Loads the model at `model_path` and creates a session on it.
  static absl::StatusOr<std::unique_ptr<Engine>> Load(const std::string& model_path,
                                                      const EngineOptions& options);
  // A session on an already loaded model (shared, not copied).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const EngineOptions& options);
  ~Engine();

  const std::shared_ptr<const Model>& model() const;
  const Tokenizer& tokenizer() const;
  const GgufFile& gguf() const;
  const LlamaHParams& hparams() const;
  int n_vocab() const;
  int n_ctx() const;
  int n_threads() const;
  // Tokens in the KV cache.
  int n_past() const;

  // Appends `tokens` at position n_past() and evaluates them. With
  // `all_logits`, logits of every token are kept (Logits(i)); otherwise
  // only the last token's. Fails (changing nothing) if the context would
  // overflow or a token id is out of range.
  absl::Status Eval(std::span<const int32_t> tokens, bool all_logits = false);

  // Logits of token i of the last Eval (i = -1: the last one).
  std::span<const float> Logits(int i = -1) const;

  // Drops KV entries at positions >= n (0 clears).
  void TruncateKv(int n);

  // Bytes of weights one decode step reads (for bandwidth ceilings).
  uint64_t WeightBytesPerToken() const;
  // Bytes of KV cache one decode step reads at the current depth.
  uint64_t KvBytesPerToken() const;
  // Floating point operations of one token through the model at depth 0.
  double FlopsPerToken() const;

  const OpProfile& profile() const;
  void ResetProfile();

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kx
