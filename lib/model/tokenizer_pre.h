// Pre-tokenizers of byte-level BPE: split text into the words that BPE then
// encodes one by one. Hand-written matchers for the regexes the models name in
// `tokenizer.ggml.pre` (std::regex is slow and has no \p{L}).
//
//   std::vector<std::string_view> words;
//   PreTokenize(PreTokenizerKind::kSmolLM, "I'm 42", words);  // "I", "'m", " ", "4", "2"
#pragma once

#include <string_view>
#include <vector>

namespace kx {

enum class PreTokenizerKind {
  // GPT-2's regex:
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // SmolLM / StarCoder (HF: Sequence[Digits(individual_digits), ByteLevel(use_regex)]):
  // every numeric character (IsSplitDigit: \p{N} and a few newer code points)
  // is its own word; the GPT-2 regex then runs on each stretch between them
  // separately (so its lookahead stops at a digit).
  kSmolLM,
};

// Maps `tokenizer.ggml.pre` to a kind. "gpt2", "default" and "" are GPT-2;
// "smollm" (and "starcoder", the same split) are kSmolLM. Anything else logs a
// warning and falls back to GPT-2 (tokens may then differ from the reference).
PreTokenizerKind PreTokenizerFromName(std::string_view name);

// Appends the words of `text` to `dst` as views into `text`; their
// concatenation is exactly `text`. Invalid UTF-8 bytes are single characters
// of the "other" class (neither letter, number nor space). Never fails.
void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& dst);

}  // namespace kx
