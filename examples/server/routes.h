// kairox-server's HTTP endpoints (cpp-httplib): /v1/chat/completions and /v1/completions
// (streamed as server-sent events or whole), /v1/models, /health. Each generating request
// takes a session from the SlotPool for its whole generation; a streamed one stops when
// its client goes away (the next write fails) and gives the session back.
//
//   Routes routes(model, pool, options);
//   routes.Register(http_server);
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "kairox/kairox.hpp"
#include "server/api.h"
#include "server/slots.h"

namespace kx::server {

struct RouteOptions {
  std::string model_id;                   // what /v1/models and every response call the model
  std::string api_key;                    // "": no authentication
  uint64_t max_body = uint64_t{8} << 20;  // bytes of a request body; more: 413
  int32_t default_max_tokens;      // for requests that name none (-1: until the end or a full ctx)
  kairox::SamplerParams sampling;  // defaults for what a request leaves out
  bool fixed_seed = false;         // sampling.seed for requests without one (else random)
};

class Routes {
 public:
  Routes(const kairox::Model& model, SlotPool& pool, RouteOptions options);

  void Register(httplib::Server& server);

  // Stops every running generation (before its next token) and refuses new ones.
  void Shutdown();

 private:
  struct Job;
  void Generate(const httplib::Request& req, const httplib::ContentReader& reader,
                httplib::Response& res, Endpoint endpoint);
  // Runs the job's generation and gives its session back. Streams it through `sink` when
  // not null (an error then goes into the stream); otherwise fills *body with the whole
  // response, or returns the error to send.
  std::optional<ApiError> Run(Job& job, httplib::DataSink* sink, std::string* body);
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  // The request body, at most max_body bytes; false (and the error sent) otherwise.
  bool ReadBody(const httplib::ContentReader& reader, httplib::Response& res,
                std::string* body) const;
  ResponseId NewId(Endpoint endpoint);

  const kairox::Model& model_;
  SlotPool& pool_;
  RouteOptions options_;
  int32_t n_vocab_;
  int32_t n_ctx_;
  volatile int32_t abort_all_ = 0;  // kx_generate_params.abort_flag of every generation
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> disconnects_{0};
};

// Sends `error` in OpenAI's shape with its status.
void SendError(httplib::Response& res, const ApiError& error);

}  // namespace kx::server
