// OpenAI-style bodies for kairox-server (see api.h).
#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kx::server {
namespace {

using nlohmann::json;

// OpenAI's limits for the fields kairox takes as they are.
constexpr size_t kMaxStopStrings = 4;
constexpr double kMaxTemperature = 2.0;
// logit_bias values OpenAI accepts; its ends mean "ban" and "only this token".
constexpr double kMaxLogitBias = 100.0;

ApiError Invalid(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = param.empty() ? message : "'" + param + "': " + message;
  return e;
}

std::string TypeName(const json& j) { return j.type_name(); }

// The deepest nesting of arrays and objects in `text`, counted outside strings, stopping as
// soon as it passes `limit` (so a hostile body costs one pass and no parse).
int NestingDepth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// A message's content: a string, null (an assistant turn with none), or OpenAI's array of
// parts of which only {"type": "text", "text": ...} is understood.
std::optional<ApiError> ContentText(const json& content, const std::string& param,
                                    std::string* dst) {
  if (content.is_string()) {
    *dst = content.get<std::string>();
    return std::nullopt;
  }
  if (content.is_null()) {
    dst->clear();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return Invalid(param, "expected a string or an array of text parts, got " + TypeName(content));
  }
  dst->clear();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return Invalid(p, "only {\"type\": \"text\", \"text\": string} parts are supported");
    }
    *dst += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& body, Request* dst) {
  if (!body.contains("messages")) return Invalid("messages", "required");
  const json& msgs = body["messages"];
  if (!msgs.is_array()) return Invalid("messages", "expected an array, got " + TypeName(msgs));
  if (msgs.empty()) return Invalid("messages", "at least one message is required");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Invalid(param, "expected an object, got " + TypeName(m));
    if (!m.contains("role") || !m["role"].is_string()) {
      return Invalid(param + ".role", "required, a string");
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer") {
      return Invalid(param + ".role",
                     "'" + role + "' is not one of system, developer, user, assistant");
    }
    std::string content;
    if (!m.contains("content")) return Invalid(param + ".content", "required");
    if (auto err = ContentText(m["content"], param + ".content", &content)) return err;
    // The templates know "system"; OpenAI's newer name for it is "developer".
    dst->messages.push_back({role == "developer" ? "system" : role, std::move(content)});
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, Request* dst) {
  if (!body.contains("prompt")) return Invalid("prompt", "required");
  const json& p = body["prompt"];
  if (p.is_string()) {
    dst->prompt = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    dst->prompt = p[0].get<std::string>();
  } else {
    return Invalid(
        "prompt",
        "expected a string (or an array of one string), got " +
            (p.is_array() ? "an array of " + std::to_string(p.size()) + " elements" : TypeName(p)));
  }
  if (dst->prompt.empty()) return Invalid("prompt", "must not be empty");
  return std::nullopt;
}

// A number field in [lo, hi] (absent or null: left as it is).
std::optional<ApiError> Number(const json& body, const char* name, double lo, double hi,
                               float* dst) {
  if (!body.contains(name) || body[name].is_null()) return std::nullopt;
  const json& v = body[name];
  if (!v.is_number()) return Invalid(name, "expected a number, got " + TypeName(v));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) {
    return Invalid(
        name, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
  }
  *dst = static_cast<float>(x);
  return std::nullopt;
}

// An integer field in [lo, hi] (absent or null: left as it is).
template <class T>
std::optional<ApiError> Integer(const json& body, const char* name, int64_t lo, int64_t hi,
                                T* dst) {
  if (!body.contains(name) || body[name].is_null()) return std::nullopt;
  const json& v = body[name];
  if (!v.is_number_integer()) return Invalid(name, "expected an integer, got " + TypeName(v));
  // Non-negative integers parse as unsigned: compare as unsigned only above int64's range.
  const bool too_big =
      v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (too_big || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return Invalid(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "], got " + v.dump());
  }
  *dst = static_cast<T>(v.get<int64_t>());
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const json& body, Request* dst) {
  if (!body.contains("stop") || body["stop"].is_null()) return std::nullopt;
  const json& s = body["stop"];
  std::vector<json> items;
  if (s.is_string()) {
    items.push_back(s);
  } else if (s.is_array()) {
    items.assign(s.begin(), s.end());
  } else {
    return Invalid("stop", "expected a string or an array of strings, got " + TypeName(s));
  }
  if (items.size() > kMaxStopStrings) {
    return Invalid("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings");
  }
  for (const json& item : items) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      return Invalid("stop", "each stop sequence must be a non-empty string");
    }
    dst->stop.push_back(item.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseLogitBias(const json& body, int32_t n_vocab, Request* dst) {
  if (!body.contains("logit_bias") || body["logit_bias"].is_null()) return std::nullopt;
  const json& b = body["logit_bias"];
  if (!b.is_object()) return Invalid("logit_bias", "expected an object, got " + TypeName(b));
  for (const auto& [key, value] : b.items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id >= n_vocab) {
      return Invalid("logit_bias",
                     "key '" + key + "' is not a token id in [0, " + std::to_string(n_vocab) + ")");
    }
    if (!value.is_number()) {
      return Invalid("logit_bias",
                     "the bias of " + key + " must be a number, got " + TypeName(value));
    }
    const double v = value.get<double>();
    if (!(v >= -kMaxLogitBias && v <= kMaxLogitBias)) {
      return Invalid("logit_bias", "the bias of " + key + " must be in [-100, 100]");
    }
    // OpenAI: -100 bans the token and 100 makes it the only choice.
    const float bias = v <= -kMaxLogitBias  ? -std::numeric_limits<float>::infinity()
                       : v >= kMaxLogitBias ? std::numeric_limits<float>::infinity()
                                            : static_cast<float>(v);
    dst->logit_bias.emplace_back(static_cast<int32_t>(id), bias);
  }
  return std::nullopt;
}

}  // namespace

