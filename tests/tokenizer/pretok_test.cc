// The LLaMA-3 and Qwen2 pre-tokenizers on hand-picked strings (each expected
// split checked against `tokenizers` with the models' regex), the names of
// `tokenizer.ggml.pre`, and properties over seeded random strings for every
// variant. tests/golden/tokenizer/pretok_goldens.json covers more strings.
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/tokenizer_pre.h"
#include "model/unicode.h"
#include "test_util.h"

namespace kx {
namespace {

using Words = std::vector<std::string>;

Words Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> words;
  PreTokenize(kind, text, words);
  return {words.begin(), words.end()};
}

constexpr PreTokenizerKind kAllKinds[] = {PreTokenizerKind::kGpt2, PreTokenizerKind::kSmolLM,
                                          PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2};

TEST_CASE("LLaMA-3 pre-tokenizer splits like its regex", "[pretok]") {
  const auto k = PreTokenizerKind::kLlama3;
  CHECK(Split(k, "1234567") == Words{"123", "456", "7"});
  CHECK(Split(k, "I'LL don'T") == Words{"I", "'LL", " don", "'T"});
  // A contraction only right at the apostrophe: " '" is punctuation first.
  CHECK(Split(k, "x 'S") == Words{"x", " '", "S"});
  // U+017F (long s) folds to 's' in the case-insensitive group.
  CHECK(Split(k, "'\u017Fx") == Words{"'\u017F", "x"});
  CHECK(Split(k, "'Rex 'vEx 'lLx") == Words{"'Re", "x", " '", "vEx", " '", "lLx"});
  // Whitespace up to the last line break is one word; the space before x leads it.
  CHECK(Split(k, "\n\n  x") == Words{"\n\n", " ", " x"});
  CHECK(Split(k, "  \n  \n x") == Words{"  \n  \n", " x"});
  CHECK(Split(k, "a \r\n b") == Words{"a", " \r\n", " b"});
  CHECK(Split(k, "\r\r\n \t") == Words{"\r\r\n", " \t"});
  // Punctuation takes the line breaks after it.
  CHECK(Split(k, "...!!?\n\nfoo") == Words{"...!!?\n\n", "foo"});
  // Any single non-letter, non-digit character but CR/LF leads a word.
  CHECK(Split(k, "\tfoo \u00A0bar (x") == Words{"\tfoo", " ", "\u00A0bar", " (", "x"});
  CHECK(Split(k, "\nfoo") == Words{"\n", "foo"});
  // A combining mark is not a letter: it leads the next letters.
  CHECK(Split(k, "a\u0301b") == Words{"a", "\u0301b"});
  CHECK(Split(k, "x  ") == Words{"x", "  "});
  CHECK(Split(k, "a\u0085\u0085b") == Words{"a", "\u0085", "\u0085b"});
  CHECK(Split(k, "''s") == Words{"''", "s"});
  CHECK(Split(k, "").empty());
}

TEST_CASE("Qwen2 pre-tokenizer: LLaMA-3's split with single digits", "[pretok]") {
  const auto k = PreTokenizerKind::kQwen2;
  CHECK(Split(k, "x=1234;") == Words{"x", "=", "1", "2", "3", "4", ";"});
  CHECK(Split(k, "DON'T 42\n\n") == Words{"DON", "'T", " ", "4", "2", "\n\n"});
  // U+0663 (Arabic-Indic three) and U+00B2 (superscript two) are \p{N}.
  CHECK(Split(k, "\u0663\u00B2") == Words{"\u0663", "\u00B2"});
}

TEST_CASE("pre-tokenizer names map to kinds", "[pretok]") {
  CHECK(PreTokenizerFromName("llama-bpe") == PreTokenizerKind::kLlama3);
  CHECK(PreTokenizerFromName("llama3") == PreTokenizerKind::kLlama3);
  CHECK(PreTokenizerFromName("qwen2") == PreTokenizerKind::kQwen2);
  CHECK(PreTokenizerFromName("starcoder") == PreTokenizerKind::kSmolLM);
  CHECK(PreTokenizerFromName("") == PreTokenizerKind::kGpt2);
  CHECK(PreTokenizerFromName("Qwen2") == PreTokenizerKind::kGpt2);  // names are exact; warns
  for (PreTokenizerKind kind : kAllKinds) {
    CHECK(PreTokenizerFromName(PreTokenizerName(kind)) == kind);
  }
  CHECK(PreTokenizerName(PreTokenizerKind::kLlama3) == "llama-bpe");
}

// Pieces of text that every split treats differently, plus random bytes.
std::string RandomText(std::mt19937_64& rng) {
  static const char* const kPieces[] = {
      "a",      "Z",          "'",      "s",      "S",      "ll",   "LL",   "\u017F", "t",
      "re",     "0",          "7",      "1234",   " ",      "  ",   "\t",   "\r",     "\n",
      "\r\n",   "\u00A0",     "\u3000", "!",      ".",      "(",    "_",    "\u4E2D", "\u00E9",
      "\u0301", "\U0001F600", "\u0663", "\u00B2", "\u2028", "\x0B", "\x1C",
  };
  constexpr size_t kNumPieces = sizeof(kPieces) / sizeof(kPieces[0]);
  constexpr uint64_t kMaxParts = 40;
  constexpr uint64_t kRandomByteOdds = 8;  // one part in 8 is an arbitrary byte
  std::string text;
  const uint64_t n = rng() % kMaxParts;
  for (uint64_t i = 0; i < n; ++i) {
    if (rng() % kRandomByteOdds == 0) {
      text.push_back(static_cast<char>(rng() & 0xFF));
    } else {
      text += kPieces[rng() % kNumPieces];
    }
  }
  return text;
}

bool AllNumbers(std::string_view word) {
  for (size_t pos = 0; pos < word.size();) {
    const Utf8Char c = DecodeUtf8(word, pos);
    if (c.cp == kInvalidCodepoint || !IsNumber(c.cp)) return false;
    pos += c.len;
  }
  return !word.empty();
}

size_t CountChars(std::string_view word) {
  size_t n = 0;
  for (size_t pos = 0; pos < word.size(); ++n) pos += DecodeUtf8(word, pos).len;
  return n;
}

TEST_CASE("every variant covers random input exactly", "[pretok][fuzz]") {
  auto rng = test::SeededRng(20261122);
  constexpr int kIterations = 3000;
  for (int iter = 0; iter < kIterations; ++iter) {
    const std::string text = RandomText(rng);
    for (PreTokenizerKind kind : kAllKinds) {
      INFO("kind " << PreTokenizerName(kind) << ", iteration " << iter);
      std::vector<std::string_view> words = {"sentinel"};
      PreTokenize(kind, text, words);
      REQUIRE(words.front() == "sentinel");  // appends, never clears
      std::string joined;
      for (size_t i = 1; i < words.size(); ++i) {
        REQUIRE_FALSE(words[i].empty());
        // Views into the text, in order.
        REQUIRE(words[i].data() == text.data() + joined.size());
        joined += words[i];
      }
      REQUIRE(joined == text);
    }
  }
}

TEST_CASE("Qwen2 is LLaMA-3 with digit groups split into single digits", "[pretok][fuzz]") {
  auto rng = test::SeededRng(3);
  constexpr int kIterations = 3000;
  constexpr size_t kLlama3MaxDigits = 3;
  for (int iter = 0; iter < kIterations; ++iter) {
    const std::string text = RandomText(rng);
    INFO("iteration " << iter);
    Words refined;
    for (const std::string& w : Split(PreTokenizerKind::kLlama3, text)) {
      if (!AllNumbers(w)) {
        refined.push_back(w);
        continue;
      }
      REQUIRE(CountChars(w) <= kLlama3MaxDigits);
      for (size_t pos = 0; pos < w.size();) {
        const int len = DecodeUtf8(w, pos).len;
        refined.push_back(w.substr(pos, len));
        pos += len;
      }
    }
    REQUIRE(refined == Split(PreTokenizerKind::kQwen2, text));
  }
}

}  // namespace
}  // namespace kx
