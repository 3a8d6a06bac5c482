#include "model/tokenizer_pre.h"

#include <cstdint>
#include <string>

#include "base/log.h"
#include "model/unicode.h"

namespace kx {
namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// One decoded character of the text: where it starts and what class it is.
struct Char {
  uint32_t cp;
  uint64_t offset;  // byte offset in the text
  CharClass cls;
  bool split_digit;  // isolated by the Digits pre-tokenizer
};

CharClass Classify(uint32_t cp) {
  if (cp == kInvalidCodepoint) return CharClass::kOther;
  if (IsWhitespace(cp)) return CharClass::kSpace;
  if (IsLetter(cp)) return CharClass::kLetter;
  if (IsNumber(cp)) return CharClass::kNumber;
  return CharClass::kOther;
}

void Decode(std::string_view text, std::vector<Char>& chars) {
  chars.clear();
  chars.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char c = DecodeUtf8(text, pos);
    const bool valid = c.cp != kInvalidCodepoint;
    chars.push_back({c.cp, pos, Classify(c.cp), valid && IsSplitDigit(c.cp)});
    pos += c.len;
  }
}

// Length in characters of the GPT-2 regex match at chars[i] (i < end); the
// regex sees chars[begin, end) as the whole input.
size_t MatchGpt2(const std::vector<Char>& chars, size_t i, size_t end) {
  const auto cls = [&](size_t k) { return chars[k].cls; };
  const auto cp = [&](size_t k) { return chars[k].cp; };
  const auto run = [&](size_t k, CharClass c) {  // end of the run of class c from k
    while (k < end && cls(k) == c) ++k;
    return k;
  };
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, like the original regex).
  if (cp(i) == '\'' && i + 1 < end) {
    const uint32_t a = cp(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < end) {
      const uint32_t b = cp(i + 2);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional plain space, then
  // a run of one class. A space followed by whitespace falls through.
  const size_t body = (cp(i) == ' ' && i + 1 < end) ? i + 1 : i;
  if (cls(body) != CharClass::kSpace) return run(body, cls(body)) - i;
  // \s+(?!\S): the whitespace run, minus its last character when a
  // non-space follows (so that space can lead the next word) ...
  const size_t ws_end = run(i, CharClass::kSpace);
  if (ws_end == end) return ws_end - i;
  if (ws_end - i >= 2) return ws_end - i - 1;
  // ... and \s+ for a single whitespace character before a non-space.
  return ws_end - i;
}

void SplitGpt2(std::string_view text, const std::vector<Char>& chars, size_t begin, size_t end,
               std::vector<std::string_view>& dst) {
  const auto offset = [&](size_t k) { return k < chars.size() ? chars[k].offset : text.size(); };
  size_t i = begin;
  while (i < end) {
    const size_t n = MatchGpt2(chars, i, end);
    dst.push_back(text.substr(offset(i), offset(i + n) - offset(i)));
    i += n;
  }
}

}  // namespace

PreTokenizerKind PreTokenizerFromName(std::string_view name) {
  if (name.empty() || name == "default" || name == "gpt2") return PreTokenizerKind::kGpt2;
  if (name == "smollm" || name == "starcoder") return PreTokenizerKind::kSmolLM;
  Log().warn(
      "tokenizer: unknown pre-tokenizer '{}', using the GPT-2 split; tokens may differ "
      "from the model's reference tokenizer",
      std::string(name));
  return PreTokenizerKind::kGpt2;
}

void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& dst) {
  std::vector<Char> chars;
  Decode(text, chars);
  if (kind == PreTokenizerKind::kGpt2) {
    SplitGpt2(text, chars, 0, chars.size(), dst);
    return;
  }
  // kSmolLM: numbers isolated first, then GPT-2 on each stretch in between.
  size_t stretch = 0;
  for (size_t i = 0; i < chars.size(); ++i) {
    if (!chars[i].split_digit) continue;
    SplitGpt2(text, chars, stretch, i, dst);
    const size_t next = i + 1 < chars.size() ? chars[i + 1].offset : text.size();
    dst.push_back(text.substr(chars[i].offset, next - chars[i].offset));
    stretch = i + 1;
  }
  SplitGpt2(text, chars, stretch, chars.size(), dst);
}

}  // namespace kx
