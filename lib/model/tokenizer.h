// Text <-> token ids for the models kairox runs. Byte-level BPE
// (`tokenizer.ggml.model = gpt2`) with the GPT-2, SmolLM, LLaMA-3 and Qwen2 pre-tokenizers,
// and SentencePiece-style vocabularies (`tokenizer.ggml.model = llama`:
// scores, "\u2581" for spaces, <0xNN> byte-fallback tokens).
//
//   KX_ASSIGN_OR_RETURN(auto tok, kx::Tokenizer::FromGguf(gguf));
//   std::vector<int32_t> ids = tok->Encode(prompt, /*add_special=*/true, /*parse_special=*/true);
//   kx::Utf8Stream stream;
//   for (int32_t id : generated) std::cout << stream.Push(tok->TokenToPiece(id, false));
//   std::cout << stream.Flush();
//
// Thread-safety: a Tokenizer is immutable after construction; all const
// methods may be called concurrently. Utf8Stream is not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/status.h"
#include "model/tokenizer_pre.h"

namespace kx {

class GgufFile;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // e.g. <|im_start|>: matched in text only when parse_special
  kUserDefined = 4,  // matched in text always (like HF's non-special added tokens)
  kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer is built from, as plain data (what the GGUF keys
// `tokenizer.ggml.*` hold). Ids of -1 mean "none".
struct TokenizerData {
  std::string model = "gpt2";          // tokenizer.ggml.model: "gpt2" or "llama" (SentencePiece)
  std::string pre = "default";         // tokenizer.ggml.pre (gpt2 only)
  std::vector<std::string> tokens;     // vocabulary, as spelled in the file ("Ġthe", "\u2581the")
  std::vector<TokenType> token_types;  // empty: all normal
  std::vector<std::string> merges;     // gpt2: "left right", highest priority first
  std::vector<float> scores;           // llama: merge priority per token (higher first); empty: 0
  bool add_space_prefix = false;       // llama: a space before the first text (after specials)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
};

// Which encoding algorithm a vocabulary uses.
enum class TokenizerModel {
  kBytePairGpt2,   // "gpt2": pre-tokenize, then merges by rank over byte-level symbols
  kSentencePiece,  // "llama": merges by the score of the merged piece over UTF-8 characters,
                   // characters without a piece fall back to <0xNN> byte tokens
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file. gpt2: add_bos_token defaults to
  // false (GPT-2-style vocabularies do not prepend BOS). llama: add_bos_token
  // and add_space_prefix default to true, and absent bos/eos/unknown ids to
  // 1/2/0 (what llama.cpp assumes for SentencePiece files).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& f);
  // Validates `d` (ids in range, known model, array sizes) and builds the lookup tables.
  // Merges naming tokens that are not in the vocabulary are skipped with one
  // warning.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromData(TokenizerData d);

  // add_special: prepend BOS if the model says add_bos (append EOS if
  // add_eos). parse_special: control-token text such as "<|im_start|>" becomes
  // that token; otherwise it is tokenized as plain text. User-defined tokens
  // are always recognised. Any bytes are accepted: invalid UTF-8 bytes become
  // their byte tokens, so Decode(Encode(x)) == x -- except for byte values the
  // vocabulary has no token for (SmolLM2 lacks 21, e.g. 0x1D, 0xC0, 0xF5..0xFF):
  // those become the unknown token when it is not a control token, and are
  // dropped otherwise (what HF's BPE does; SmolLM2's unk is <|endoftext|>).
  // SentencePiece: spaces become U+2581; with add_space_prefix, a space is put
  // before the text and before each stretch of text after a special token
  // (llama.cpp's rule); characters the vocabulary lacks become byte tokens.
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for (may be a partial UTF-8 sequence). Control
  // tokens give their text when render_special, else "". Out-of-range ids give "".
  // SentencePiece pieces have U+2581 turned back into spaces (the prefix space
  // included: " Once"); byte tokens give their byte.
  std::string TokenToPiece(int32_t id, bool render_special = true) const;
  // Concatenated pieces (raw bytes; use Utf8Stream or check validity to print).
  // SentencePiece with add_space_prefix: the first piece that gives any text
  // (after a hidden BOS) loses one leading space, so Decode(Encode(x)) == x
  // for text without special tokens.
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  TokenizerModel model() const { return model_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // The SentencePiece score of a token (0 for gpt2 and out-of-range ids).
  float score(int32_t id) const;
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t pad_id() const { return pad_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  PreTokenizerKind pre_tokenizer() const { return pre_; }
  // True for EOS, EOT and the control tokens <|im_end|>, <|endoftext|>, <|eot_id|>,
  // <end_of_turn> (Gemma).
  bool IsEndOfGeneration(int32_t id) const;
  // TokenType::kUndefined for out-of-range ids.
  TokenType token_type(int32_t id) const;

  // The id of a vocabulary entry, spelled as the vocabulary spells it
  // ("Ġthe", "<|im_end|>").
  std::optional<int32_t> TokenId(std::string_view token_text) const;
  // The vocabulary spelling of an id ("" when out of range).
  std::string_view TokenText(int32_t id) const;

  // Heap bytes of this tokenizer's tables (vocabulary, decoded pieces, the id
  // and merge maps): what a session's RAM budget charges for it.
  uint64_t HeapBytes() const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  Tokenizer() = default;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // Appends the BPE encoding of one pre-tokenized word.
  void EncodeWord(std::string_view word, std::vector<int32_t>& dst) const;
  // Appends the ids of plain text (no special tokens in it). space_prefix:
  // SentencePiece's add_space_prefix applies to this stretch.
  void EncodeText(std::string_view text, bool space_prefix, std::vector<int32_t>& dst) const;
  // SentencePiece encoding of one stretch of plain text (tokenizer_spm.cc).
  void EncodeSpm(std::string_view text, bool space_prefix, std::vector<int32_t>& dst) const;
  // Whether a SentencePiece merge may produce (or the output may use) token `id`.
  bool IsSpmPiece(int32_t id) const;
  // SentencePiece set-up in FromData: pieces and byte tokens (tokenizer_spm.cc).
  void InitSpm();
  // The special token whose text starts at text[pos], longest first, or -1.
  int32_t MatchSpecial(std::string_view text, size_t pos, bool parse_special) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;  // decoded bytes per id
  std::vector<float> scores_;        // SentencePiece only
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // token of each single byte, -1 if none
  // Control and user-defined tokens by first byte, longest first.
  std::array<std::vector<int32_t>, 256> specials_by_byte_;
  std::vector<int32_t> end_of_generation_;
  PreTokenizerKind pre_ = PreTokenizerKind::kGpt2;
  int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, unk_id_ = -1, pad_id_ = -1;
  int32_t missing_byte_id_ = -1;  // what a byte without a token encodes as; -1: dropped
  bool add_bos_ = false, add_eos_ = false;
  bool add_space_prefix_ = false;
  TokenizerModel model_ = TokenizerModel::kBytePairGpt2;
};

// Turns a stream of token pieces into complete UTF-8 characters, for printing
// generated text token by token: bytes of a character split across pieces are
// held back until the character is complete. Invalid bytes come out as U+FFFD
// as soon as they are known to be invalid.
class Utf8Stream {
 public:
  // The complete characters available after appending `bytes`.
  std::string Push(std::string_view bytes);
  // Whatever is held back, as U+FFFD (an incomplete sequence at the end); resets.
  std::string Flush();

 private:
  std::string pending_;  // an incomplete sequence, at most 3 bytes
};

}  // namespace kx
