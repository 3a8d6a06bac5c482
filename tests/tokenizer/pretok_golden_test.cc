// Every `tokenizer.ggml.pre` variant against Hugging Face `tokenizers`
// (tests/golden/make_pretok_goldens.py): the words each pre-tokenizer splits
// texts into, piece by piece, and the ids of a small trained byte-level BPE
// vocabulary, written into a GGUF with GgufWriter and read back through
// Tokenizer::FromGguf, encoded through each variant (its merges cross the
// places where the variants differ, so a wrong split shows in the ids too).
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/tokenizer.h"
#include "model/tokenizer_pre.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kx {
namespace {

constexpr size_t kVariants = 4;
constexpr size_t kMinCases = 300;  // the script writes ~390

const nlohmann::json& Golden() {
  static const nlohmann::json golden = [] {
    const std::string path =
        test::EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/tokenizer/pretok_goldens.json";
    std::ifstream in(path);
    INFO("golden " << path);
    REQUIRE(in);
    return nlohmann::json::parse(in);
  }();
  return golden;
}

TEST_CASE("pre-tokenizer words match tokenizers, piece by piece", "[pretok][golden]") {
  const nlohmann::json& g = Golden();
  REQUIRE(g["variants"].size() == kVariants);
  REQUIRE(g["cases"].size() >= kMinCases);
  for (const auto& variant : g["variants"]) {
    const std::string name = variant;
    const PreTokenizerKind kind = PreTokenizerFromName(name);
    REQUIRE(PreTokenizerName(kind) == name);  // a known name, not the fallback
    size_t n_words = 0;
    for (const auto& c : g["cases"]) {
      const std::string text = c["text"];
      const std::vector<std::string> want = c["pieces"][name];
      std::vector<std::string_view> got;
      PreTokenize(kind, text, got);
      INFO("variant " << name << ", text " << nlohmann::json(text).dump());
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("word " << i);
        CHECK(got[i] == want[i]);
      }
      n_words += want.size();
    }
    CHECK(n_words > g["cases"].size());  // the texts do get split
  }
}

// The golden vocabulary as a GGUF naming `pre`, read back with FromGguf. The
// tokenizer copies what it needs, so the file bytes can go.
std::unique_ptr<Tokenizer> TokenizerFor(const std::string& pre) {
  const nlohmann::json& g = Golden();
  const std::vector<std::string> tokens = g["bpe_tokens"];
  const std::vector<std::string> merges = g["bpe_merges"];
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", pre);
  w.SetArrayString("tokenizer.ggml.tokens", tokens);
  w.SetArrayI32("tokenizer.ggml.token_type",
                std::vector<int32_t>(tokens.size(), static_cast<int32_t>(TokenType::kNormal)));
  w.SetArrayString("tokenizer.ggml.merges", merges);
  auto buf = w.WriteToBuffer();
  REQUIRE(buf.ok());
  auto f = GgufFile::FromBuffer(buf->data(), buf->size());
  INFO(f.status().ToString());
  REQUIRE(f.ok());
  auto tok = Tokenizer::FromGguf(*f);
  INFO(tok.status().ToString());
  REQUIRE(tok.ok());
  return std::move(tok).value();
}

TEST_CASE("byte-level BPE through each pre-tokenizer matches tokenizers", "[pretok][golden]") {
  const nlohmann::json& g = Golden();
  for (const auto& variant : g["variants"]) {
    const std::string name = variant;
    const auto tok = TokenizerFor(name);
    REQUIRE(tok->pre_tokenizer() == PreTokenizerFromName(name));
    REQUIRE(tok->n_vocab() == static_cast<int32_t>(g["bpe_tokens"].size()));
    for (const auto& c : g["cases"]) {
      const std::string text = c["text"];
      const std::vector<int32_t> want = c["ids"][name];
      INFO("variant " << name << ", text " << nlohmann::json(text).dump());
      const std::vector<int32_t> got = tok->Encode(text, false, false);
      CHECK(got == want);
      CHECK(tok->Decode(got) == text);
    }
  }
}

}  // namespace
}  // namespace kx
