// kairox-perplexity: perplexity of a model over a text, computed as llama.cpp's
// llama-perplexity does but for one token: it scores c/2 tokens per chunk, llama-perplexity
// c/2 − 1 (from c/2 + 1), which moves the figure by ~1 % (benchmarks/peer/README.md).
//
//   kairox-perplexity -m model.gguf -f wiki.test.raw [-c 512] [--chunks K] [-t N] [-b N]
//
// The text is tokenized whole (no special-token parsing; BOS first when the
// model's add_bos says so), cut into non-overlapping chunks of c tokens, and
// each chunk is evaluated from an empty KV cache (with BOS in its first slot
// when the model adds BOS). Tokens at positions [c/2, c) of every chunk are
// scored (the first half only gives them context). The running perplexity
// goes to stderr; the last line of stdout is "PPL = <value> +/- <stderr>".
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/timer.h"
#include "common/cli_app.h"
#include "common/progress.h"
#include "common/sparse_args.h"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

#ifndef KX_VERSION_STRING
#define KX_VERSION_STRING "unknown"
#endif

namespace kx {
namespace {

constexpr int kDefaultContext = 512;

struct Args {
  std::string model;
  std::string text_file;
  std::string tokens_json;
  int n_ctx = kDefaultContext;
  int n_chunks = -1;  // all
  int n_threads = 0;  // engine default
  int n_batch = 0;    // engine default
  EngineOptions engine;  // the sparsity flags
};

constexpr const char* kDescription =
    "kairox-perplexity: perplexity of a model over a text, computed as llama.cpp's\n"
    "llama-perplexity does (chunks of -c tokens from an empty cache, the second half scored),\n"
    "but scoring tokens [c/2, c) of each chunk where llama-perplexity scores [c/2+1, c).\n"
    "With a sidecar, batches run masked-dense (exactly the sparse model's arithmetic, with\n"
    "dense kernels); -b 1 runs the sparse kernels.\n"
    "The last line of stdout is \"PPL = <value> +/- <estimated error>\".";

// Parses argv into *a. Returns cli::kContinue to go on, else the exit code (0 after --help or
// --version, 1 after an error, which is printed).
int ParseArgs(int argc, char** argv, Args* a) {
  CLI::App app(kDescription, "kairox-perplexity");
  cli::SetUp(app);
  bool version = false;
  app.add_option("-m,--model", a->model, "GGUF model")->type_name("FILE");
  app.add_option("-f,--file", a->text_file, "text to score (tokenized whole, no special tokens)")
      ->type_name("FILE");
  cli::AddInt(app, "-c,--ctx-size", &a->n_ctx, 2, cli::kMaxContext,
              "tokens per chunk; tokens [N/2, N) of each chunk are scored");
  cli::AddInt(app, "--chunks", &a->n_chunks, 1, cli::kMaxCount,
              "score only the first K chunks (default: all)")
      ->default_str("all");
  cli::AddInt(app, "-t,--threads", &a->n_threads, 1, cli::kMaxThreads,
              "threads (default: all cores)")
      ->default_str("all cores");
  cli::AddInt(app, "-b,--batch-size", &a->n_batch, 1, cli::kMaxContext,
              "tokens per prefill batch (default: the engine's)")
      ->default_str("the engine's");
  app.add_option("--tokens-json", a->tokens_json,
                 "token ids to score instead of tokenizing -f: a JSON list, {\"tokens\": [...]} "
                 "or {\"chunks\": [[...], ...]}")
      ->type_name("FILE");
  app.add_flag("--version", version, "print the version and exit");
  cli::AddSparseOptions(app, &a->engine);
  if (const int rc = cli::Parse(app, argc, argv); rc != cli::kContinue) return rc;
  if (version) {
    std::printf("kairox-perplexity %s\n", KX_VERSION_STRING);
    return 0;
  }
  auto fail = [](const char* msg) {
    std::fprintf(stderr, "kairox-perplexity: error: %s\n", msg);
    return 1;
  };
  if (a->model.empty()) return fail("no model given (-m MODEL)");
  if (a->text_file.empty() && a->tokens_json.empty()) {
    return fail("no text given (-f TEXT or --tokens-json FILE)");
  }
  return cli::kContinue;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s '%s' is a directory", what, path));
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("cannot open %s '%s': %s", what, path,
                                               std::strerror(errno != 0 ? errno : ENOENT)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrFormat("error reading %s '%s'", what, path));
  return ss.str();
}

// A JSON list of ids, or an object whose "tokens" member is one.
absl::StatusOr<std::vector<int32_t>> ReadTokensJson(const std::string& path, int n_vocab) {
  KX_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "token file"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("'" + path + "' is not valid JSON");
  if (j.is_object() && j.contains("tokens")) {
    j = j["tokens"];
  } else if (j.is_object() && j.contains("chunks") && j["chunks"].is_array()) {
    // Chunks one after another, as the golden files store them.
    nlohmann::json flat = nlohmann::json::array();
    for (const nlohmann::json& chunk : j["chunks"]) {
      if (!chunk.is_array())
        return absl::InvalidArgumentError("'" + path + "': a chunk is not a list");
      for (const nlohmann::json& id : chunk) flat.push_back(id);
    }
    j = std::move(flat);
  }
  if (!j.is_array()) {
    return absl::InvalidArgumentError(
        "'" + path +
        "' must hold a list of token ids, {\"tokens\": [...]} or {\"chunks\": [[...]]}");
  }
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s': element %d is not a token id in [0, %d)", path, i, n_vocab));
    }
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return ids;
}

// -log softmax(logits)[target], in double so long vocabularies lose nothing.
double NegLogLikelihood(std::span<const float> logits, int32_t target) {
  float max_logit = logits[0];
  for (float v : logits) max_logit = std::max(max_logit, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  return std::log(sum) - (static_cast<double>(logits[static_cast<size_t>(target)]) - max_logit);
}

absl::Status Run(const Args& args) {
  // Fail on unreadable inputs before spending time loading the model.
  std::string text;
  if (args.tokens_json.empty()) {
    KX_ASSIGN_OR_RETURN(text, ReadFile(args.text_file, "text file"));
  } else {
    std::ifstream probe(args.tokens_json);
    if (!probe) return absl::NotFoundError("cannot open token file '" + args.tokens_json + "'");
  }
  {
    std::ifstream probe(args.model, std::ios::binary);
    if (!probe) return absl::NotFoundError("cannot open model file '" + args.model + "'");
  }

  EngineOptions opts = args.engine;
  opts.n_ctx = args.n_ctx;
  if (args.n_threads > 0) opts.n_threads = args.n_threads;
  if (args.n_batch > 0) opts.n_batch = args.n_batch;
  KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Load(args.model, opts));
  const Tokenizer& tok = engine->tokenizer();
  const bool add_bos = tok.add_bos() && tok.bos_id() >= 0;

  std::vector<int32_t> tokens;
  Stopwatch tokenize_time;
  if (!args.tokens_json.empty()) {
    KX_ASSIGN_OR_RETURN(tokens, ReadTokensJson(args.tokens_json, engine->n_vocab()));
  } else {
    tokens = tok.Encode(text, /*add_special=*/false, /*parse_special=*/false);
    if (add_bos) tokens.insert(tokens.begin(), tok.bos_id());
  }
  std::fprintf(stderr, "perplexity: %zu tokens (%.2f s to read)\n", tokens.size(),
               tokenize_time.ElapsedSeconds());

  const size_t n_ctx = static_cast<size_t>(args.n_ctx);
  const size_t available = tokens.size() / n_ctx;
  if (available == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the text has %d tokens, fewer than one chunk of %d (-c); use a longer text or a "
        "smaller -c",
        tokens.size(), n_ctx));
  }
  const size_t n_chunks =
      args.n_chunks > 0 ? std::min(available, static_cast<size_t>(args.n_chunks)) : available;
  const size_t first = n_ctx / 2;  // scored positions: [first, n_ctx)
  std::fprintf(stderr, "perplexity: %zu chunks of %zu tokens, scoring positions [%zu, %zu)%s\n",
               n_chunks, n_ctx, first, n_ctx, add_bos ? ", BOS first in each chunk" : "");

  double nll_sum = 0.0, nll2_sum = 0.0;
  int64_t count = 0;
  std::vector<int32_t> chunk(n_ctx);
  Stopwatch total;
  // On a terminal a progress bar runs and the per-chunk values are printed at
  // the end; in logs they stream as llama-perplexity prints them.
  cli::Progress bar("perplexity", static_cast<int64_t>(n_chunks));
  const bool stream_values = isatty(STDERR_FILENO) == 0;
  std::string values;
  for (size_t c = 0; c < n_chunks; ++c) {
    const int32_t* src = tokens.data() + c * n_ctx;
    chunk.assign(src, src + n_ctx);
    if (add_bos) chunk[0] = tok.bos_id();
    engine->TruncateKv(0);
    Stopwatch pass;
    KX_RETURN_IF_ERROR(engine->Eval(chunk, /*all_logits=*/true));
    for (size_t i = first; i < n_ctx; ++i) {
      // Token i is predicted by the logits at i - 1 (i >= first >= 1).
      const double nll = NegLogLikelihood(engine->Logits(static_cast<int>(i - 1)), src[i]);
      nll_sum += nll;
      nll2_sum += nll * nll;
      ++count;
    }
    if (c == 0) {
      const double s = pass.ElapsedSeconds();
      std::fprintf(stderr, "perplexity: %.2f s per pass, ETA %.1f min\n", s,
                   s * static_cast<double>(n_chunks) / 60.0);
    }
    const std::string value =
        absl::StrFormat("[%zu]%.4f,", c + 1, std::exp(nll_sum / static_cast<double>(count)));
    if (stream_values) {
      std::fputs(value.c_str(), stderr);
      std::fflush(stderr);
    } else {
      values += value;
      bar.Update(static_cast<int64_t>(c + 1));
    }
  }
  bar.Finish();
  std::fprintf(stderr, "%s\n", values.c_str());

  const double mean = nll_sum / static_cast<double>(count);
  const double mean2 = nll2_sum / static_cast<double>(count);
  const double ppl = std::exp(mean);
  // Standard error of the mean NLL, carried to PPL to first order (as
  // llama-perplexity estimates it).
  double ppl_err = 0.0;
  if (count > 1) {
    const double var = std::max(0.0, mean2 - mean * mean);
    ppl_err = ppl * std::sqrt(var / static_cast<double>(count - 1));
  }
  std::printf("chunks: %zu, context: %zu, scored tokens: %lld, time: %.2f s\n", n_chunks, n_ctx,
              static_cast<long long>(count), total.ElapsedSeconds());
  std::printf("mean NLL = %.6f\n", mean);
  if (const SparseRuntime* sp = engine->sparse(); sp != nullptr) {
    const SparseStats& st = sp->stats();
    const double denom = static_cast<double>(st.layer_tokens) * static_cast<double>(st.n_ff);
    std::printf("sparse: sparsity %.2f%s, predicted %.1f %%, kept %.1f %% of FFN neurons",
                sp->sparsity(), sp->config().use_predictor ? "" : " (oracle)",
                denom > 0 ? 100.0 * st.predicted / denom : 0.0,
                denom > 0 ? 100.0 * st.kept / denom : 0.0);
    if (st.actual > 0) {
      std::printf(", recall %.3f", 1.0 - static_cast<double>(st.missed) / st.actual);
    }
    std::printf("\n");
  } else {
    std::printf("dense\n");
  }
  std::printf("PPL = %.4f +/- %.5f\n", ppl, ppl_err);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kx

int main(int argc, char** argv) {
  kx::Args args;
  if (const int rc = kx::ParseArgs(argc, argv, &args); rc != kx::cli::kContinue) return rc;
  absl::Status s = kx::Run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "kairox-perplexity: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
