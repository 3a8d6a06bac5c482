// The OpenAI-style request and response bodies of kairox-server: parsing a request's JSON into
// a Request (every field type-checked, errors naming the field), and building the bodies the
// `openai` Python package and curl users expect (chat.completion, text_completion, their
// streamed chunks, the error shape). No HTTP here (see routes.cc); JSON through nlohmann/json.
//
//   kx::server::Request req;
//   if (auto err = kx::server::ParseRequest(body, kx::server::Endpoint::kChat, n_vocab, {}, &req))
//   {
//     reply(err->http_status, kx::server::ErrorBody(*err));
//   }
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kairox/kairox.hpp"

namespace kx::server {

// An error as OpenAI's API reports it: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" when none)
  std::string code;   // e.g. "context_length_exceeded" ("" when none)
};

nlohmann::json ErrorBody(const ApiError& error);

enum class Endpoint { kChat, kCompletion };

struct Request {
  Endpoint endpoint = Endpoint::kChat;
  std::vector<kairox::ChatMessage> messages;  // kChat
  std::string prompt;                         // kCompletion
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t max_tokens = -1;     // -1: the server's default
  std::vector<std::string> stop;
  std::optional<uint64_t> seed;
  kairox::SamplerParams sampling;  // `defaults` of ParseRequest where the request names none
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Deepest nesting of arrays/objects a request may have; deeper bodies are refused before they
// are parsed (nothing a chat request needs comes close).
inline constexpr int kMaxJsonDepth = 32;

// Parses `body` for `endpoint`; sampling values the request leaves out come from `defaults`.
// Ids in logit_bias must be below `n_vocab`. Returns the error to send when the body is not
// valid JSON, too deeply nested, or a field has the wrong type or range; nullopt on success.
std::optional<ApiError> ParseRequest(const std::string& body, Endpoint endpoint, int32_t n_vocab,
                                     const kairox::SamplerParams& defaults, Request* dst);

// OpenAI's finish_reason for a kx_stop_reason: "stop" or "length".
const char* FinishReason(kx_stop_reason reason);

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens the session already held
};
nlohmann::json UsageJson(const Usage& usage);

// The identity every body of one response carries.
struct ResponseId {
  std::string id;  // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;
  std::string model;
};

// A whole (non-streamed) response.
nlohmann::json CompletionBody(Endpoint endpoint, const ResponseId& rid, const std::string& text,
                              kx_stop_reason reason, const Usage& usage);

// One streamed chunk: `text` as a delta (chat: with the role on the first chunk), or the
// final chunk with finish_reason when `reason` is set.
nlohmann::json ChunkBody(Endpoint endpoint, const ResponseId& rid, const std::string& text,
                         bool first, std::optional<kx_stop_reason> reason);

// The last chunk of a stream with stream_options.include_usage: no choices, the usage.
nlohmann::json UsageChunkBody(Endpoint endpoint, const ResponseId& rid, const Usage& usage);

// JSON text with invalid UTF-8 replaced (model output may hold any bytes).
std::string Dump(const nlohmann::json& j);

// One server-sent event: "data: <json>\n\n".
std::string SseEvent(const nlohmann::json& j);

}  // namespace kx::server
