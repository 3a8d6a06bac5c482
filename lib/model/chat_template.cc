#include "model/chat_template.h"

#include <atomic>
#include <vector>

#include "base/log.h"
#include "model/gguf.h"
#include "model/unicode.h"

namespace kx {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kSystemRole = "system";
constexpr std::string_view kAssistantRole = "assistant";
// Distinctive markers of the template families.
constexpr std::string_view kLlama3Header = "<|start_header_id|>";
constexpr std::string_view kGemmaTurn = "<start_of_turn>";
constexpr std::string_view kInst = "[INST]";
constexpr std::string_view kLlama2Sys = "<<SYS>>";
// Python's str.isspace() (Jinja's trim, str.strip) also counts the
// information separators U+001C..U+001F, which are not White_Space.
constexpr uint32_t kFirstInfoSeparator = 0x1C;
constexpr uint32_t kLastInfoSeparator = 0x1F;

// Resolves the escapes of a Jinja string literal; false on a bare `quote`,
// which would mean the literal ended inside the text (so it is not plain).
bool UnescapeLiteral(std::string_view src, char quote, std::string& dst) {
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (c == quote) return false;
    if (c != '\\' || i + 1 == src.size()) {
      dst.push_back(c);
      continue;
    }
    const char e = src[++i];
    switch (e) {
      case 'n':
        dst.push_back('\n');
        break;
      case 't':
        dst.push_back('\t');
        break;
      case 'r':
        dst.push_back('\r');
        break;
      default:
        dst.push_back(e);
        break;  // \\, \', \" and anything else: the character
    }
  }
  return true;
}

void AppendChatML(std::string& dst, std::string_view role, std::string_view content) {
  dst.append(kImStart).append(role).append("\n").append(content).append(kImEnd).append("\n");
}

bool IsPythonSpace(uint32_t cp) {
  return IsWhitespace(cp) || (cp >= kFirstInfoSeparator && cp <= kLastInfoSeparator);
}

// Jinja's `trim` and Python's str.strip(): Unicode whitespace off both ends.
std::string_view Strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const Utf8Char c = DecodeUtf8(s, begin);
    if (c.cp == kInvalidCodepoint || !IsPythonSpace(c.cp)) break;
    begin += c.len;
  }
  size_t end = s.size();
  while (end > begin) {
    // Step back to the start of the last character.
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const Utf8Char c = DecodeUtf8(s, start);
    if (c.cp == kInvalidCodepoint || start + c.len != end || !IsPythonSpace(c.cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

// Llama-2: the system message rides in the first user turn.
void FormatLlama2(std::span<const ChatMessage> messages, const ChatTemplateTokens& tokens,
                  std::string& dst) {
  std::string_view system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == kSystemRole) {
    system = messages[0].content;
    has_system = true;
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string content;
    if (i == 0 && has_system) {
      content.append("<<SYS>>\n").append(system).append("\n<</SYS>>\n\n");
    }
    content.append(m.content);
    if (m.role == kAssistantRole) {
      dst.append(" ").append(Strip(content)).append(" ").append(tokens.eos);
    } else {
      dst.append(tokens.bos).append("[INST] ").append(Strip(content)).append(" [/INST]");
    }
  }
}

void FormatLlama3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                  const ChatTemplateTokens& tokens, std::string& dst) {
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) dst.append(tokens.bos);
    dst.append(kLlama3Header).append(messages[i].role).append("<|end_header_id|>\n\n");
    dst.append(Strip(messages[i].content)).append("<|eot_id|>");
  }
  if (add_generation_prompt) {
    dst.append(kLlama3Header).append(kAssistantRole).append("<|end_header_id|>\n\n");
  }
}

// Mistral v0.1 has no system role: it is folded into the first user message.
void FormatMistral(std::span<const ChatMessage> messages, const ChatTemplateTokens& tokens,
                   std::string& dst) {
  dst.append(tokens.bos);
  std::string_view system;
  if (!messages.empty() && messages[0].role == kSystemRole) {
    system = messages[0].content;
    messages = messages.subspan(1);
  }
  bool system_pending = !system.empty();
  for (const ChatMessage& m : messages) {
    if (m.role == kAssistantRole) {
      dst.append(m.content).append(tokens.eos).append(" ");
      continue;
    }
    dst.append("[INST] ");
    if (system_pending) dst.append(system).append("\n\n");
    system_pending = false;
    dst.append(m.content).append(" [/INST]");
  }
}

// Gemma 3: "model" for the assistant; the system text opens the first turn.
void FormatGemma(std::span<const ChatMessage> messages, bool add_generation_prompt,
                 const ChatTemplateTokens& tokens, std::string& dst) {
  dst.append(tokens.bos);
  std::string prefix;
  if (!messages.empty() && messages[0].role == kSystemRole) {
    prefix = messages[0].content + "\n\n";
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string_view role = m.role == kAssistantRole ? std::string_view("model") : m.role;
    dst.append(kGemmaTurn).append(role).append("\n");
    if (i == 0) dst.append(prefix);
    dst.append(Strip(m.content)).append("<end_of_turn>\n");
  }
  if (add_generation_prompt) dst.append(kGemmaTurn).append("model\n");
}

}  // namespace

std::string_view ChatTemplateName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatML:
      return "chatml";
    case ChatTemplateKind::kLlama2:
      return "llama2";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kMistral:
      return "mistral";
    case ChatTemplateKind::kGemma:
      return "gemma";
    case ChatTemplateKind::kGeneric:
      return "generic";
  }
  return "unknown";
}

