// kairox-cli: generate text from a prompt, or describe a GGUF file.
// Only the generated text goes to stdout; logs and statistics go to stderr.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/timer.h"
#include "common/cli_app.h"
#include "common/progress.h"
#include "common/sampler_args.h"
#include "common/sparse_args.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/sparse_runtime.h"
#include "engine/stop_strings.h"
#include "kairox/version.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/gguf_info.h"
#include "model/llama.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace {

constexpr const char* kDescription =
    "kairox-cli: continue a prompt with a model, or describe a GGUF file (--info). Only the\n"
    "generated text goes to stdout; logs and statistics go to stderr. For a conversation, use\n"
    "kairox-chat.";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-cli: error: %s\n", msg.c_str());
  return 1;
}

// The prompt with C-style escapes turned into their characters (-e): \n \t \r \\ \" \' and \0;
// any other backslash is kept as typed.
std::string Unescape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    switch (text[i + 1]) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      case '\\':
        out += '\\';
        break;
      case '"':
        out += '"';
        break;
      case '\'':
        out += '\'';
        break;
      default:
        out += text.substr(i, 2);
        break;
    }
    ++i;
  }
  return out;
}

// The prompt file's contents, or an error that says why it cannot be read.
absl::StatusOr<std::string> ReadPromptFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError("-f: '" + path + "' is a directory, not a prompt file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError("-f: cannot read prompt file '" + path +
                               "': " + std::strerror(errno != 0 ? errno : ENOENT));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError("-f: error reading prompt file '" + path + "'");
  return ss.str();
}

// A seed a user can pass back with -s to reproduce the run.
uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32 | rd()) & static_cast<uint64_t>(INT64_MAX);
}

