// SentencePiece encoding on small made-up vocabularies: merge order by score,
// ties, byte fallback, the space marker and prefix, validation.
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/tokenizer.h"

namespace kx {
namespace {

constexpr std::string_view kMarker = "\xE2\x96\x81";  // U+2581
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
constexpr int32_t kFirstByte = 3;
constexpr int kByteValues = 256;

using Ids = std::vector<int32_t>;

// <unk>, <s>, </s>, then (with_bytes) <0x00>..<0xFF>; pieces added with Add.
struct SpmVocab {
  TokenizerData data;
  explicit SpmVocab(bool with_bytes = true, bool space_prefix = false) {
    data.model = "llama";
    data.add_space_prefix = space_prefix;
    data.bos_id = kBos;
    data.eos_id = kEos;
    data.unk_id = kUnk;
    Add("<unk>", 0, TokenType::kUnknown);
    Add("<s>", 0, TokenType::kControl);
    Add("</s>", 0, TokenType::kControl);
    for (int b = 0; with_bytes && b < kByteValues; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      Add(name, 0, TokenType::kByte);
    }
  }
  // `text` with ' ' spelled as U+2581.
  int32_t Add(std::string_view text, float score, TokenType type = TokenType::kNormal) {
    std::string spelled;
    for (char c : text) {
      if (c == ' ' && type == TokenType::kNormal) {
        spelled.append(kMarker);
      } else {
        spelled.push_back(c);
      }
    }
    data.tokens.push_back(spelled);
    data.scores.push_back(score);
    data.token_types.push_back(type);
    return static_cast<int32_t>(data.tokens.size()) - 1;
  }
  std::unique_ptr<Tokenizer> Build() const {
    auto t = Tokenizer::FromData(data);
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    return std::move(t).value();
  }
};

TEST_CASE("spm: the highest-scoring merge wins", "[spm]") {
  for (bool ab_first : {true, false}) {
    SpmVocab v;
    const int32_t a = v.Add("a", -1), b = v.Add("b", -2), c = v.Add("c", -3);
    const int32_t ab = v.Add("ab", ab_first ? -4 : -6), bc = v.Add("bc", ab_first ? -6 : -4);
    const auto t = v.Build();
    CHECK(t->model() == TokenizerModel::kSentencePiece);
    CHECK(t->Encode("abc", false, false) == (ab_first ? Ids{ab, c} : Ids{a, bc}));
    CHECK(t->Encode("cab", false, false) == Ids{c, ab});
    CHECK(t->Encode("b", false, false) == Ids{b});
  }
}

TEST_CASE("spm: ties go to the leftmost pair; merges chain", "[spm]") {
  SpmVocab v;
  const int32_t a = v.Add("a", -1);
  const int32_t aa = v.Add("aa", -2);
  const int32_t aaaa = v.Add("aaaa", -3);
  const auto t = v.Build();
  CHECK(t->Encode("aaa", false, false) == Ids{aa, a});
  CHECK(t->Encode("aaaa", false, false) == Ids{aaaa});
  CHECK(t->Encode("aaaaa", false, false) == Ids{aaaa, a});
  CHECK(t->Encode("aaaaaa", false, false) == Ids{aaaa, aa});
}

TEST_CASE("spm: a merge needs the whole piece, not a chain of merges", "[spm]") {
  // "abc" is a piece but neither "ab" nor "bc" is: BPE never reaches it.
  SpmVocab v;
  const int32_t a = v.Add("a", -1), b = v.Add("b", -1), c = v.Add("c", -1);
  v.Add("abc", 10);
  CHECK(v.Build()->Encode("abc", false, false) == Ids{a, b, c});
}

TEST_CASE("spm: merges never produce control, unknown, byte or unused tokens", "[spm]") {
  SpmVocab v;
  const int32_t a = v.Add("a", -1), b = v.Add("b", -1);
  v.Add("ab", 5, TokenType::kUnused);
  const int32_t x = v.Add("x", -1);
  v.Add("<0x41>", 0, TokenType::kNormal);  // a normal piece spelled like a byte token
  const auto t = v.Build();
  CHECK(t->Encode("ab", false, false) == Ids{a, b});
  CHECK(t->Encode("x", false, false) == Ids{x});
  // "A" is no piece: the byte token, not the normal piece spelled "<0x41>".
  CHECK(t->Encode("A", false, false) == Ids{kFirstByte + 'A'});
  CHECK(t->TokenToPiece(kFirstByte + 'A') == "A");
}

TEST_CASE("spm: spaces, the prefix and decoding", "[spm]") {
  SpmVocab v(/*with_bytes=*/true, /*space_prefix=*/true);
  const int32_t sp = v.Add(" ", -1), h = v.Add("h", -1), i = v.Add("i", -1);
  const int32_t sp_h = v.Add(" h", -2), sp_hi = v.Add(" hi", -3);
  const auto t = v.Build();
  CHECK(t->add_space_prefix());
  CHECK(t->Encode("hi", false, false) == Ids{sp_hi});
  CHECK(t->Encode("hi hi", false, false) == Ids{sp_hi, sp_hi});
  CHECK(t->Encode(" hi", false, false) == Ids{sp, sp_hi});
  CHECK(t->Encode("ih", false, false) == Ids{sp, i, h});
  CHECK(t->Encode("h ", false, false) == Ids{sp_h, sp});
  CHECK(t->TokenToPiece(sp_hi) == " hi");
  CHECK(t->TokenText(sp_hi) == std::string(kMarker) + "hi");
  for (std::string_view text : {"hi", " hi", "  hi ", "ih h", "", " "}) {
    INFO("text '" << text << "'");
    CHECK(t->Decode(t->Encode(text, false, false)) == text);
    CHECK(t->Decode(t->Encode(text, true, false)) == text);
  }
  // Without the prefix flag no space is added and none is stripped.
  SpmVocab w(true, false);
  const int32_t wh = w.Add("h", -1), wsp_h = w.Add(" h", -2);
  const auto u = w.Build();
  CHECK(u->Encode("h h", false, false) == Ids{wh, wsp_h});
  CHECK(u->Decode(Ids{wsp_h}) == " h");
}

TEST_CASE("spm: without byte tokens unknown characters become <unk>", "[spm]") {
  SpmVocab v(/*with_bytes=*/false);
  const int32_t a = v.Add("a", -1);
  const auto t = v.Build();
  CHECK(t->Encode("a\xC3\xA9" "a", false, false) == Ids{a, kUnk, kUnk, a});
}

TEST_CASE("spm: control tokens split the text when parse_special", "[spm]") {
  SpmVocab v(true, true);
  const int32_t sp_a = v.Add(" a", -1);
  v.Add(" ", -2);
  v.Add("a", -2);
  v.data.add_bos = true;
  const auto t = v.Build();
  CHECK(t->Encode("a</s>a", true, true) == Ids{kBos, sp_a, kEos, sp_a});
  CHECK(t->Encode("a</s>a", false, true) == Ids{sp_a, kEos, sp_a});
  CHECK(t->Encode("</s>", false, true) == Ids{kEos});
  // Only the first prefix space is stripped (as llama.cpp decodes).
  CHECK(t->Decode(Ids{kBos, sp_a, kEos, sp_a}) == "a a");
  CHECK(t->Decode(Ids{kBos, sp_a, kEos, sp_a}, true) == "<s> a</s> a");
  // A text that already starts with BOS (as chat templates write it) gets one, not two.
  CHECK(t->Encode("<s>a", true, true) == Ids{kBos, sp_a});
  CHECK(t->Encode("<s>a", false, true) == Ids{kBos, sp_a});
}

TEST_CASE("spm: validation", "[spm]") {
  SpmVocab v;
  v.Add("a", -1);
  TokenizerData bad = v.data;
  bad.scores.pop_back();
  CHECK(Tokenizer::FromData(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = v.data;
  bad.scores.clear();  // allowed: all scores 0
  CHECK(Tokenizer::FromData(bad).ok());
  bad = v.data;
  bad.model = "bert";
  CHECK(Tokenizer::FromData(bad).status().code() == absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kx
