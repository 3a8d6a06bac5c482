// kairox-server's HTTP endpoints (see routes.h).
#include "server/routes.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "server/peer.h"

namespace kx::server {
namespace {

using nlohmann::json;

constexpr const char* kJson = "application/json";

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t RandomSeed() {
  std::random_device rd;
  return static_cast<uint64_t>(rd()) << 32 | rd();
}

}  // namespace

void SendError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(Dump(ErrorBody(error)), kJson);
}

// One generating request: what it asked for, its sampler, and the session lent to it.
struct Routes::Job {
  Request req;
  ResponseId rid;
  std::unique_ptr<kairox::Sampler> sampler;
  std::vector<int32_t> prompt_ids;  // as rendered and tokenized for the context check
  std::unique_ptr<SlotPool::Lease> lease;
  std::unique_ptr<PeerWatch> peer;  // not streamed: the connection, to see its client leave
};

Routes::Routes(const kairox::Model& model, SlotPool& pool, RouteOptions options)
    : model_(model), pool_(pool), options_(std::move(options)) {
  n_vocab_ = model_.Info().n_vocab;
  // Every session of the pool has the same context (SessionParams are shared).
  auto probe = pool_.Acquire({});
  n_ctx_ = probe->session().NCtx();
}

void Routes::Shutdown() {
  abort_all_ = 1;
  pool_.Shutdown();
}

bool Routes::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (options_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) return true;
  ApiError e;
  e.http_status = 401;
  e.message = "a valid API key is required: send 'Authorization: Bearer <key>'";
  e.code = "invalid_api_key";
  SendError(res, e);
  return false;
}

ResponseId Routes::NewId(Endpoint endpoint) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(next_id_.fetch_add(1) ^ RandomSeed()));
  return {std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + hex, NowSeconds(),
          options_.model_id};
}

void Routes::Register(httplib::Server& server) {
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const SlotPool::Counts c = pool_.counts();
    res.set_content(Dump({{"status", "ok"},
                          {"slots", c.slots},
                          {"busy", c.busy},
                          {"queued", c.queued},
                          {"refused", c.refused},
                          {"requests", requests_.load()},
                          {"disconnects", disconnects_.load()}}),
                    kJson);
  });
  server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    const json model = {
        {"id", options_.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "kairox"}};
    res.set_content(Dump({{"object", "list"}, {"data", json::array({model})}}), kJson);
  });
  // With a ContentReader: the handler reads the body itself, so that a chunked body is held
  // to --max-body too (httplib 0.11 checks only a Content-Length against its limit).
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
    Generate(req, reader, res, Endpoint::kChat);
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
    Generate(req, reader, res, Endpoint::kCompletion);
  });
  // httplib's own refusals (no route, a body over --max-body, a bad request line) in
  // OpenAI's shape; responses that already have a body keep it.
  // Typed: a lambda would match both of set_error_handler's overloads.
  httplib::Server::HandlerWithResponse on_error = [](const httplib::Request& req,
                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    e.message = res.status == 404 ? "no route for " + req.method + " " + req.path
                : res.status == 413
                    ? "the request body is larger than the server accepts "
                      "(--max-body)"
                    : "the request was refused (HTTP " + std::to_string(res.status) + ")";
    SendError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  };
  server.set_error_handler(std::move(on_error));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        ApiError e;
        e.http_status = 500;
        e.type = "server_error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          e.message = std::string("internal error: ") + ex.what();
        } catch (...) {
          e.message = "internal error";
        }
        SendError(res, e);
      });
}

bool Routes::ReadBody(const httplib::ContentReader& reader, httplib::Response& res,
                      std::string* body) const {
  bool too_big = false;
  const bool ok = reader([&](const char* data, size_t length) {
    if (body->size() + length > options_.max_body) {
      too_big = true;
      return false;
    }
    body->append(data, length);
    return true;
  });
  if (ok) return true;
  ApiError e;
  // httplib sets 413 itself for a Content-Length over set_payload_max_length.
  if (too_big || res.status == 413) {
    e.http_status = 413;
    e.message = "the request body is larger than the server accepts (--max-body " +
                std::to_string(options_.max_body) + " bytes)";
  } else {
    e.message = "the request body could not be read";
  }
  SendError(res, e);
  return false;
}

