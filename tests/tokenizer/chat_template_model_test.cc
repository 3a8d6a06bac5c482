// The chat template family chosen for the real model files: SmolLM2 by its
// own tokenizer.chat_template, Gemma 3 270M (which carries none) by its
// architecture. Each case skips without its file.
#include <unistd.h>

#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "test_util.h"

namespace kx {
namespace {

// Opens `path`, or skips the program (Catch2 v2 has no per-case skip: this
// file holds one case per model, and each model's absence ends the run).
GgufFile OpenOrSkip(const std::string& path, const std::string& what) {
  if (access(path.c_str(), R_OK) != 0) test::Skip(what + " not found at " + path);
  auto f = GgufFile::Open(path);
  INFO(f.status().ToString());
  REQUIRE(f.ok());
  return std::move(f).value();
}

TEST_CASE("SmolLM2's own template is ChatML", "[chat][model]") {
  const GgufFile f = OpenOrSkip(test::DefaultModelOrSkip(), "default model");
  REQUIRE(f.HasKey("tokenizer.chat_template"));
  CHECK(ChatTemplateForGguf(f) == ChatTemplateKind::kChatML);
}

TEST_CASE("Gemma 3 without a template gets the Gemma family", "[chat][model]") {
  const std::string fallback =
      test::EnvOr("HOME", "/root") + "/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf";
  const GgufFile f = OpenOrSkip(test::EnvOr("KAIROX_GEMMA3_MODEL", fallback), "Gemma 3 270M");
  CHECK(f.GetString("general.architecture").value() == "gemma3");
  // With no template the architecture decides; a file that has one has Gemma's.
  CHECK(ChatTemplateForGguf(f) == ChatTemplateKind::kGemma);
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  CHECK(ApplyChatTemplate(ChatTemplateForGguf(f), user, true, "") ==
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
}

}  // namespace
}  // namespace kx
