// SentencePiece tokenizer on llama2.c's 512-token vocabulary (stories260K's
// tok512.bin, from KAIROX_SHARED_DATA), written into a GGUF with GgufWriter
// and read back through Tokenizer::FromGguf, checked against the goldens the
// real `sentencepiece` library produced (tests/golden/make_token_goldens.py).
#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kx {
namespace {

constexpr int32_t kTok512Vocab = 512;
constexpr int32_t kUnkId = 0;
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kFirstByteId = 3;  // <0x00>..<0xFF> follow the three specials
constexpr size_t kByteTokenCount = 256;
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

// llama2.c's format: int32 max_token_length, then per token float score,
// int32 length, bytes. Its exporter wrote ' ' for U+2581 and "\n<s>\n",
// "\n</s>\n" for BOS/EOS; undone here to get the spelling a GGUF holds.
Vocab ReadTok512() {
  const std::string path = test::EnvOr("KAIROX_SHARED_DATA", "") + "/models/tok512.bin";
  if (test::EnvOr("KAIROX_SHARED_DATA", "").empty()) test::Skip("KAIROX_SHARED_DATA is not set");
  std::ifstream in(path, std::ios::binary);
  if (!in) test::Skip("missing " + path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  Vocab v;
  size_t pos = sizeof(int32_t);
  while (pos + sizeof(float) + sizeof(int32_t) <= bytes.size()) {
    float score;
    int32_t len;
    std::memcpy(&score, bytes.data() + pos, sizeof(score));
    std::memcpy(&len, bytes.data() + pos + sizeof(score), sizeof(len));
    pos += sizeof(score) + sizeof(len);
    REQUIRE(len >= 0);
    REQUIRE(pos + static_cast<size_t>(len) <= bytes.size());
    std::string text(bytes.data() + pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    const auto id = static_cast<int32_t>(v.tokens.size());
    TokenType type = TokenType::kNormal;
    if (id == kUnkId) {
      type = TokenType::kUnknown;
    } else if (id == kBosId || id == kEosId) {
      type = TokenType::kControl;
      text = text.substr(1, text.size() - 2);  // "\n<s>\n" -> "<s>"
    } else if (id < kFirstByteId + static_cast<int32_t>(kByteTokenCount)) {
      type = TokenType::kByte;
    } else {
      std::string spelled;
      for (char c : text) {
        if (c == ' ') {
          spelled.append(kSpaceMarker);
        } else {
          spelled.push_back(c);
        }
      }
      text = spelled;
    }
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(static_cast<int32_t>(type));
  }
  REQUIRE(v.tokens.size() == static_cast<size_t>(kTok512Vocab));
  return v;
}

// The GGUF leaves out bos/eos/unk ids, add_bos_token and add_space_prefix,
// so the SentencePiece defaults are exercised too. The tokenizer copies what
// it needs: the file bytes can go.
const Tokenizer& GetTok512() {
  static Tokenizer* t = [] {
    const Vocab v = ReadTok512();
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetArrayString("tokenizer.ggml.tokens", v.tokens);
    w.SetArrayF32("tokenizer.ggml.scores", v.scores);
    w.SetArrayI32("tokenizer.ggml.token_type", v.types);
    auto buf = w.WriteToBuffer();
    REQUIRE(buf.ok());
    auto f = GgufFile::FromBuffer(buf->data(), buf->size());
    INFO(f.status().ToString());
    REQUIRE(f.ok());
    auto tok = Tokenizer::FromGguf(*f);
    INFO(tok.status().ToString());
    REQUIRE(tok.ok());
    return std::move(tok).value().release();
  }();
  return *t;
}

nlohmann::json LoadGolden(const std::string& name) {
  const std::string path =
      test::EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/tokenizer/" + name;
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

using Ids = std::vector<int32_t>;

TEST_CASE("tok512: SentencePiece defaults from the GGUF", "[spm]") {
  const Tokenizer& t = GetTok512();
  CHECK(t.model() == TokenizerModel::kSentencePiece);
  CHECK(t.n_vocab() == kTok512Vocab);
  CHECK(t.bos_id() == kBosId);
  CHECK(t.eos_id() == kEosId);
  CHECK(t.add_bos());
  CHECK(t.add_space_prefix());
  CHECK(t.token_type(kFirstByteId + 'A') == TokenType::kByte);
  CHECK(t.TokenToPiece(kFirstByteId + 'A') == "A");
  CHECK(t.TokenToPiece(kFirstByteId + 0xFF) == "\xFF");
  CHECK(t.TokenToPiece(kBosId, false).empty());
  CHECK(t.TokenToPiece(kBosId, true) == "<s>");
  CHECK(t.IsEndOfGeneration(kEosId));
  CHECK(t.score(kTok512Vocab - 1) < t.score(kFirstByteId + kByteTokenCount));
}

TEST_CASE("tok512: encodings match sentencepiece", "[spm][golden]") {
  const Tokenizer& t = GetTok512();
  const nlohmann::json golden = LoadGolden("tok512_tokens.json");
  REQUIRE(golden["cases"].size() > 200);
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const Ids expected = c["ids"].get<Ids>();
    INFO("text: " << text);
    const Ids ids = t.Encode(text, /*add_special=*/false, /*parse_special=*/false);
    CHECK(ids == expected);
    if (c["roundtrip"].get<bool>()) CHECK(t.Decode(ids) == text);
  }
}

TEST_CASE("tok512: BOS, specials and the space prefix", "[spm]") {
  const Tokenizer& t = GetTok512();
  const Ids hello = t.Encode("Hello", false, false);
  REQUIRE(!hello.empty());
  CHECK(t.TokenToPiece(hello[0])[0] == ' ');  // the prefix space
  Ids with_bos = {kBosId};
  with_bos.insert(with_bos.end(), hello.begin(), hello.end());
  CHECK(t.Encode("Hello", true, false) == with_bos);
  CHECK(t.Decode(with_bos) == "Hello");
  CHECK(t.Decode(with_bos, /*render_special=*/true) == "<s> Hello");
  CHECK(t.Encode("", true, false) == Ids{kBosId});
  CHECK(t.Encode("", false, false).empty());

  // parse_special: text after a special token gets a space prefix again
  // (llama.cpp's rule), so "a</s>b" encodes as "a", </s>, "b" separately.
  Ids expected = t.Encode("a", false, false);
  expected.push_back(kEosId);
  const Ids b = t.Encode("b", false, false);
  expected.insert(expected.end(), b.begin(), b.end());
  CHECK(t.Encode("a</s>b", false, true) == expected);
  // Without parse_special "</s>" is plain text: no EOS token in it.
  const Ids plain = t.Encode("a</s>b", false, false);
  CHECK(std::find(plain.begin(), plain.end(), kEosId) == plain.end());
  CHECK(t.Decode(plain) == "a</s>b");
}

TEST_CASE("tok512: characters outside the vocabulary fall back to bytes", "[spm]") {
  const Tokenizer& t = GetTok512();
  // U+4E2D is not a piece: its three UTF-8 bytes become byte tokens.
  const Ids ids = t.Encode("\xE4\xB8\xAD", false, false);
  REQUIRE(ids.size() >= 3);
  const Ids tail(ids.end() - 3, ids.end());
  CHECK(tail == Ids{kFirstByteId + 0xE4, kFirstByteId + 0xB8, kFirstByteId + 0xAD});
  CHECK(t.Decode(ids) == "\xE4\xB8\xAD");
}

TEST_CASE("tok512: random bytes, invalid UTF-8 included, round-trip", "[spm]") {
  const Tokenizer& t = GetTok512();
  auto rng = test::SeededRng(512);
  std::uniform_int_distribution<int> len_dist(1, 64), byte_dist(0, 255), ascii_dist(0, 3);
  constexpr int kCases = 300;
  for (int i = 0; i < kCases; ++i) {
    std::string text;
    const int n = len_dist(rng);
    for (int k = 0; k < n; ++k) {
      // Mostly ASCII letters and spaces, so merges happen, plus any byte.
      const int kind = ascii_dist(rng);
      text.push_back(static_cast<char>(kind == 0   ? byte_dist(rng)
                                       : kind == 1 ? ' '
                                                   : 'a' + byte_dist(rng) % 26));
    }
    INFO("case " << i);
    const Ids ids = t.Encode(text, true, false);
    REQUIRE(!ids.empty());
    CHECK(ids[0] == kBosId);
    for (int32_t id : ids) CHECK((id > kUnkId && id < kTok512Vocab));
    CHECK(t.Decode(ids) == text);
  }
}

}  // namespace
}  // namespace kx
