#include "model/chat_template.h"

#include "base/log.h"

namespace kx {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kSystemRole = "system";
constexpr std::string_view kAssistantRole = "assistant";

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

}  // namespace

std::string_view ChatTemplateName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatML:
      return "chatml";
    case ChatTemplateKind::kGeneric:
      return "generic";
  }
  return "unknown";
}

ChatTemplateKind DetectChatTemplate(std::string_view jinja_source) {
  // Most specific families first once there are more of them.
  if (jinja_source.find(kImStart) != std::string_view::npos) return ChatTemplateKind::kChatML;
  return ChatTemplateKind::kGeneric;
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
  const bool insert_system =
      !default_system.empty() && !messages.empty() && messages[0].role != kSystemRole;
  std::string dst;
  switch (kind) {
    case ChatTemplateKind::kChatML:
      if (insert_system) AppendChatML(dst, kSystemRole, default_system);
      for (const ChatMessage& m : messages) AppendChatML(dst, m.role, m.content);
      if (add_generation_prompt) dst.append(kImStart).append(kAssistantRole).append("\n");
      return dst;
    case ChatTemplateKind::kGeneric:
      Log().warn("chat template not recognised: using the generic 'role: content' format");
      if (insert_system) dst.append(kSystemRole).append(": ").append(default_system).append("\n");
      for (const ChatMessage& m : messages) {
        dst.append(m.role).append(": ").append(m.content).append("\n");
      }
      if (add_generation_prompt) dst.append(kAssistantRole).append(": ");
      return dst;
  }
  return dst;
}

}  // namespace kx
