// Byte-level BPE on small made-up vocabularies: merge order, byte fallback,
// special tokens, streaming decode, robustness to invalid UTF-8.
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/tokenizer.h"
#include "model/unicode.h"
#include "test_util.h"

namespace kx {
namespace {

// The byte-level spelling of raw bytes ("a b" -> "aĠb").
std::string Spell(std::string_view raw) {
  std::string dst;
  for (char c : raw) AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(c)), dst);
  return dst;
}

// Ids 0..255: the byte tokens (id == byte value); then `extra` normal tokens
// (raw text), then specials.
struct Vocab {
  TokenizerData data;
  int32_t Add(std::string raw, TokenType type = TokenType::kNormal) {
    data.tokens.push_back(type == TokenType::kNormal ? Spell(raw) : raw);
    data.token_types.push_back(type);
    return static_cast<int32_t>(data.tokens.size()) - 1;
  }
  void Merge(std::string_view left, std::string_view right) {
    data.merges.push_back(Spell(left) + " " + Spell(right));
  }
};

Vocab ByteVocab() {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.Add(std::string(1, static_cast<char>(b)));
  return v;
}

std::unique_ptr<Tokenizer> Build(TokenizerData d) {
  auto t = Tokenizer::FromData(std::move(d));
  REQUIRE(t.ok());
  return std::move(t).value();
}

using Ids = std::vector<int32_t>;

TEST_CASE("merges apply lowest rank first", "[bpe]") {
  Vocab v = ByteVocab();
  const int32_t ab = v.Add("ab"), bc = v.Add("bc");
  Vocab w = v;  // same vocabulary, opposite merge priorities
  v.Merge("a", "b");
  v.Merge("b", "c");
  w.Merge("b", "c");
  w.Merge("a", "b");
  CHECK(Build(v.data)->Encode("abc", false, false) == Ids{ab, 'c'});
  CHECK(Build(w.data)->Encode("abc", false, false) == Ids{'a', bc});
}

TEST_CASE("merges chain and ties go to the leftmost pair", "[bpe]") {
  Vocab v = ByteVocab();
  const int32_t aa = v.Add("aa"), aaaa = v.Add("aaaa");
  v.Merge("a", "a");
  v.Merge("aa", "aa");
  auto t = Build(v.data);
  CHECK(t->Encode("aaa", false, false) == Ids{aa, 'a'});
  CHECK(t->Encode("aaaaa", false, false) == Ids{aaaa, 'a'});
  CHECK(t->Encode("aaaaaa", false, false) == Ids{aaaa, aa});
}

TEST_CASE("merges do not cross pre-tokenizer words", "[bpe]") {
  Vocab v = ByteVocab();
  const int32_t sp_w = v.Add(" w"), lo = v.Add("lo");
  v.Merge(" ", "w");
  v.Merge("l", "o");
  v.Merge("o", " ");  // would join "lo" and " w" if words were ignored
  v.Add("o ");
  auto t = Build(v.data);
  CHECK(t->Encode("lo wo", false, false) == Ids{lo, sp_w, 'o'});
}

TEST_CASE("bytes without merges fall back to byte tokens", "[bpe]") {
  auto t = Build(ByteVocab().data);
  const std::string emoji = "\xF0\x9F\x98\x80";
  CHECK(t->Encode(emoji, false, false) == Ids{0xF0, 0x9F, 0x98, 0x80});
  CHECK(t->Decode(t->Encode(emoji, false, false)) == emoji);
  CHECK(t->TokenToPiece(0xF0) == "\xF0");  // a partial UTF-8 sequence
}

TEST_CASE("bytes the vocabulary lacks: unknown token, or dropped if unk is control", "[bpe]") {
  Vocab v = ByteVocab();
  v.data.tokens[0xFF] = "<unused-ff>";  // no token spells byte 0xFF any more
  const int32_t unk = v.Add("<unk>", TokenType::kUnknown);
  const int32_t eot = v.Add("<|endoftext|>", TokenType::kControl);
  v.data.unk_id = unk;
  CHECK(Build(v.data)->Encode("a\xFF"
                              "b\xFF",
                              false, false) == Ids{'a', unk, 'b', unk});
  v.data.unk_id = eot;
  CHECK(Build(v.data)->Encode("a\xFF"
                              "b\xFF",
                              false, false) == Ids{'a', 'b'});
  v.data.unk_id = -1;
  CHECK(Build(v.data)->Encode("\xFF", false, false).empty());
  // A dropped byte does not keep its neighbours apart (HF drops it before merging).
  const int32_t bang_q = v.Add("!?");
  v.Merge("!", "?");
  CHECK(Build(v.data)->Encode("!\xFF?", false, false) == Ids{bang_q});  // one pre-token
}

