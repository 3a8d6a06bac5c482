// The Llama-2, Llama-3, Mistral and Gemma formatters against jinja2's
// rendering of the upstream templates (tests/golden/make_token_goldens.py),
// each family recognised from its own Jinja source.
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/chat_template.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace kx {
namespace {

constexpr size_t kFamilies = 4;

TEST_CASE("chat templates match jinja2 on the upstream sources", "[chat][golden]") {
  const std::string path = test::EnvOr("KAIROX_SOURCE_DIR", ".") +
                           "/tests/golden/tokenizer/chat_templates.json";
  std::ifstream in(path);
  REQUIRE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);
  REQUIRE(golden["families"].size() == kFamilies);
  for (const auto& family : golden["families"]) {
    const std::string name = family["name"];
    INFO("family " << name);
    const std::string source = family["source"];
    const ChatTemplateKind kind = DetectChatTemplate(source);
    CHECK(ChatTemplateName(kind) == name);
    CHECK(ChatTemplateStartsWithBos(kind));
    // The template sources carry no default system prompt.
    CHECK(ExtractDefaultSystemPrompt(source).empty());
    const ChatTemplateTokens tokens{family["bos_token"], family["eos_token"]};
    CHECK(DefaultChatTemplateTokens(kind).bos == tokens.bos);
    CHECK(DefaultChatTemplateTokens(kind).eos == tokens.eos);
    REQUIRE(family["cases"].size() >= 8);
    for (const auto& c : family["cases"]) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
      const bool gen = c["add_generation_prompt"];
      INFO("case " << c.dump());
      CHECK(ApplyChatTemplate(kind, messages, gen, "", tokens) == c["text"].get<std::string>());
      CHECK(ApplyChatTemplate(kind, messages, gen, "") == c["text"].get<std::string>());
    }
  }
}

}  // namespace
}  // namespace kx