ChatTemplateKind DetectChatTemplate(std::string_view jinja_source) {
  const auto has = [&](std::string_view marker) {
    return jinja_source.find(marker) != std::string_view::npos;
  };
  // Most specific first: a ChatML template never has these markers.
  if (has(kLlama3Header)) return ChatTemplateKind::kLlama3;
  if (has(kGemmaTurn)) return ChatTemplateKind::kGemma;
  if (has(kInst)) return has(kLlama2Sys) ? ChatTemplateKind::kLlama2 : ChatTemplateKind::kMistral;
  if (has(kImStart)) return ChatTemplateKind::kChatML;
  return ChatTemplateKind::kGeneric;
}

std::optional<ChatTemplateKind> DefaultChatTemplateForArchitecture(std::string_view architecture) {
  struct ArchFamily {
    std::string_view architecture;
    ChatTemplateKind kind;
  };
  // Architectures whose every chat model uses one family.
  static constexpr ArchFamily kArchFamilies[] = {
      {"gemma", ChatTemplateKind::kGemma},     {"gemma2", ChatTemplateKind::kGemma},
      {"gemma3", ChatTemplateKind::kGemma},    {"qwen2", ChatTemplateKind::kChatML},
      {"qwen2moe", ChatTemplateKind::kChatML}, {"qwen3", ChatTemplateKind::kChatML},
  };
  for (const ArchFamily& a : kArchFamilies) {
    if (a.architecture == architecture) return a.kind;
  }
  return std::nullopt;
}

ChatTemplateKind ChooseChatTemplate(std::string_view jinja_source, std::string_view architecture) {
  if (!jinja_source.empty()) return DetectChatTemplate(jinja_source);
  return DefaultChatTemplateForArchitecture(architecture).value_or(ChatTemplateKind::kGeneric);
}

ChatTemplateKind ChatTemplateForGguf(const GgufFile& f) {
  const auto string_or_empty = [&](std::string_view key) {
    auto v = f.GetString(key);
    return v.ok() ? *v : std::string_view();
  };
  return ChooseChatTemplate(string_or_empty("tokenizer.chat_template"),
                            string_or_empty("general.architecture"));
}

bool ChatTemplateStartsWithBos(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kLlama2 || kind == ChatTemplateKind::kLlama3 ||
         kind == ChatTemplateKind::kMistral || kind == ChatTemplateKind::kGemma;
}

ChatTemplateTokens DefaultChatTemplateTokens(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kLlama2:
    case ChatTemplateKind::kMistral:
      return {"<s>", "</s>"};
    case ChatTemplateKind::kLlama3:
      return {"<|begin_of_text|>", "<|eot_id|>"};
    case ChatTemplateKind::kGemma:
      return {"<bos>", "<eos>"};
    case ChatTemplateKind::kChatML:
    case ChatTemplateKind::kGeneric:
      break;
  }
  return {};
}

std::string ExtractDefaultSystemPrompt(std::string_view jinja_source) {
  const std::string header = std::string(kImStart) + std::string(kSystemRole);
  size_t pos = 0;
  while ((pos = jinja_source.find(header, pos)) != std::string_view::npos) {
    const size_t begin = pos + header.size();
    pos = begin;
    // Only a literal that opens right before the header, e.g. '<|im_start|>system\n...'.
    const char quote = begin > header.size() ? jinja_source[begin - header.size() - 1] : '\0';
    if (quote != '\'' && quote != '"') continue;
    const size_t end = jinja_source.find(kImEnd, begin);
    if (end == std::string_view::npos) break;
    std::string text;
    if (!UnescapeLiteral(jinja_source.substr(begin, end - begin), quote, text)) continue;
    if (text.empty() || text[0] != '\n') continue;  // the role line must end here
    return text.substr(1);
  }
  return {};
}

std::string ApplyChatTemplate(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system) {
  return ApplyChatTemplate(kind, messages, add_generation_prompt, default_system,
                           DefaultChatTemplateTokens(kind));
}

std::string ApplyChatTemplate(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system,
                              const ChatTemplateTokens& tokens) {
  std::vector<ChatMessage> with_system;
  if (!default_system.empty() && !messages.empty() && messages[0].role != kSystemRole) {
    with_system.reserve(messages.size() + 1);
    with_system.push_back({std::string(kSystemRole), std::string(default_system)});
    with_system.insert(with_system.end(), messages.begin(), messages.end());
    messages = with_system;
  }
  std::string dst;
  switch (kind) {
    case ChatTemplateKind::kChatML:
      for (const ChatMessage& m : messages) AppendChatML(dst, m.role, m.content);
      if (add_generation_prompt) dst.append(kImStart).append(kAssistantRole).append("\n");
      return dst;
    case ChatTemplateKind::kLlama2:
      FormatLlama2(messages, tokens, dst);
      return dst;
    case ChatTemplateKind::kLlama3:
      FormatLlama3(messages, add_generation_prompt, tokens, dst);
      return dst;
    case ChatTemplateKind::kMistral:
      FormatMistral(messages, tokens, dst);
      return dst;
    case ChatTemplateKind::kGemma:
      FormatGemma(messages, add_generation_prompt, tokens, dst);
      return dst;
    case ChatTemplateKind::kGeneric: {
      // Once per process: a chat or a calibration run formats many turns.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        Log().warn("chat template not recognised: using the generic 'role: content' format");
      }
      for (const ChatMessage& m : messages) {
        dst.append(m.role).append(": ").append(m.content).append("\n");
      }
      if (add_generation_prompt) dst.append(kAssistantRole).append(": ");
      return dst;
    }
  }
  return dst;
}

}  // namespace kx
