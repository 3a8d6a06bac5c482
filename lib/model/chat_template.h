// Chat templates: turn a conversation into the prompt text a model was
// trained on. kairox does not run Jinja; it recognises the template family
// from the model's `tokenizer.chat_template` source and formats it natively.
//
//   const ChatTemplateKind kind = ChatTemplateForGguf(gguf);  // or DetectChatTemplate(jinja)
//   const std::string system = ExtractDefaultSystemPrompt(jinja);
//   std::vector<ChatMessage> msgs = {{"user", "Hi"}};
//   std::string prompt = ApplyChatTemplate(kind, msgs, /*add_generation_prompt=*/true, system);
//   // then Encode(prompt, /*add_special=*/true, /*parse_special=*/true)
//
// Templates that start with the BOS text (Llama-2/3, Mistral, Gemma) produce
// it as text, exactly as Jinja does: encode such a prompt with
// add_special=false (ChatTemplateStartsWithBos) and parse_special=true, or the
// model sees two BOS tokens.
//
// Adding a family: a ChatTemplateKind value, a recognition rule in
// DetectChatTemplate (most specific first), a formatter in chat_template.cc,
// and its upstream Jinja source in tests/golden/make_token_goldens.py.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kx {

class GgufFile;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

enum class ChatTemplateKind {
  // <|im_start|>{role}\n{content}<|im_end|>\n per message; the generation
  // prompt is "<|im_start|>assistant\n" (SmolLM2, Qwen2, ...).
  kChatML,
  // Llama-2 chat: "<s>[INST] {user} [/INST] {assistant} </s>" per exchange,
  // contents stripped; a system message goes first in the first user turn as
  // "<<SYS>>\n{system}\n<</SYS>>\n\n". No generation prompt (the [/INST] is it).
  kLlama2,
  // Llama-3: "<|begin_of_text|>" once, then per message
  // "<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>";
  // the generation prompt is "<|start_header_id|>assistant<|end_header_id|>\n\n".
  kLlama3,
  // Mistral v0.1: "<s>", then "[INST] {user} [/INST]" and "{assistant}</s> ".
  // The upstream template rejects system messages; here a system message is
  // put before the first user message, separated by "\n\n". No generation prompt.
  kMistral,
  // Gemma (3): "<bos>", then "<start_of_turn>{user|model}\n{content, trimmed}
  // <end_of_turn>\n" per message; a system message becomes "{system}\n\n" at
  // the start of the first turn. Generation prompt "<start_of_turn>model\n".
  kGemma,
  // Fallback for templates not recognised: "{role}: {content}\n" per message
  // and "assistant: " as generation prompt. Logs a warning when applied.
  kGeneric,
};

// "chatml", "llama2", "llama3", "mistral", "gemma", "generic".
std::string_view ChatTemplateName(ChatTemplateKind kind);

// The family of a Jinja chat template, by its distinctive markers, most
// specific first: "<|start_header_id|>" Llama-3, "<start_of_turn>" Gemma,
// "[INST]" with "<<SYS>>" Llama-2, "[INST]" Mistral, "<|im_start|>" ChatML;
// else (also for an empty source) kGeneric.
ChatTemplateKind DetectChatTemplate(std::string_view jinja_source);

// The family a model of architecture `general.architecture` was trained on,
// for files that carry no tokenizer.chat_template (Gemma 3 GGUFs often do
// not): "gemma", "gemma2", "gemma3" -> kGemma; "qwen2", "qwen2moe", "qwen3" ->
// kChatML. nullopt for other architectures, whose family is not implied
// (a "llama" file may be Llama-2, Llama-3, Mistral or SmolLM2's ChatML).
std::optional<ChatTemplateKind> DefaultChatTemplateForArchitecture(std::string_view architecture);

// DetectChatTemplate(jinja_source) when the source is not empty; otherwise
// the architecture's default, or kGeneric when it has none.
ChatTemplateKind ChooseChatTemplate(std::string_view jinja_source, std::string_view architecture);

// ChooseChatTemplate on the file's tokenizer.chat_template and
// general.architecture (either may be absent; a key of the wrong type counts
// as absent).
ChatTemplateKind ChatTemplateForGguf(const GgufFile& f);

// Whether the family's prompt starts with the BOS text (Llama-2, Mistral,
// Gemma; Llama-3 unless the conversation is empty).
bool ChatTemplateStartsWithBos(ChatTemplateKind kind);

// The BOS/EOS spellings a family's templates are rendered with.
struct ChatTemplateTokens {
  std::string bos;
  std::string eos;
};
// What the family's models call them: <s>/</s> (Llama-2, Mistral),
// <|begin_of_text|>/<|eot_id|> (Llama-3), <bos>/<eos> (Gemma), "" otherwise.
ChatTemplateTokens DefaultChatTemplateTokens(ChatTemplateKind kind);

// The system prompt a ChatML template inserts when the conversation does not
// start with a system message: the text of a string literal
// '<|im_start|>system\n...<|im_end|>' in the source, with Jinja escapes (\n,
// \t, \', \", \\) resolved. "" when there is none or it is not a plain literal.
std::string ExtractDefaultSystemPrompt(std::string_view jinja_source);

// Formats the conversation. When `default_system` is not empty, the
// conversation is not empty and its first message is not a system message,
// a system message with `default_system` is put first (what SmolLM2's template
// does with its built-in prompt). add_generation_prompt appends the opening of
// an assistant turn (where the family has one). Roles other than system, user
// and assistant are formatted as user turns by the Llama-2, Mistral and Gemma
// formatters (their templates reject them). Uses DefaultChatTemplateTokens.
std::string ApplyChatTemplate(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system);
// The same with the model's own BOS/EOS spellings.
std::string ApplyChatTemplate(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system,
                              const ChatTemplateTokens& tokens);

}  // namespace kx
