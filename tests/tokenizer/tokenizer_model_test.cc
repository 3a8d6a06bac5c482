// SmolLM2's tokenizer read from the default model through GgufFile, checked
// against the goldens of tests/golden/make_token_goldens.py (HF `tokenizers`
// and jinja2).
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kx {
namespace {

constexpr int32_t kSmolLM2Vocab = 49152;
constexpr int32_t kImStartId = 1;
constexpr int32_t kImEndId = 2;
constexpr size_t kSpeedTextBytes = 100 * 1024;

struct Model {
  GgufFile gguf;
  std::unique_ptr<Tokenizer> tok;
};

const Model& GetModel() {
  static Model* model = [] {
    const std::string path = test::DefaultModelOrSkip();
    auto f = GgufFile::Open(path);
    if (!f.ok()) {
      std::fprintf(stderr, "cannot open %s: %s\n", path.c_str(), f.status().ToString().c_str());
      std::abort();
    }
    auto t = Tokenizer::FromGguf(*f);
    if (!t.ok()) {
      std::fprintf(stderr, "FromGguf: %s\n", t.status().ToString().c_str());
      std::abort();
    }
    return new Model{std::move(f).value(), std::move(t).value()};
  }();
  return *model;
}

nlohmann::json LoadGolden(const std::string& name) {
  const std::string path =
      test::EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/tokenizer/" + name;
  std::ifstream in(path);
  if (!in) test::Skip("golden file missing: " + path);
  return nlohmann::json::parse(in);
}

TEST_CASE("SmolLM2 tokenizer metadata", "[model]") {
  const Tokenizer& t = *GetModel().tok;
  CHECK(t.n_vocab() == kSmolLM2Vocab);
  CHECK(t.pre_tokenizer() == PreTokenizerKind::kSmolLM);
  CHECK(t.bos_id() == kImStartId);
  CHECK(t.eos_id() == kImEndId);
  CHECK_FALSE(t.add_bos());
  CHECK(t.IsEndOfGeneration(kImEndId));
  CHECK(t.IsEndOfGeneration(*t.TokenId("<|endoftext|>")));
  CHECK_FALSE(t.IsEndOfGeneration(kImStartId));
  CHECK(t.token_type(kImStartId) == TokenType::kControl);
  CHECK(t.TokenText(kImEndId) == "<|im_end|>");
}

TEST_CASE("SmolLM2 encodes exactly like the HF reference", "[model][golden]") {
  const Tokenizer& t = *GetModel().tok;
  const nlohmann::json golden = LoadGolden("smollm2_tokens.json");
  REQUIRE(golden.at("cases").size() > 100);
  size_t mismatches = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = t.Encode(text, /*add_special=*/false, /*parse_special=*/true);
    CAPTURE(text);
    CHECK(got == expected);
    mismatches += got != expected;
    if (c.at("roundtrip").get<bool>()) CHECK(t.Decode(got, /*render_special=*/true) == text);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("SmolLM2 chat template matches Jinja's rendering", "[model][golden]") {
  const Model& m = GetModel();
  auto source = m.gguf.GetString("tokenizer.chat_template");
  REQUIRE(source.ok());
  const ChatTemplateKind kind = DetectChatTemplate(*source);
  REQUIRE(kind == ChatTemplateKind::kChatML);
  const std::string system = ExtractDefaultSystemPrompt(*source);
  CHECK(system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const nlohmann::json golden = LoadGolden("smollm2_chat.json");
  REQUIRE_FALSE(golden.at("cases").empty());
  for (const auto& c : golden.at("cases")) {
    std::vector<ChatMessage> msgs;
    for (const auto& jm : c.at("messages")) {
      msgs.push_back({jm.at("role").get<std::string>(), jm.at("content").get<std::string>()});
    }
    const std::string expected = c.at("text").get<std::string>();
    const std::string got =
        ApplyChatTemplate(kind, msgs, c.at("add_generation_prompt").get<bool>(), system);
    CHECK(got == expected);
  }
  // The prompt's markers become single control tokens.
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  const auto ids = m.tok->Encode(ApplyChatTemplate(kind, msgs, true, system), true, true);
  CHECK(std::count(ids.begin(), ids.end(), kImStartId) == 3);
  CHECK(std::count(ids.begin(), ids.end(), kImEndId) == 2);
}

TEST_CASE("SmolLM2 encodes 100 KB of English text", "[model]") {
  const Tokenizer& t = *GetModel().tok;
  const nlohmann::json golden = LoadGolden("smollm2_tokens.json");
  // English-like text with varied words: the golden ASCII sentences with a
  // rotating number so words are not all repeats.
  std::string text;
  for (size_t i = 0; text.size() < kSpeedTextBytes; ++i) {
    const auto& c = golden.at("cases").at(i % 20);
    text += c.at("text").get<std::string>();
    text += " paragraph " + std::to_string(i) + ".\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t.Encode(text, false, false);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Informational only (no timed assertions in tests).
  std::fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.1f ms (%.1f MB/s)\n", text.size(),
               ids.size(), ms, text.size() / ms / 1e3);
  CHECK(ids.size() > text.size() / 8);
  CHECK(t.Decode(ids) == text);
}

}  // namespace
}  // namespace kx