void Routes::Generate(const httplib::Request& req, const httplib::ContentReader& reader,
                      httplib::Response& res, Endpoint endpoint) {
  if (!Authorized(req, res)) return;
  requests_.fetch_add(1);
  std::string body;
  if (!ReadBody(reader, res, &body)) return;
  auto job = std::make_shared<Job>();
  if (auto err = ParseRequest(body, endpoint, n_vocab_, options_.sampling, &job->req)) {
    return SendError(res, *err);
  }
  Request& r = job->req;
  if (r.max_tokens < 0) r.max_tokens = options_.default_max_tokens;
  // The sampler checks the values' ranges (a bad server flag was refused at start-up).
  kairox::SamplerParams sp = r.sampling;
  sp.seed = r.seed ? *r.seed : options_.fixed_seed ? options_.sampling.seed : RandomSeed();
  try {
    job->sampler = std::make_unique<kairox::Sampler>(sp);
    if (!r.logit_bias.empty()) job->sampler->SetLogitBias(r.logit_bias);
    job->prompt_ids =
        endpoint == Endpoint::kChat
            ? model_.Tokenize(model_.ApplyChatTemplate(r.messages, /*add_generation_prompt=*/true))
            : model_.Tokenize(r.prompt);
  } catch (const kairox::Error& e) {
    ApiError err;
    err.message = e.what();
    return SendError(res, err);
  }
  if (static_cast<int64_t>(job->prompt_ids.size()) > n_ctx_) {
    ApiError err;
    err.param = endpoint == Endpoint::kChat ? "messages" : "prompt";
    err.code = "context_length_exceeded";
    err.message = "the prompt is " + std::to_string(job->prompt_ids.size()) +
                  " tokens; this server's context holds " + std::to_string(n_ctx_) +
                  " (kairox-server --ctx-size)";
    return SendError(res, err);
  }
  std::optional<SlotPool::Lease> lease = pool_.Acquire(job->prompt_ids);
  if (!lease) {
    ApiError err;
    err.http_status = 503;
    err.type = "server_error";
    err.code = "server_busy";
    err.message =
        "every session is busy and the queue is full (kairox-server --parallel, "
        "--queue); retry later";
    res.set_header("Retry-After", "1");
    return SendError(res, err);
  }
  job->lease = std::make_unique<SlotPool::Lease>(std::move(*lease));
  job->rid = NewId(endpoint);
  if (!r.stream) {
    job->peer = std::make_unique<PeerWatch>(req.local_addr, req.local_port, req.remote_addr,
                                            req.remote_port);
    std::string body;
    if (auto err = Run(*job, nullptr, &body)) return SendError(res, *err);
    res.set_content(body, kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job](size_t, httplib::DataSink& sink) {
        Run(*job, &sink, nullptr);
        sink.done();
        return true;
      },
      // Also when the provider never ran (the client left before the headers went out).
      [job](bool) { job->lease.reset(); });
}

std::optional<ApiError> Routes::Run(Job& job, httplib::DataSink* sink, std::string* body) {
  const Request& r = job.req;
  const Endpoint endpoint = r.endpoint;
  kairox::GenerateParams gp;
  gp.max_tokens = r.max_tokens;
  gp.stop = r.stop;
  gp.abort_flag = &abort_all_;
  bool gone = false;  // the client closed the connection
  auto send = [&](const std::string& event) {
    if (gone || sink->write(event.data(), event.size())) return !gone;
    gone = true;
    return false;
  };
  bool first = true;
  if (sink != nullptr && endpoint == Endpoint::kChat) {
    send(SseEvent(ChunkBody(endpoint, job.rid, "", /*first=*/true, std::nullopt)));
    first = false;
  }
  auto on_text = [&](std::string_view piece) {
    if (sink == nullptr) {  // not streamed: stop when the client has left
      gone = job.peer != nullptr && job.peer->Gone();
      return !gone;
    }
    const bool ok =
        send(SseEvent(ChunkBody(endpoint, job.rid, std::string(piece), first, std::nullopt)));
    first = false;
    return ok;  // false stops the generation: nobody reads it any more
  };
  kairox::Session& session = job.lease->session();
  std::string text;
  Usage usage;
  kx_stop_reason reason = KX_STOP_END_OF_GENERATION;
  std::optional<ApiError> failure;
  try {
    if (gone) {
      reason = KX_STOP_CALLBACK;
    } else if (endpoint == Endpoint::kChat) {
      const kairox::ChatResult cr =
          session.Chat(r.messages, gp, on_text, job.sampler.get(), /*default_system=*/true);
      text = cr.text;
      usage = {cr.n_prompt, cr.n_tokens, cr.n_reused};
      reason = cr.stop_reason;
    } else {
      // The prefix of the prompt the session holds stays; the rest is evaluated.
      const std::vector<int32_t> held = session.Tokens();
      const std::vector<int32_t>& ids = job.prompt_ids;
      size_t keep = 0;
      while (keep < held.size() && keep + 1 < ids.size() && held[keep] == ids[keep]) ++keep;
      session.Truncate(static_cast<int32_t>(keep));
      session.Eval(
          std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end()));
      const kairox::GenerateResult gr = session.Generate("", gp, on_text, job.sampler.get());
      text = gr.text;
      usage = {static_cast<int32_t>(ids.size()), gr.n_tokens, static_cast<int32_t>(keep)};
      reason = gr.stop_reason;
    }
  } catch (const kairox::Error& e) {
    failure = ApiError{
        e.status() == KX_STATUS_CONTEXT_FULL ? 400 : 500, e.what(),
        e.status() == KX_STATUS_CONTEXT_FULL ? "invalid_request_error" : "server_error", "", ""};
  }
  job.lease.reset();  // the session goes back before the last bytes are sent
  if (gone || reason == KX_STOP_CALLBACK) {
    disconnects_.fetch_add(1);
    return std::nullopt;
  }
  if (sink == nullptr) {
    if (failure) return failure;
    *body = Dump(CompletionBody(endpoint, job.rid, text, reason, usage));
    return std::nullopt;
  }
  if (failure) {
    send(SseEvent(ErrorBody(*failure)));
  } else {
    send(SseEvent(ChunkBody(endpoint, job.rid, "", first, reason)));
    if (r.include_usage) send(SseEvent(UsageChunkBody(endpoint, job.rid, usage)));
  }
  send("data: [DONE]\n\n");
  return std::nullopt;
}

}  // namespace kx::server