// "dense" or "sparse (sidecar PATH, sparsity S[, oracle][, RAM tier])", for the stats line.
std::string DescribeFfn(const kx::Engine& engine) {
  const kx::SparseRuntime* sp = engine.sparse();
  if (sp == nullptr) return "dense";
  char level[32];
  std::snprintf(level, sizeof level, "%.2f", sp->sparsity());
  std::string s = "sparse (sidecar " + sp->sidecar().path() + ", sparsity " + level;
  if (sp->tier() != nullptr) s += ", RAM tier";
  return s + ")";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "kairox-cli");
  kx::cli::SetUp(app);
  std::string model_path = kx::cli::DefaultModelPath();
  std::string prompt, prompt_file, kv_type = "f16", logit_bias, stop;
  bool escape = false, chat = false, info = false, all_tensors = false, verbose = false;
  bool version = false, no_mmap = false, mlock = false, wants_chat = false;
  int64_t n_predict = 128, seed = -1;
  kx::EngineOptions opts;
  kx::SamplerParams sp;  // the library's defaults (kx::SamplerParams), shown by --help

  app.add_option("-m,--model", model_path,
                 "GGUF model (default: $KAIROX_MODEL, else the "
                 "fetched default model)")
      ->type_name("PATH");
  app.add_option("-p,--prompt", prompt, "prompt to continue");
  app.add_option("-f,--file", prompt_file, "read the prompt from a file")->type_name("PATH");
  app.add_flag("-e,--escape", escape,
               "process escapes in the prompt: \\n \\t \\r \\0 \\\\ \\\" \\'");
  app.add_flag("--chat", chat, "wrap the prompt as one user turn of the model's chat template");
  kx::cli::AddInt(app, "-n,--n-predict", &n_predict, -1, kx::cli::kMaxCount,
                  "tokens to generate (-1: until the end of generation or a full context)");
  kx::cli::AddInt(app, "-t,--threads", &opts.n_threads, 0, kx::cli::kMaxThreads,
                  "threads (0: all available cores)");
  kx::cli::AddInt(app, "-c,--ctx-size", &opts.n_ctx, 0, kx::cli::kMaxContext,
                  "context size (0: min(trained, 4096))");
  app.add_option("--kv-type", kv_type, "KV cache element type")
      ->check(kx::cli::OneOf({"f16", "q8_0"}))
      ->type_name("f16|q8_0");
  const std::string sampling = "sampling (the library's defaults, as in kairox-chat and the C ABI)";
  kx::cli::AddSamplerOptions(app, &sp, &seed, sampling,
                             "sampling seed (-1: a random one, printed with the statistics)");
  app.add_option("--logit-bias", logit_bias,
                 "add to token logits: comma-separated ID+BIAS / ID-BIAS entries, e.g. "
                 "15043+1.5,2-inf (-inf bans the token)")
      ->type_name("LIST")
      ->group(sampling);
  app.add_option("--stop", stop, "stop when the output contains STR (STR itself is not printed)")
      ->type_name("STR");
  app.add_flag(
      "--no-mmap", no_mmap,
      "read the model into memory (2 MiB huge pages: faster decode) instead of mapping it");
  app.add_flag("--mlock", mlock,
               "lock the model in RAM (a warning if RLIMIT_MEMLOCK is too small)");
  app.add_flag("--info", info, "print the model's metadata and tensor table, then exit");
  app.add_flag("--all-tensors", all_tensors, "with --info: list every tensor");
  app.add_flag("--verbose", verbose, "log more on stderr");
  app.add_flag("--version", version, "print the version and exit");
  // llama-cli's chat flags (-cnv and -if are rewritten to their long spelling): refused with a
  // pointer rather than taken as something else.
  app.add_flag("-i,--interactive,--conversation,--interactive-first", wants_chat,
               "(also -cnv, -if) not supported: kairox-cli does not chat, use kairox-chat")
      ->group("refused");
  kx::cli::AddSparseOptions(app, &opts);
  if (const int rc = kx::cli::Parse(app, argc, argv); rc != kx::cli::kContinue) return rc;

  if (version) {
    std::printf("kairox-cli %s\n", KAIROX_VERSION_STRING);
    return 0;
  }
  if (wants_chat) {
    return Fail(
        "kairox-cli does not chat (-i, -cnv, --interactive, --conversation, -if): use "
        "kairox-chat");
  }
  if (verbose) kx::SetLogLevel(spdlog::level::info);

  if (info) {
    auto file = kx::GgufFile::Open(model_path);
    if (!file.ok()) return Fail(std::string(file.status().message()));
    std::fputs(kx::DescribeGguf(*file, all_tensors).c_str(), stdout);
    return 0;
  }

  if (app.count("--file") > 0) {
    absl::StatusOr<std::string> text = ReadPromptFile(prompt_file);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    prompt = *std::move(text);
  }
  if (escape) prompt = Unescape(prompt);
  if (kv_type == "q8_0") opts.kv_type = kx::EngineOptions::KvType::kQ8_0;
  sp.seed = seed < 0 ? RandomSeed() : static_cast<uint64_t>(seed);
  if (!logit_bias.empty() || app.count("--logit-bias") > 0) {
    auto bias = kx::ParseLogitBias(logit_bias);
    if (!bias.ok()) return Fail("--logit-bias: " + std::string(bias.status().message()));
    sp.logit_bias = *std::move(bias);
  }
  kx::ModelOptions model_opts;
  model_opts.use_mmap = !no_mmap;
  model_opts.mlock = mlock;
  if (absl::Status st = kx::ValidateSamplerParams(sp); !st.ok()) {
    return Fail("sampling: " + std::string(st.message()));
  }
  if (prompt.empty()) return Fail("no prompt: give -p TEXT or -f FILE (see --help)");
  if (app.count("--stop") > 0 && stop.empty()) return Fail("--stop needs a non-empty string");

  auto model_or = kx::Model::Load(model_path, model_opts);
  if (!model_or.ok()) return Fail(std::string(model_or.status().message()));
  for (const kx::LogitBias& b : sp.logit_bias) {
    if (b.token >= (*model_or)->hparams().n_vocab) {
      return Fail("--logit-bias: token " + std::to_string(b.token) +
                  " is outside the vocabulary (" + std::to_string((*model_or)->hparams().n_vocab) +
                  " tokens)");
    }
  }
  auto engine_or = kx::Engine::Create(*std::move(model_or), opts);
  if (!engine_or.ok()) return Fail(std::string(engine_or.status().message()));
  kx::Engine& engine = **engine_or;
  const kx::Tokenizer& tok = engine.tokenizer();

  if (chat) {
    auto tmpl = engine.gguf().GetString("tokenizer.chat_template");
    const std::string source = tmpl.ok() ? std::string(*tmpl) : std::string();
    std::vector<kx::ChatMessage> messages = {{"user", prompt}};
    prompt = kx::ApplyChatTemplate(kx::ChatTemplateForGguf(engine.gguf()), messages,
                                   /*add_generation_prompt=*/true,
                                   kx::ExtractDefaultSystemPrompt(source));
  }
  std::vector<int32_t> ids = tok.Encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  if (ids.empty()) return Fail("the prompt encodes to no tokens");
  if (static_cast<long long>(ids.size()) >= engine.n_ctx()) {
    return Fail("the prompt has " + std::to_string(ids.size()) +
                " tokens, which does not fit the context of " + std::to_string(engine.n_ctx()) +
                " (raise -c, up to the model's trained " +
                std::to_string(engine.hparams().n_ctx_train) + ")");
  }

  // The prompt in slices, so a long one shows a progress bar (on a TTY, after 1 s).
  constexpr size_t kPromptSlice = 256;
  kx::Stopwatch pp_clock;
  {
    kx::cli::Progress bar("prompt", static_cast<int64_t>(ids.size()));
    for (size_t done = 0; done < ids.size();) {
      const size_t n = std::min(kPromptSlice, ids.size() - done);
      if (auto st = engine.Eval(std::span<const int32_t>(ids).subspan(done, n)); !st.ok()) {
        return Fail(std::string(st.message()));
      }
      done += n;
      bar.Update(static_cast<int64_t>(done));
    }
  }
  const double pp_s = pp_clock.ElapsedSeconds();

  kx::Sampler sampler(sp);
  kx::Utf8Stream utf8;
  kx::StopStringMatcher stops(stop.empty() ? std::vector<std::string>{}
                                           : std::vector<std::string>{stop});
  auto print = [](const std::string& text) {
    if (text.empty()) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  std::vector<int32_t> history = ids;
  long long generated = 0;
  kx::Stopwatch tg_clock;
  double sample_s = 0.0;
  const long long limit = n_predict < 0 ? engine.n_ctx() : n_predict;
  bool ended = false;  // by the end of generation or the stop string
  while (generated < limit && engine.n_past() < engine.n_ctx()) {
    kx::Stopwatch sample_clock;
    const int32_t next = sampler.Sample(engine.Logits(), history);
    sample_s += sample_clock.ElapsedSeconds();
    if (tok.IsEndOfGeneration(next)) {
      ended = true;
      break;
    }
    history.push_back(next);
    ++generated;
    print(stops.Push(utf8.Push(tok.TokenToPiece(next, /*render_special=*/false))));
    if (stops.stopped()) {
      ended = true;
      break;
    }
    if (generated == limit || engine.n_past() >= engine.n_ctx()) break;
    if (auto st = engine.Eval({&next, 1}); !st.ok()) return Fail(std::string(st.message()));
  }
  // What was held back: an unfinished character or the start of the stop string.
  print(stops.Push(utf8.Flush()));
  print(stops.Flush());
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double tg_s = tg_clock.ElapsedSeconds();
  // The context filled before -n tokens (or the end of generation): say so, the output is cut.
  if (!ended && generated < limit) {
    std::fprintf(stderr,
                 "kairox-cli: the context is full (%d tokens, -c): generation stopped after %lld "
                 "of %s tokens\n",
                 engine.n_ctx(), generated,
                 n_predict < 0 ? "unlimited" : std::to_string(n_predict).c_str());
  }
  std::fprintf(stderr,
               "\nkairox-cli: prompt %zu tokens in %.3f s (%.1f t/s); generated %lld tokens in "
               "%.3f s (%.1f t/s, sampling %.1f%%); %d threads; seed %llu; %s\n",
               ids.size(), pp_s, ids.size() / pp_s, generated, tg_s,
               generated > 0 ? generated / tg_s : 0.0, tg_s > 0 ? 100.0 * sample_s / tg_s : 0.0,
               engine.n_threads(), static_cast<unsigned long long>(sp.seed),
               DescribeFfn(engine).c_str());
  return 0;
}