TEST_CASE("invalid UTF-8 never crashes and round-trips", "[bpe]") {
  Vocab v = ByteVocab();
  v.Add("ab");
  v.Merge("a", "b");
  const int32_t im = v.Add("<|im_start|>", TokenType::kControl);
  (void)im;
  auto t = Build(v.data);
  auto rng = test::SeededRng(11);
  for (int iter = 0; iter < 300; ++iter) {
    std::string text(rng() % 64, '\0');
    for (char& c : text)
      c = static_cast<char>("ab<|\xF0\x9F\x80\xC3 1"[rng() % 10] ^
                            (rng() % 5 == 0 ? rng() & 0xFF : 0));
    const Ids ids = t->Encode(text, false, false);
    for (int32_t id : ids) REQUIRE((id >= 0 && id < t->n_vocab()));
    REQUIRE(t->Decode(ids) == text);
  }
  CHECK(t->Encode("\xFF\xFE", false, true) == Ids{0xFF, 0xFE});
}

Vocab SpecialVocab(int32_t* im_start, int32_t* im_end, int32_t* tool, int32_t* bos) {
  Vocab v = ByteVocab();
  *im_start = v.Add("<|im_start|>", TokenType::kControl);
  *im_end = v.Add("<|im_end|>", TokenType::kControl);
  *tool = v.Add("<tool>", TokenType::kUserDefined);
  *bos = v.Add("<s>", TokenType::kControl);
  v.data.bos_id = *bos;
  v.data.eos_id = *im_end;
  return v;
}

TEST_CASE("special tokens are parsed only when asked; user-defined always", "[special]") {
  int32_t im_start, im_end, tool, bos;
  auto t = Build(SpecialVocab(&im_start, &im_end, &tool, &bos).data);
  const std::string text = "<|im_start|>x<tool><|im_end|>";
  CHECK(t->Encode(text, false, true) == Ids{im_start, 'x', tool, im_end});
  Ids literal = t->Encode(text, false, false);
  CHECK(literal.size() > 4);
  CHECK(std::count(literal.begin(), literal.end(), tool) == 1);
  CHECK(std::count(literal.begin(), literal.end(), im_start) == 0);
  CHECK(t->Decode(literal) == text);
  // A partial special token is plain text.
  CHECK(t->Encode("<|im_start", false, true).size() == std::string("<|im_start").size());
  // Rendering: control tokens vanish unless render_special.
  const Ids ids = t->Encode(text, false, true);
  CHECK(t->Decode(ids, true) == text);
  CHECK(t->Decode(ids, false) == "x<tool>");
  CHECK(t->TokenToPiece(im_end, false).empty());
  CHECK(t->TokenToPiece(im_end, true) == "<|im_end|>");
  CHECK(t->TokenToPiece(-1).empty());
  CHECK(t->TokenToPiece(t->n_vocab()).empty());
}

TEST_CASE("longest special token wins at a position", "[special]") {
  Vocab v = ByteVocab();
  const int32_t short_tok = v.Add("<a>", TokenType::kControl);
  const int32_t long_tok = v.Add("<a>b", TokenType::kControl);
  auto t = Build(v.data);
  CHECK(t->Encode("<a>b<a>", false, true) == Ids{long_tok, short_tok});
}

TEST_CASE("add_special honours add_bos and add_eos", "[special]") {
  int32_t im_start, im_end, tool, bos;
  Vocab v = SpecialVocab(&im_start, &im_end, &tool, &bos);
  CHECK(Build(v.data)->Encode("x", true, true) == Ids{'x'});  // add_bos false by default
  v.data.add_bos = true;
  v.data.add_eos = true;
  auto t = Build(v.data);
  CHECK(t->Encode("x", true, true) == Ids{bos, 'x', im_end});
  CHECK(t->Encode("x", false, true) == Ids{'x'});
  CHECK(t->Encode("", true, true) == Ids{bos, im_end});
}

