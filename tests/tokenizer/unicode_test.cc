// UTF-8 decoding, code-point classes, the GPT-2 byte mapping and the
// pre-tokenizer splits.
#include "model/unicode.h"

#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/tokenizer_pre.h"
#include "test_util.h"

namespace kx {
namespace {

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> words;
  PreTokenize(kind, text, words);
  return {words.begin(), words.end()};
}

using Words = std::vector<std::string>;

TEST_CASE("DecodeUtf8 accepts valid sequences of every length", "[unicode]") {
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  std::vector<uint32_t> cps;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    cps.push_back(c.cp);
    pos += c.len;
  }
  CHECK(cps == std::vector<uint32_t>{'a', 0xE9, 0x4E2D, 0x1F600});
}

TEST_CASE("DecodeUtf8 turns each invalid byte into one invalid character", "[unicode]") {
  const char* bad[] = {
      "\x80",              // lone continuation
      "\xC0\x80",          // overlong NUL
      "\xE0\x80\xAF",      // overlong
      "\xED\xA0\x80",      // surrogate
      "\xF4\x90\x80\x80",  // > U+10FFFF
      "\xF5",              // invalid lead
      "\xE4\xB8",          // truncated
      "\xC3(",             // bad continuation
  };
  for (const char* s : bad) {
    const Utf8Char c = DecodeUtf8(s, 0);
    CAPTURE(s);
    CHECK(c.cp == kInvalidCodepoint);
    CHECK(c.len == 1);
  }
}

TEST_CASE("AppendUtf8 inverts DecodeUtf8", "[unicode]") {
  for (uint32_t cp : {0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFDu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(cp, s);
    const Utf8Char c = DecodeUtf8(s, 0);
    CHECK(c.cp == cp);
    CHECK(c.len == static_cast<int>(s.size()));
  }
}

TEST_CASE("code-point classes follow the general categories", "[unicode]") {
  CHECK(IsLetter('a'));
  CHECK(IsLetter(0xE9));          // é
  CHECK(IsLetter(0x4E2D));        // 中
  CHECK(IsLetter(0x0928));        // Devanagari NA
  CHECK_FALSE(IsLetter(0x0301));  // combining acute (Mn)
  CHECK_FALSE(IsLetter('1'));
  CHECK(IsNumber('7'));
  CHECK(IsNumber(0x0663));  // Arabic-Indic three (Nd)
  CHECK(IsNumber(0x00B2));  // superscript two (No)
  CHECK(IsNumber(0x216B));  // Roman numeral twelve (Nl)
  CHECK_FALSE(IsNumber('x'));
  CHECK(IsSplitDigit('0'));
  CHECK(IsSplitDigit(0x00BD));  // ½
  CHECK_FALSE(IsSplitDigit('a'));
  // Newer than HF's regex engine tables but numeric for its Digits splitter.
  CHECK(IsSplitDigit(0x16FF4));
  CHECK_FALSE(IsNumber(0x16FF4));
  CHECK(IsWhitespace(' '));
  CHECK(IsWhitespace('\n'));
  CHECK(IsWhitespace(0xA0));
  CHECK(IsWhitespace(0x3000));
  CHECK_FALSE(IsWhitespace(0x1C));  // not White_Space, though Python's isspace says so
  CHECK_FALSE(IsWhitespace(0x200B));
  CHECK_FALSE(IsLetter(kInvalidCodepoint));
}

TEST_CASE("GPT-2 byte mapping is a bijection onto printable code points", "[unicode]") {
  CHECK(ByteToCodepoint('!') == '!');
  CHECK(ByteToCodepoint(' ') == 0x120);   // Ġ
  CHECK(ByteToCodepoint('\n') == 0x10A);  // Ċ
  CHECK(ByteToCodepoint(0xAD) == 0x143);
  for (int b = 0; b < 256; ++b) {
    CAPTURE(b);
    CHECK(CodepointToByte(ByteToCodepoint(static_cast<uint8_t>(b))) == b);
  }
  CHECK(CodepointToByte(' ') == -1);
  CHECK(CodepointToByte(0x4E2D) == -1);
}

TEST_CASE("GPT-2 pre-tokenizer splits like the regex", "[pretok]") {
  const auto k = PreTokenizerKind::kGpt2;
  CHECK(Split(k, "Hello world") == Words{"Hello", " world"});
  CHECK(Split(k, "a  b") == Words{"a", " ", " b"});
  CHECK(Split(k, "hi\n\nthere  ") == Words{"hi", "\n", "\n", "there", "  "});
  CHECK(Split(k, "I'm 42!") == Words{"I", "'m", " 42", "!"});
  CHECK(Split(k, "they'll DON'T") == Words{"they", "'ll", " DON", "'", "T"});
  CHECK(Split(k, " \t x") == Words{" \t", " x"});
  CHECK(Split(k, "x \xE4\xB8\xAD\xE6\x96\x87") == Words{"x", " \xE4\xB8\xAD\xE6\x96\x87"});
  CHECK(Split(k, "a ...") == Words{"a", " ..."});
  CHECK(Split(k, "").empty());
}

TEST_CASE("SmolLM pre-tokenizer isolates every digit", "[pretok]") {
  const auto k = PreTokenizerKind::kSmolLM;
  CHECK(Split(k, "I'm 42!") == Words{"I", "'m", " ", "4", "2", "!"});
  CHECK(Split(k, "a 12 b") == Words{"a", " ", "1", "2", " b"});
  CHECK(Split(k, "x2024y") == Words{"x", "2", "0", "2", "4", "y"});
  // U+0663 and U+00B2 are numbers too, each its own word.
  CHECK(Split(k, "\xD9\xA3\xC2\xB2") == Words{"\xD9\xA3", "\xC2\xB2"});
  // The lookahead of \s+(?!\S) ends at a digit: the spaces stay one word.
  CHECK(Split(k, "a   1") == Words{"a", "   ", "1"});
}

TEST_CASE("pre-tokenizers cover the input exactly, whatever the bytes", "[pretok]") {
  auto rng = test::SeededRng(7);
  for (int iter = 0; iter < 500; ++iter) {
    std::string text(rng() % 40, '\0');
    for (char& c : text) c = static_cast<char>(rng() & 0xFF);
    for (auto kind : {PreTokenizerKind::kGpt2, PreTokenizerKind::kSmolLM}) {
      std::vector<std::string_view> words;
      PreTokenize(kind, text, words);
      std::string joined;
      for (auto w : words) {
        REQUIRE_FALSE(w.empty());
        joined += w;
      }
      REQUIRE(joined == text);
    }
  }
}

TEST_CASE("pre-tokenizer names", "[pretok]") {
  CHECK(PreTokenizerFromName("smollm") == PreTokenizerKind::kSmolLM);
  CHECK(PreTokenizerFromName("gpt2") == PreTokenizerKind::kGpt2);
  CHECK(PreTokenizerFromName("default") == PreTokenizerKind::kGpt2);
  CHECK(PreTokenizerFromName("no-such-pre") == PreTokenizerKind::kGpt2);  // warns
}

}  // namespace
}  // namespace kx
