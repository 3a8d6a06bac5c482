#include "model/model.h"

#include "base/log.h"

namespace kx {
namespace {

template <typename Fn>
void ForEachMatrix(const LlamaWeights& w, Fn&& fn) {
  for (const auto& L : w.layers) {
    for (const WeightRef* wr : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      fn(*wr);
    }
  }
}

}  // namespace

void LogHugePages(const MappedFile& f) {
  switch (f.huge_pages()) {
    case MappedFile::HugePages::kYes:
      Log().info("{}: mapped in 2 MiB pages{}", f.path(),
                 f.recached() ? " (its 4 KiB pages were dropped from the page cache: the first "
                                "tokens read it again from storage)"
                              : "");
      break;
    case MappedFile::HugePages::kNo:
      Log().info(
          "{}: the page cache holds it in 4 KiB pages (the file system or kernel has no "
          "2 MiB folios for it); --no-mmap reads it into 2 MiB pages, decode is faster",
          f.path());
      break;
    case MappedFile::HugePages::kNotTried:
      break;
  }
}

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& path,
                                                         const ModelOptions& options) {
  std::shared_ptr<Model> m(new Model());
  m->path_ = path;
  const MappedFile::Mode mode = !options.use_mmap    ? MappedFile::Mode::kRead
                                : options.huge_pages ? MappedFile::Mode::kMapHuge
                                                     : MappedFile::Mode::kMap;
  KX_ASSIGN_OR_RETURN(m->bytes_, MappedFile::Open(path, mode));
  LogHugePages(m->bytes_);
  if (options.mlock) {
    // Not fatal: an unlocked model works, it may just page out under pressure.
    if (absl::Status locked = m->bytes_.Lock(); !locked.ok()) {
      Log().warn("{}; continuing without mlock", std::string(locked.message()));
    }
  }
  // The buffer never moves (moving a MappedFile moves the pointer, not the bytes).
  auto file = GgufFile::FromBuffer(m->bytes_.data(), m->bytes_.size());
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(path, ": ", file.status().message()));
  }
  m->file_ = std::make_unique<GgufFile>(*std::move(file));
  KX_ASSIGN_OR_RETURN(m->hp_, ReadLlamaHParams(*m->file_));
  KX_ASSIGN_OR_RETURN(m->weights_, BindLlamaWeights(*m->file_, m->hp_));
  KX_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromGguf(*m->file_));
  if (m->tokenizer_->n_vocab() != m->hp_.n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", m->tokenizer_->n_vocab(),
                                                   " tokens but the embedding has ", m->hp_.n_vocab,
                                                   " rows"));
  }
  return std::shared_ptr<const Model>(std::move(m));
}

uint64_t Model::WeightBytesPerToken() const {
  const LlamaWeights& w = weights_;
  uint64_t bytes = w.tok_embd.row_bytes + w.output_norm.bytes() + w.output.bytes();
  for (const auto& L : w.layers) bytes += L.attn_norm.bytes() + L.ffn_norm.bytes();
  ForEachMatrix(w, [&](const WeightRef& wr) { bytes += wr.bytes(); });
  return bytes;
}

double Model::FlopsPerToken() const {
  double flops = 2.0 * weights_.output.n_in * weights_.output.n_out;
  ForEachMatrix(weights_, [&](const WeightRef& wr) { flops += 2.0 * wr.n_in * wr.n_out; });
  return flops;
}

uint64_t Model::ParameterCount() const {
  uint64_t n = 0;
  for (const GgufTensorInfo& t : file_->tensors()) n += static_cast<uint64_t>(t.n_elements());
  return n;
}

uint64_t Model::TableBytes() const { return tokenizer_->HeapBytes() + file_->HeapBytes(); }

}  // namespace kx