TEST_CASE("end of generation: eos and end-of-turn control tokens", "[special]") {
  int32_t im_start, im_end, tool, bos;
  Vocab v = SpecialVocab(&im_start, &im_end, &tool, &bos);
  v.data.eos_id = bos;  // make <|im_end|> count only through its name
  const int32_t eot = v.Add("<|endoftext|>", TokenType::kControl);
  const int32_t fake = v.Add("<|eot_id|>", TokenType::kNormal);  // not control: not an end
  auto t = Build(v.data);
  CHECK(t->IsEndOfGeneration(bos));
  CHECK(t->IsEndOfGeneration(im_end));
  CHECK(t->IsEndOfGeneration(eot));
  CHECK_FALSE(t->IsEndOfGeneration(fake));
  CHECK_FALSE(t->IsEndOfGeneration(im_start));
  CHECK_FALSE(t->IsEndOfGeneration('x'));
  CHECK_FALSE(t->IsEndOfGeneration(-1));
  CHECK(t->TokenId("<|im_end|>") == im_end);
  CHECK(t->TokenId(Spell(" ")) == ' ');
  CHECK_FALSE(t->TokenId("nope").has_value());
}

TEST_CASE("digits are split one by one with the smollm pre-tokenizer", "[bpe]") {
  Vocab v = ByteVocab();
  const int32_t d20 = v.Add("20"), sp2 = v.Add(" 2");
  v.Merge(" ", "2");
  v.Merge("2", "0");
  Vocab s = v;
  s.data.pre = "smollm";
  CHECK(Build(v.data)->Encode(" 2020", false, false) == Ids{sp2, '0', d20});
  CHECK(Build(s.data)->Encode(" 2020", false, false) == Ids{' ', '2', '0', '2', '0'});
}

TEST_CASE("FromData rejects inconsistent data", "[bpe]") {
  Vocab v = ByteVocab();
  TokenizerData d = v.data;
  d.model = "bert";  // WordPiece: not supported
  CHECK(Tokenizer::FromData(d).status().code() == absl::StatusCode::kUnimplemented);
  d = v.data;
  d.eos_id = 256;
  CHECK(Tokenizer::FromData(d).status().code() == absl::StatusCode::kInvalidArgument);
  d = v.data;
  d.token_types.pop_back();
  CHECK(Tokenizer::FromData(d).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Tokenizer::FromData(TokenizerData{}).status().code() == absl::StatusCode::kInvalidArgument);
  d = v.data;
  d.merges = {"", "x", "a", Spell("a") + " " + Spell("b")};  // malformed, or no "ab" token
  CHECK(Tokenizer::FromData(d).ok());                        // skipped with a warning
}

TEST_CASE("Utf8Stream holds back split characters", "[stream]") {
  const std::string emoji = "\xF0\x9F\x98\x80";
  Utf8Stream s;
  std::string out;
  for (size_t i = 0; i < emoji.size(); ++i) {
    const std::string got = s.Push(emoji.substr(i, 1));
    if (i + 1 < emoji.size()) CHECK(got.empty());
    out += got;
  }
  CHECK(out == emoji);
  CHECK(s.Flush().empty());

  Utf8Stream s2;
  CHECK(s2.Push("ab\xF0\x9F") == "ab");
  CHECK(s2.Push("\x98\x80"
                "c\xE4") == emoji + "c");
  CHECK(s2.Flush() == "\xEF\xBF\xBD");  // the incomplete 中 at the end
  CHECK(s2.Push("d") == "d");           // Flush reset the state
}

TEST_CASE("Utf8Stream replaces invalid bytes at once", "[stream]") {
  const std::string fffd = "\xEF\xBF\xBD";
  Utf8Stream s;
  CHECK(s.Push("\x80x") == fffd + "x");
  CHECK(s.Push("\xF0"
               "a") == fffd + "a");          // lead then a non-continuation
  CHECK(s.Push("\xED\xA0") == fffd + fffd);  // surrogate prefix: invalid already
  CHECK(s.Push("\xC3").empty());
  CHECK(s.Push("\xA9") == "\xC3\xA9");
  auto rng = test::SeededRng(5);
  for (int iter = 0; iter < 200; ++iter) {  // arbitrary bytes, arbitrary cuts
    std::string bytes(rng() % 32, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    Utf8Stream r;
    std::string out;
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t n = 1 + rng() % 4;
      out += r.Push(std::string_view(bytes).substr(pos, n));
      pos += n;
    }
    out += r.Flush();
    for (size_t pos = 0; pos < out.size();) {  // the output is valid UTF-8
      const Utf8Char c = DecodeUtf8(out, pos);
      REQUIRE(c.cp != kInvalidCodepoint);
      pos += c.len;
    }
  }
}

}  // namespace
}  // namespace kx
