// Chat templates on made-up conversations; the model test checks SmolLM2's
// real template against Jinja's output.
#include "model/chat_template.h"

#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "model/gguf.h"
#include "model/gguf_writer.h"

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
  CHECK(DetectChatTemplate("{{ bos_token }}[INST] {{ m }} [/INST]") == ChatTemplateKind::kMistral);
  CHECK(DetectChatTemplate("[INST] <<SYS>>\\n") == ChatTemplateKind::kLlama2);
  CHECK(DetectChatTemplate("'<|start_header_id|>' + role") == ChatTemplateKind::kLlama3);
  CHECK(DetectChatTemplate("'<start_of_turn>' + role") == ChatTemplateKind::kGemma);
  CHECK(DetectChatTemplate("{{ role }}: {{ content }}") == ChatTemplateKind::kGeneric);
  CHECK(ChatTemplateName(ChatTemplateKind::kChatML) == "chatml");
  CHECK(!ChatTemplateStartsWithBos(ChatTemplateKind::kChatML));
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

TEST_CASE("families outside their upstream templates' domain", "[chat]") {
  // Mistral v0.1 rejects a system message; it is folded into the first user turn.
  const std::vector<ChatMessage> sys = {{"system", "Be brief."}, {"user", "Hi"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kMistral, sys, true, "") ==
        "<s>[INST] Be brief.\n\nHi [/INST]");
  // A default system prompt applies to every family.
  const std::vector<ChatMessage> user = {{"user", " Hi "}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kGemma, user, true, "Sys") ==
        "<bos><start_of_turn>user\nSys\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  // Llama-2 strips the joined system block and content, as its template does.
  CHECK(ApplyChatTemplate(ChatTemplateKind::kLlama2, user, true, "Sys") ==
        "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\n Hi [/INST]");
  // Model-specific BOS/EOS spellings.
  const std::vector<ChatMessage> turn = {{"user", "Q"}, {"assistant", "A"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kLlama2, turn, false, "", {"[B]", "[E]"}) ==
        "[B][INST] Q [/INST] A [E]");
  // trim is Unicode-aware, like Python's str.strip (NBSP, U+3000, U+001F).
  const std::vector<ChatMessage> spaces = {{"user", "\xC2\xA0\x1F x \xE3\x80\x80\n"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kLlama3, spaces, false, "") ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
  // An invalid byte at either end is not whitespace and stays.
  const std::vector<ChatMessage> invalid = {{"user", "\xFF x \xC3"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kLlama3, invalid, false, "", {"", ""}) ==
        "<|start_header_id|>user<|end_header_id|>\n\n\xFF x \xC3<|eot_id|>");
}

TEST_CASE("generic fallback", "[chat]") {
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}, {"assistant", "Yo"}};
  CHECK(ApplyChatTemplate(ChatTemplateKind::kGeneric, msgs, true, "Sys") ==
        "system: Sys\nuser: Hi\nassistant: Yo\nassistant: ");
}

// A GGUF holding only the given keys ("" leaves a key out).
ChatTemplateKind KindOfFile(std::string_view architecture, std::string_view jinja) {
  GgufWriter w;
  if (!architecture.empty()) w.SetString("general.architecture", architecture);
  if (!jinja.empty()) w.SetString("tokenizer.chat_template", jinja);
  auto buf = w.WriteToBuffer();
  REQUIRE(buf.ok());
  auto f = GgufFile::FromBuffer(buf->data(), buf->size());
  INFO(f.status().ToString());
  REQUIRE(f.ok());
  return ChatTemplateForGguf(*f);
}

TEST_CASE("files without a chat template get their architecture's family", "[chat]") {
  CHECK(DefaultChatTemplateForArchitecture("gemma3") == ChatTemplateKind::kGemma);
  CHECK(DefaultChatTemplateForArchitecture("gemma2") == ChatTemplateKind::kGemma);
  CHECK(DefaultChatTemplateForArchitecture("qwen2") == ChatTemplateKind::kChatML);
  // A llama file may be any family; unknown and empty names have none.
  CHECK(!DefaultChatTemplateForArchitecture("llama").has_value());
  CHECK(!DefaultChatTemplateForArchitecture("Gemma3").has_value());
  CHECK(!DefaultChatTemplateForArchitecture("").has_value());

  CHECK(ChooseChatTemplate("", "gemma3") == ChatTemplateKind::kGemma);
  CHECK(ChooseChatTemplate("", "llama") == ChatTemplateKind::kGeneric);
  // The file's own template wins over the architecture, even unrecognised.
  CHECK(ChooseChatTemplate(kSmolLM2Template, "gemma3") == ChatTemplateKind::kChatML);
  CHECK(ChooseChatTemplate("{{ role }}: {{ content }}", "gemma3") == ChatTemplateKind::kGeneric);

  CHECK(KindOfFile("gemma3", "") == ChatTemplateKind::kGemma);
  CHECK(KindOfFile("llama", kSmolLM2Template) == ChatTemplateKind::kChatML);
  CHECK(KindOfFile("llama", "") == ChatTemplateKind::kGeneric);
  CHECK(KindOfFile("", "") == ChatTemplateKind::kGeneric);
  // What --chat then formats for a Gemma 3 file: the Gemma turns, not "user: ...".
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  CHECK(ApplyChatTemplate(KindOfFile("gemma3", ""), user, true, "") ==
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
}

}  // namespace
}  // namespace kx
