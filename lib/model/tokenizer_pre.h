// Pre-tokenizers of byte-level BPE: split text into the words that BPE then
// encodes one by one. Hand-written matchers for the regexes the models name in
// `tokenizer.ggml.pre` (std::regex is slow and has no \p{L}).
//
//   std::vector<std::string_view> words;
//   PreTokenize(PreTokenizerKind::kSmolLM, "I'm 42", words);  // "I", "'m", " ", "4", "2"
//   PreTokenize(PreTokenizerFromName("llama-bpe"), "I'LL 1234", words);
//   // "I", "'LL", " ", "123", "4"
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
  // LLaMA-3 (HF: Split(regex, Isolated) then ByteLevel(use_regex=false)):
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // Unlike GPT-2: contractions in any case ('LL; also 'ſ, which folds to 's),
  // any one non-letter, non-digit character other than CR/LF leads a word
  // ("(foo", "\tfoo"), digits in groups of up to three, punctuation keeps the
  // line breaks after it, and whitespace up to the last line break is a word.
  kLlama3,
  // Qwen2: the LLaMA-3 regex with \p{N} (one digit per word) for \p{N}{1,3}.
  kQwen2,
};

// Maps `tokenizer.ggml.pre` to a kind. "gpt2", "default" and "" are GPT-2;
// "smollm" (and "starcoder", the same split) are kSmolLM; "llama-bpe" and
// "llama3" are kLlama3; "qwen2" is kQwen2. Anything else logs a warning that
// lists the known names and falls back to GPT-2 (tokens may then differ from
// the reference).
PreTokenizerKind PreTokenizerFromName(std::string_view name);

// The canonical name of a kind: "gpt2", "smollm", "llama-bpe", "qwen2".
std::string_view PreTokenizerName(PreTokenizerKind kind);

// Appends the words of `text` to `dst` as views into `text`; their
// concatenation is exactly `text`. Invalid UTF-8 bytes are single characters
// of the "other" class (neither letter, number nor space). Never fails.
void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& dst);

}  // namespace kx
