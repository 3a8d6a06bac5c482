// Tokenizer::FromGguf: reads the tokenizer.ggml.* keys into TokenizerData.
#include <algorithm>

#include "absl/strings/str_cat.h"

#include "model/gguf.h"
#include "model/tokenizer.h"

namespace kx {
namespace {

// SentencePiece ids when the file does not name them (llama.cpp's defaults).
constexpr int32_t kSpmUnkId = 0;
constexpr int32_t kSpmBosId = 1;
constexpr int32_t kSpmEosId = 2;

// An optional id key: `fallback` when absent; other errors (wrong type) propagate.
absl::StatusOr<int32_t> OptionalId(const GgufFile& f, std::string_view key, int32_t fallback) {
  if (!f.HasKey(key)) return fallback;
  KX_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v < -1 || v > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gguf: %s = %d is not a token id", std::string(key), v));
  }
  return static_cast<int32_t>(v);
}

absl::StatusOr<bool> OptionalBool(const GgufFile& f, std::string_view key, bool fallback) {
  if (!f.HasKey(key)) return fallback;
  return f.GetBool(key);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& f) {
  TokenizerData d;
  KX_ASSIGN_OR_RETURN(std::string_view model, f.GetString("tokenizer.ggml.model"));
  d.model = std::string(model);
  if (f.HasKey("tokenizer.ggml.pre")) {
    KX_ASSIGN_OR_RETURN(std::string_view pre, f.GetString("tokenizer.ggml.pre"));
    d.pre = std::string(pre);
  }
  KX_ASSIGN_OR_RETURN(GgufArray tokens, f.GetArray("tokenizer.ggml.tokens"));
  KX_ASSIGN_OR_RETURN(std::vector<std::string_view> token_views, tokens.ToStrings());
  // Every spelling is text the tokenizer matches and prints: an empty one
  // can never be produced by encoding, and one with a NUL is cut short by
  // every C string consumer (the C ABI's pieces among them).
  for (size_t i = 0; i < token_views.size(); ++i) {
    if (token_views[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: tokenizer.ggml.tokens[", i, "] is an empty string"));
    }
    if (token_views[i].find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: tokenizer.ggml.tokens[", i, "] contains a NUL byte"));
    }
  }
  d.tokens.assign(token_views.begin(), token_views.end());
  if (f.HasKey("tokenizer.ggml.token_type")) {
    KX_ASSIGN_OR_RETURN(GgufArray types, f.GetArray("tokenizer.ggml.token_type"));
    KX_ASSIGN_OR_RETURN(std::vector<int64_t> values, types.ToInts());
    d.token_types.reserve(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t v = values[i];
      if (v < static_cast<int64_t>(TokenType::kUndefined) ||
          v > static_cast<int64_t>(TokenType::kByte)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gguf: tokenizer.ggml.token_type[", i, "] = ", v, " is not a known token type (",
            static_cast<int>(TokenType::kUndefined), "..", static_cast<int>(TokenType::kByte),
            ")"));
      }
      d.token_types.push_back(static_cast<TokenType>(v));
    }
  }
  if (f.HasKey("tokenizer.ggml.merges")) {
    KX_ASSIGN_OR_RETURN(GgufArray merges, f.GetArray("tokenizer.ggml.merges"));
    KX_ASSIGN_OR_RETURN(std::vector<std::string_view> merge_views, merges.ToStrings());
    // "left right": two non-empty parts and one space (byte-level BPE spells
    // a space in a token as 'Ġ', so a token never holds one). A merge naming
    // a token the vocabulary lacks stays a warning (Tokenizer::FromData):
    // converters have written such files, and the merge can never apply.
    for (size_t i = 0; i < merge_views.size(); ++i) {
      const std::string_view m = merge_views[i];
      const size_t space = m.find(' ');
      if (space == std::string_view::npos || space == 0 || space + 1 == m.size() ||
          m.find(' ', space + 1) != std::string_view::npos || m.find('\0') != std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gguf: tokenizer.ggml.merges[", i, "] is not two tokens separated by one space"));
      }
    }
    d.merges.assign(merge_views.begin(), merge_views.end());
  }
  const bool spm = d.model == "llama";
  if (spm && f.HasKey("tokenizer.ggml.scores")) {
    KX_ASSIGN_OR_RETURN(GgufArray scores, f.GetArray("tokenizer.ggml.scores"));
    KX_ASSIGN_OR_RETURN(d.scores, scores.ToFloats());
  }
  // SentencePiece files may leave out the ids llama.cpp assumes for them.
  const int32_t n = static_cast<int32_t>(std::min<size_t>(d.tokens.size(), INT32_MAX));
  const auto spm_default = [&](int32_t id) { return spm && id < n ? id : -1; };
  KX_ASSIGN_OR_RETURN(d.bos_id,
                      OptionalId(f, "tokenizer.ggml.bos_token_id", spm_default(kSpmBosId)));
  KX_ASSIGN_OR_RETURN(d.eos_id,
                      OptionalId(f, "tokenizer.ggml.eos_token_id", spm_default(kSpmEosId)));
  KX_ASSIGN_OR_RETURN(d.eot_id, OptionalId(f, "tokenizer.ggml.eot_token_id", -1));
  KX_ASSIGN_OR_RETURN(d.unk_id,
                      OptionalId(f, "tokenizer.ggml.unknown_token_id", spm_default(kSpmUnkId)));
  KX_ASSIGN_OR_RETURN(d.pad_id, OptionalId(f, "tokenizer.ggml.padding_token_id", -1));
  // GPT-2-style vocabularies do not prepend BOS unless the file says so;
  // SentencePiece ones do, and put a space before the text.
  KX_ASSIGN_OR_RETURN(d.add_bos, OptionalBool(f, "tokenizer.ggml.add_bos_token", spm));
  KX_ASSIGN_OR_RETURN(d.add_space_prefix,
                      OptionalBool(f, "tokenizer.ggml.add_space_prefix", spm));
  KX_ASSIGN_OR_RETURN(d.add_eos, OptionalBool(f, "tokenizer.ggml.add_eos_token", false));
  return FromData(std::move(d));
}

}  // namespace kx
