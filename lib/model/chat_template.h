// Chat templates: turn a conversation into the prompt text a model was
// trained on. kairox does not run Jinja; it recognises the template family
// from the model's `tokenizer.chat_template` source and formats it natively.
//
//   const ChatTemplateKind kind = DetectChatTemplate(jinja);
//   const std::string system = ExtractDefaultSystemPrompt(jinja);
//   std::vector<ChatMessage> msgs = {{"user", "Hi"}};
//   std::string prompt = ApplyChatTemplate(kind, msgs, /*add_generation_prompt=*/true, system);
//   // then Encode(prompt, /*add_special=*/true, /*parse_special=*/true)
//
// Adding a family (Llama-2/3, Mistral, Gemma): a ChatTemplateKind value, a
// recognition rule in DetectChatTemplate (most specific first), a formatter in
// chat_template.cc, and a golden test against the model's Jinja output.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kx {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

enum class ChatTemplateKind {
  // <|im_start|>{role}\n{content}<|im_end|>\n per message; the generation
  // prompt is "<|im_start|>assistant\n" (SmolLM2, Qwen2, ...).
  kChatML,
  // Fallback for templates not recognised: "{role}: {content}\n" per message
  // and "assistant: " as generation prompt. Logs a warning when applied.
  kGeneric,
};

// "chatml", "generic".
std::string_view ChatTemplateName(ChatTemplateKind kind);

// The family of a Jinja chat template: kChatML when it contains
// "<|im_start|>", else kGeneric (also for an empty source).
ChatTemplateKind DetectChatTemplate(std::string_view jinja_source);

// The system prompt a ChatML template inserts when the conversation does not
// start with a system message: the text of a string literal
// '<|im_start|>system\n...<|im_end|>' in the source, with Jinja escapes (\n,
// \t, \', \", \\) resolved. "" when there is none or it is not a plain literal.
std::string ExtractDefaultSystemPrompt(std::string_view jinja_source);

// Formats the conversation. When `default_system` is not empty, the
// conversation is not empty and its first message is not a system message,
// a system message with `default_system` is put first (what SmolLM2's template
// does with its built-in prompt). add_generation_prompt appends the opening of
// an assistant turn.
std::string ApplyChatTemplate(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system);

}  // namespace kx