json ErrorBody(const ApiError& error) {
  return {{"error",
           {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", error.code.empty() ? json(nullptr) : json(error.code)}}}};
}

std::optional<ApiError> ParseRequest(const std::string& body, Endpoint endpoint, int32_t n_vocab,
                                     const kairox::SamplerParams& defaults, Request* dst) {
  *dst = Request{};
  dst->endpoint = endpoint;
  dst->sampling = defaults;
  if (NestingDepth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    return Invalid("", "the body nests arrays/objects deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels");
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Invalid("", "the body is not valid JSON (UTF-8 text with one object)");
  }
  if (!j.is_object()) return Invalid("", "the body must be a JSON object, got " + TypeName(j));
  if (endpoint == Endpoint::kChat) {
    if (auto err = ParseMessages(j, dst)) return err;
  } else {
    if (auto err = ParsePrompt(j, dst)) return err;
  }
  if (j.contains("model") && !j["model"].is_string() && !j["model"].is_null()) {
    return Invalid("model", "expected a string, got " + TypeName(j["model"]));
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return Invalid("stream", "expected a boolean");
    dst->stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& so = j["stream_options"];
    if (!so.is_object()) return Invalid("stream_options", "expected an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) {
        return Invalid("stream_options.include_usage", "expected a boolean");
      }
      dst->include_usage = so["include_usage"].get<bool>();
    }
  }
  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  if (auto err = Integer(j, "max_tokens", 1, kMaxTokens, &dst->max_tokens)) return err;
  if (auto err = Integer(j, "max_completion_tokens", 1, kMaxTokens, &dst->max_tokens)) return err;
  int64_t n = 1;
  if (auto err = Integer(j, "n", 1, 1, &n)) return err;
  if (j.contains("seed") && !j["seed"].is_null()) {
    const json& s = j["seed"];
    if (!s.is_number_integer()) return Invalid("seed", "expected an integer, got " + TypeName(s));
    // Negative seeds (OpenAI allows them) map onto the 64-bit seed space.
    dst->seed =
        s.is_number_unsigned() ? s.get<uint64_t>() : static_cast<uint64_t>(s.get<int64_t>());
  }
  kairox::SamplerParams& sp = dst->sampling;
  if (auto err = Number(j, "temperature", 0.0, kMaxTemperature, &sp.temperature)) return err;
  if (auto err = Number(j, "top_p", 0.0, 1.0, &sp.top_p)) return err;
  if (auto err = Number(j, "min_p", 0.0, 1.0, &sp.min_p)) return err;
  if (auto err = Integer(j, "top_k", -1, std::numeric_limits<int32_t>::max(), &sp.top_k)) {
    return err;
  }
  constexpr double kMaxPenalty = 1e6;
  if (auto err = Number(j, "repeat_penalty", 0.0, kMaxPenalty, &sp.repeat_penalty)) return err;
  // Accepted for compatibility and not applied (kairox's chain has no such penalties):
  // checked so that a wrong type is still an error.
  float ignored = 0.0f;
  if (auto err = Number(j, "frequency_penalty", -2.0, 2.0, &ignored)) return err;
  if (auto err = Number(j, "presence_penalty", -2.0, 2.0, &ignored)) return err;
  if (auto err = ParseStop(j, dst)) return err;
  if (auto err = ParseLogitBias(j, n_vocab, dst)) return err;
  return std::nullopt;
}

const char* FinishReason(kx_stop_reason reason) {
  return reason == KX_STOP_MAX_TOKENS || reason == KX_STOP_CONTEXT_FULL ? "length" : "stop";
}

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json CompletionBody(Endpoint endpoint, const ResponseId& rid, const std::string& text,
                    kx_stop_reason reason, const Usage& usage) {
  json choice = {{"index", 0}, {"finish_reason", FinishReason(reason)}, {"logprobs", nullptr}};
  if (endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  return {{"id", rid.id},
          {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", rid.created},
          {"model", rid.model},
          {"choices", json::array({choice})},
          {"usage", UsageJson(usage)}};
}

json ChunkBody(Endpoint endpoint, const ResponseId& rid, const std::string& text, bool first,
               std::optional<kx_stop_reason> reason) {
  json choice = {{"index", 0},
                 {"finish_reason", reason ? json(FinishReason(*reason)) : json(nullptr)},
                 {"logprobs", nullptr}};
  if (endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!reason) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", rid.id},
          {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", rid.created},
          {"model", rid.model},
          {"choices", json::array({choice})}};
}

json UsageChunkBody(Endpoint endpoint, const ResponseId& rid, const Usage& usage) {
  return {{"id", rid.id},
          {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", rid.created},
          {"model", rid.model},
          {"choices", json::array()},
          {"usage", UsageJson(usage)}};
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

std::string SseEvent(const json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace kx::server
