// kairox-server: an OpenAI-compatible HTTP server over the public C ABI (kairox.hpp):
// /v1/chat/completions, /v1/completions (streamed or whole), /v1/models, /health.
// --parallel N sessions over one loaded model; a bounded queue behind them (503 when full).
// HTTP from Debian's cpp-httplib, JSON from nlohmann/json. docs/server.md has the API.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/cli_app.h"
#include "common/sampler_args.h"
#include "common/sparse_args.h"
#include "kairox/kairox.hpp"
#include "server/routes.h"
#include "server/slots.h"

namespace {

constexpr const char* kDescription =
    "kairox-server: an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions,\n"
    "/v1/models, /health) for one model, with --parallel sessions and a bounded queue.\n"
    "Listens on 127.0.0.1 unless --host says otherwise. Sampling flags are the defaults of\n"
    "requests that do not name them (the library's, as in kairox-cli).";

constexpr int32_t kDefaultCtx = 4096;
constexpr int64_t kMaxPort = 65535;
constexpr int64_t kMaxSlots = 256;
// httplib threads beyond one per session and queue place: /health, /v1/models and the 503s
// are answered while every session and queue place is taken.
constexpr int kSpareThreads = 4;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-server: error: %s\n", msg.c_str());
  return 1;
}

// The model's name in the API: the file name without .gguf.
std::string ModelId(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const std::string ext = ".gguf";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) {
    name.resize(name.size() - ext.size());
  }
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "kairox-server");
  kx::cli::SetUp(app);
  std::string model_path = kx::cli::DefaultModelPath();
  std::string host = "127.0.0.1", api_key, alias;
  int64_t port = 8080, n_predict = -1, seed = -1, parallel = 1, queue = 8, timeout = 30;
  int64_t max_body = int64_t{8} << 20;
  int32_t n_threads = 0;
  bool version = false;
  kairox::SamplerParams sp;     // the library's defaults (kx_sampler_params_init)
  kairox::SessionParams sessp;  // n_ctx 0: min(trained, kDefaultCtx)
  app.add_option("-m,--model", model_path,
                 "GGUF model (default: $KAIROX_MODEL, else the fetched default model)")
      ->type_name("PATH");
  app.add_option("--alias", alias, "the model's name in the API (default: the file name)")
      ->type_name("NAME");
  app.add_option("--host", host, "address to listen on (0.0.0.0: every interface)")
      ->type_name("ADDR");
  kx::cli::AddInt(app, "--port", &port, 0, kMaxPort, "TCP port (0: any free one, printed)");
  app.add_option("--api-key", api_key,
                 "require 'Authorization: Bearer KEY' on /v1/* (default: $KAIROX_API_KEY, if set)")
      ->type_name("KEY");
  kx::cli::AddInt(app, "--parallel", &parallel, 1, kMaxSlots,
                  "sessions: requests generated at the same time");
  kx::cli::AddInt(app, "--queue", &queue, 0, kx::cli::kMaxCount,
                  "requests that may wait for a session; more get HTTP 503");
  kx::cli::AddInt(app, "--timeout", &timeout, 1, kx::cli::kMaxCount,
                  "seconds a client may take to send its request, or to take the response");
  kx::cli::AddInt(app, "--max-body", &max_body, 1, kx::cli::kMaxCount,
                  "largest request body in bytes (HTTP 413 above)");
  kx::cli::AddInt(app, "-n,--n-predict", &n_predict, -1, kx::cli::kMaxContext,
                  "most tokens per answer when a request names no max_tokens (-1: until the "
                  "model stops or the context is full)");
  kx::cli::AddInt(app, "-t,--threads", &n_threads, 0, kx::cli::kMaxThreads,
                  "threads per session (0: the cores divided among the sessions)");
  kx::cli::AddInt(app, "-c,--ctx-size", &sessp.n_ctx, 0, kx::cli::kMaxContext,
                  "context of each session (0: min(trained, 4096))");
  const std::string sampling = "sampling (defaults of requests that name none)";
  kx::cli::AddSamplerOptions(app, &sp, &seed, sampling,
                             "seed of requests without one (-1: a random one per request)");
  app.add_flag("--version", version, "print the version and exit");
  kx::cli::AddSparseOptions(app, &sessp);
  if (const int rc = kx::cli::Parse(app, argc, argv); rc != kx::cli::kContinue) return rc;
  if (version) {
    std::printf("kairox-server %s\n", kairox::Version().c_str());
    return 0;
  }
  if (api_key.empty()) {
    if (const char* k = std::getenv("KAIROX_API_KEY"); k != nullptr) api_key = k;
  }
  if (seed >= 0) sp.seed = static_cast<uint64_t>(seed);

  // SIGINT/SIGTERM are taken by one thread (below) that stops the server; every other thread,
  // httplib's and the sessions' workers, inherits the blocked mask. A write to a client that
  // left must fail, not end the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    kairox::Sampler check(sp);  // the sampling flags are checked before the model loads
    kairox::ModelOptions mo;
    mo.n_threads = n_threads;
    kairox::Model model(model_path, mo);
    const kx_model_info info = model.Info();
    if (sessp.n_ctx == 0) sessp.n_ctx = std::min(kDefaultCtx, info.n_ctx_train);
    if (n_threads == 0) {
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      n_threads = std::max(1, cores / static_cast<int>(parallel));
    }
    sessp.n_threads = n_threads;
    kx::server::SlotPool pool(model, sessp, static_cast<int>(parallel), static_cast<int>(queue));
    kx::server::RouteOptions ro;
    ro.model_id = alias.empty() ? ModelId(model_path) : alias;
    ro.api_key = api_key;
    ro.max_body = static_cast<uint64_t>(max_body);
    ro.default_max_tokens = static_cast<int32_t>(n_predict);
    ro.sampling = sp;
    ro.fixed_seed = seed >= 0;
    kx::server::Routes routes(model, pool, ro);

    httplib::Server server;
    const size_t n_http_threads = static_cast<size_t>(parallel + queue) + kSpareThreads;
    server.new_task_queue = [n_http_threads] { return new httplib::ThreadPool(n_http_threads); };
    server.set_read_timeout(static_cast<time_t>(timeout), 0);
    server.set_write_timeout(static_cast<time_t>(timeout), 0);
    server.set_payload_max_length(static_cast<size_t>(max_body));
    routes.Register(server);

    int bound = 0;
    if (port == 0) {
      bound = server.bind_to_any_port(host);
    } else {
      bound = server.bind_to_port(host, static_cast<int>(port)) ? static_cast<int>(port) : -1;
    }
    if (bound <= 0) return Fail("cannot listen on " + host + ":" + std::to_string(port));
    std::atomic<bool> signalled{false};
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      signalled = true;
      routes.Shutdown();
      server.stop();
    });
    std::printf(
        "kairox-server %s: listening on http://%s:%d (model %s, %lld session(s) of %d "
        "tokens, %d thread(s) each, queue %lld)\n",
        kairox::Version().c_str(), host.c_str(), bound, ro.model_id.c_str(),
        static_cast<long long>(parallel), sessp.n_ctx, n_threads, static_cast<long long>(queue));
    std::fflush(stdout);
    const bool ok = server.listen_after_bind();
    // Stopped by a signal, or listening failed: then the stopper is woken to end.
    if (!signalled) kill(getpid(), SIGTERM);
    stopper.join();
    if (!ok) return Fail("the listening socket failed");
  } catch (const kairox::Error& e) {
    return Fail(e.what());
  }
  return 0;
}
