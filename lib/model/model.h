// Model: one loaded GGUF model — the mapped file, its tokenizer, hyper-
// parameters and weight views. Immutable once loaded and safe to share
// between threads and sessions (kx::Engine holds it by shared_ptr), so one
// model serves many sessions without being loaded twice.
//
//   KX_ASSIGN_OR_RETURN(std::shared_ptr<const kx::Model> model, kx::Model::Load(path));
//   auto a = kx::Engine::Create(model, {});   // two sessions, one copy of the weights
//   auto b = kx::Engine::Create(model, {});
#pragma once

#include <memory>
#include <string>

#include "base/mapped_file.h"
#include "base/status.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"

namespace kx {

struct ModelOptions {
  // true: map the file (pages load on demand and are shared with the page
  // cache); false: read it all into an owned buffer of 2 MiB (transparent
  // huge) pages, through which decode streams the weights faster
  // (base/mapped_file.h).
  bool use_mmap = true;
  // With use_mmap: map it in 2 MiB pages where the kernel can (MappedFile::Mode::kMapHuge; a
  // freshly written file is dropped from the page cache once and read again for that).
  // KAIROX_HUGE_PAGES=0 turns it off everywhere.
  bool huge_pages = true;
  // Pin the weights in RAM (mlock). A failure, typically RLIMIT_MEMLOCK being
  // smaller than the file, is logged as a warning and loading goes on.
  bool mlock = false;
};

// One info log line on how `f` ended up in memory (its MappedFile::HugePages), if it was asked.
void LogHugePages(const MappedFile& f);

class Model {
 public:
  // Maps and validates `path`, reads the architecture, binds the weights and
  // builds the tokenizer. Fails with a message naming what is wrong.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(const std::string& path,
                                                           const ModelOptions& options = {});

  const std::string& path() const { return path_; }
  const GgufFile& gguf() const { return *file_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const LlamaHParams& hparams() const { return hp_; }
  const LlamaWeights& weights() const { return weights_; }
  // How the file is held, and whether mlock succeeded (options.mlock).
  bool mapped() const { return bytes_.mode() != MappedFile::Mode::kRead; }
  MappedFile::HugePages huge_pages() const { return bytes_.huge_pages(); }
  bool locked() const { return bytes_.locked(); }

  // Bytes of weights one decode step reads (every matrix once, one embedding row).
  uint64_t WeightBytesPerToken() const;
  // Floating point operations of one token's matrix products (attention excluded).
  double FlopsPerToken() const;
  // Parameters in the weight tensors.
  uint64_t ParameterCount() const;
  // Heap bytes of the model's tables: the tokenizer and the GGUF index (for
  // SmolLM2's 49k vocabulary about 8 MiB). Every session with a RAM budget is
  // charged for them ("model tables"), since none can run without them.
  uint64_t TableBytes() const;

 private:
  Model() = default;
  std::string path_;
  // The file's bytes (mapped or read). Declared before file_ so it outlives
  // the GgufFile and every WeightRef that points into it.
  MappedFile bytes_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  LlamaHParams hp_;
  LlamaWeights weights_;
};

}  // namespace kx
