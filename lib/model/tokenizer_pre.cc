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

constexpr uint32_t kLongS = 0x017F;  // ſ: case-folds to 's'
constexpr size_t kLlama3MaxDigits = 3;
constexpr size_t kQwen2MaxDigits = 1;

bool IsLineBreak(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Whether cp matches the ASCII lower-case letter `lower` case-insensitively,
// as the regex engine (Oniguruma, Unicode case folding) decides it: the
// upper-case letter too, and U+017F for 's' (no other code point folds to one
// of the contraction letters; checked exhaustively against `tokenizers`).
bool FoldsTo(uint32_t cp, char lower) {
  constexpr uint32_t kAsciiCaseBit = 0x20;
  const auto l = static_cast<uint32_t>(lower);
  return cp == l || cp == (l & ~kAsciiCaseBit) || (lower == 's' && cp == kLongS);
}

// Length in characters of the LLaMA-3 / Qwen2 regex match at chars[i]
// (i < end). The alternatives are tried in the regex's order: the first that
// matches wins, as in a backtracking engine.
size_t MatchLlama3(const std::vector<Char>& chars, size_t i, size_t end, size_t max_digits) {
  const auto cls = [&](size_t k) { return chars[k].cls; };
  const auto cp = [&](size_t k) { return chars[k].cp; };
  const auto run = [&](size_t k, CharClass c) {
    while (k < end && cls(k) == c) ++k;
    return k;
  };
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (cp(i) == '\'' && i + 1 < end) {
    const uint32_t a = cp(i + 1);
    if (FoldsTo(a, 's') || FoldsTo(a, 't') || FoldsTo(a, 'm') || FoldsTo(a, 'd')) return 2;
    if (i + 2 < end) {
      const uint32_t b = cp(i + 2);
      if (((FoldsTo(a, 'r') || FoldsTo(a, 'v')) && FoldsTo(b, 'e')) ||
          (FoldsTo(a, 'l') && FoldsTo(b, 'l'))) {
        return 3;
      }
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls(i) == CharClass::kLetter) return run(i, CharClass::kLetter) - i;
  if (cls(i) != CharClass::kNumber && !IsLineBreak(cp(i)) && i + 1 < end &&
      cls(i + 1) == CharClass::kLetter) {
    return run(i + 1, CharClass::kLetter) - i;
  }
  // \p{N}{1,max_digits}
  if (cls(i) == CharClass::kNumber) {
    size_t n = 1;
    while (n < max_digits && i + n < end && cls(i + n) == CharClass::kNumber) ++n;
    return n;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*": the line breaks after punctuation stay with it.
  const bool lead_space = cp(i) == ' ' && i + 1 < end && cls(i + 1) == CharClass::kOther;
  const size_t body = lead_space ? i + 1 : i;
  if (cls(body) == CharClass::kOther) {
    size_t k = run(body, CharClass::kOther);
    while (k < end && IsLineBreak(cp(k))) ++k;
    return k - i;
  }
  // Only whitespace is left. \s*[\r\n]+: the run up to its last line break.
  const size_t ws_end = run(i, CharClass::kSpace);
  for (size_t k = ws_end; k > i; --k) {
    if (IsLineBreak(cp(k - 1))) return k - i;
  }
  // \s+(?!\S): the run, minus its last character when a non-space follows
  // (that character leads the next word); \s+ for a single one.
  if (ws_end == end || ws_end - i == 1) return ws_end - i;
  return ws_end - i - 1;
}

// Appends the words of chars[begin, end), cut by `match` (the length in
// characters of the word at a position; the range is the whole input it sees).
template <typename Match>
void SplitWith(std::string_view text, const std::vector<Char>& chars, size_t begin, size_t end,
               const Match& match, std::vector<std::string_view>& dst) {
  const auto offset = [&](size_t k) { return k < chars.size() ? chars[k].offset : text.size(); };
  size_t i = begin;
  while (i < end) {
    const size_t n = match(i, end);
    dst.push_back(text.substr(offset(i), offset(i + n) - offset(i)));
    i += n;
  }
}

void SplitGpt2(std::string_view text, const std::vector<Char>& chars, size_t begin, size_t end,
               std::vector<std::string_view>& dst) {
  SplitWith(
      text, chars, begin, end, [&](size_t i, size_t e) { return MatchGpt2(chars, i, e); }, dst);
}

void SplitSmolLM(std::string_view text, const std::vector<Char>& chars,
                 std::vector<std::string_view>& dst) {
  // Numbers isolated first, then GPT-2 on each stretch in between.
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

struct NamedKind {
  std::string_view name;
  PreTokenizerKind kind;
};
// Every `tokenizer.ggml.pre` understood; the first name of a kind is its canonical one.
constexpr NamedKind kKnownNames[] = {
    {"gpt2", PreTokenizerKind::kGpt2},        {"default", PreTokenizerKind::kGpt2},
    {"smollm", PreTokenizerKind::kSmolLM},    {"starcoder", PreTokenizerKind::kSmolLM},
    {"llama-bpe", PreTokenizerKind::kLlama3}, {"llama3", PreTokenizerKind::kLlama3},
    {"qwen2", PreTokenizerKind::kQwen2},
};

}  // namespace

PreTokenizerKind PreTokenizerFromName(std::string_view name) {
  if (name.empty()) return PreTokenizerKind::kGpt2;
  for (const NamedKind& k : kKnownNames) {
    if (k.name == name) return k.kind;
  }
  std::string known;
  for (const NamedKind& k : kKnownNames) {
    if (!known.empty()) known += ", ";
    known += k.name;
  }
  Log().warn(
      "tokenizer: unknown pre-tokenizer '{}' (known: {}), using the GPT-2 split; tokens may "
      "differ from the model's reference tokenizer",
      std::string(name), known);
  return PreTokenizerKind::kGpt2;
}

std::string_view PreTokenizerName(PreTokenizerKind kind) {
  for (const NamedKind& k : kKnownNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>& dst) {
  std::vector<Char> chars;
  Decode(text, chars);
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      SplitGpt2(text, chars, 0, chars.size(), dst);
      return;
    case PreTokenizerKind::kSmolLM:
      SplitSmolLM(text, chars, dst);
      return;
    case PreTokenizerKind::kLlama3:
    case PreTokenizerKind::kQwen2: {
      const size_t max_digits =
          kind == PreTokenizerKind::kLlama3 ? kLlama3MaxDigits : kQwen2MaxDigits;
      SplitWith(
          text, chars, 0, chars.size(),
          [&](size_t i, size_t end) { return MatchLlama3(chars, i, end, max_digits); }, dst);
      return;
    }
  }
}

}  // namespace kx
