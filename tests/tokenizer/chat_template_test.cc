// Chat templates on made-up conversations; the model test checks SmolLM2's
// real template against Jinja's output.
#include "model/chat_template.h"

#include <string>
#include <vector>

#include "catch2/catch.hpp"

namespace kx {
namespace {

// SmolLM2-135M-Instruct's tokenizer.chat_template, as its GGUF stores it
// (real newlines inside the string literals).
constexpr std::string_view kSmolLM2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";
constexpr std::string_view kSmolSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

TEST_CASE("template families are detected", "[chat]") {
  CHECK(DetectChatTemplate(kSmolLM2Template) == ChatTemplateKind::kChatML);
  CHECK(DetectChatTemplate("") == ChatTemplateKind::kGeneric);
  CHECK(DetectChatTemplate("{{ bos_token }}[INST] {{ m }} [/INST]") == ChatTemplateKind::kGeneric);
  CHECK(ChatTemplateName(ChatTemplateKind::kChatML) == "chatml");
}

TEST_CASE("the default system prompt is read from the template source", "[chat]") {
  CHECK(ExtractDefaultSystemPrompt(kSmolLM2Template) == kSmolSystem);
  // Escaped newlines (as tokenizer_config.json spells them) and double quotes.
  CHECK(ExtractDefaultSystemPrompt(R"({{ "<|im_start|>system\nYou're \"nice\".<|im_end|>\n" }})") ==
        "You're \"nice\".");
  // No literal system turn: nothing to extract.
  CHECK(ExtractDefaultSystemPrompt("{{'<|im_start|>' + message['role'] + '\n'}}").empty());
  // The literal ends before <|im_end|>: the text is Jinja code, not a prompt.
  CHECK(ExtractDefaultSystemPrompt("{{ '<|im_start|>system\n' + x + '<|im_end|>' }}").empty());
  CHECK(ExtractDefaultSystemPrompt("").empty());
}

TEST_CASE("ChatML formatting with SmolLM2's default system prompt", "[chat]") {
  const std::vector<ChatMessage> user_only = {{"user", "Hi!"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kChatML, user_only, true, kSmolSystem) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> with_system = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kChatML, with_system, false, kSmolSystem) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
  // Like the Jinja loop: no messages, no system turn.
  CHECK(ApplyChatTemplate(ChatTemplateKind::kChatML, {}, true, kSmolSystem) ==
        "<|im_start|>assistant\n");
  CHECK(ApplyChatTemplate(ChatTemplateKind::kChatML, user_only, false, "") ==
        "<|im_start|>user\nHi!<|im_end|>\n");
}

TEST_CASE("generic fallback", "[chat]") {
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}, {"assistant", "Yo"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kGeneric, msgs, true, "Sys") ==
        "system: Sys\nuser: Hi\nassistant: Yo\nassistant: ");
}

}  // namespace
}  // namespace kx
