// kairox-cli: generate text from a prompt, or describe a GGUF file.
// Only the generated text goes to stdout; logs and statistics go to stderr.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/timer.h"
#include "common/cli_args.h"
#include "common/sparse_args.h"
#include "common/progress.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"
#include "kairox/version.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/gguf_info.h"
#include "model/llama.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace {

constexpr const char* kUsage = R"(usage: kairox-cli [options]

  -m, --model PATH        GGUF model (default: $KAIROX_MODEL or the fetched default model)
  -p, --prompt TEXT       prompt to continue
  -f, --file PATH         read the prompt from a file
      --chat              wrap the prompt as one user turn of the model's chat template
  -n, --n-predict N       tokens to generate (default 128; -1 = until end of generation)
  -t, --threads N         threads (default: all available cores)
  -c, --ctx-size N        context size (default: min(trained, 4096))
      --kv-type T         KV cache element type: f16 (default) or q8_0
  -s, --seed N            sampling seed (default 42)
      --temp T            temperature (default 0.8; 0 = greedy)
      --top-k N           top-k (default 40; 0 = off)
      --top-p P           top-p (default 0.95; 1 = off)
      --min-p P           min-p (default 0.05; 0 = off)
      --repeat-penalty R  repetition penalty (default 1.0 = off)
      --repeat-last-n N   tokens the penalty looks back over (default 64)
      --logit-bias LIST   add to token logits: comma-separated ID+BIAS / ID-BIAS entries,
                          e.g. 15043+1.5,2-inf (-inf bans the token)
      --stop STR          stop when the output contains STR (STR itself is not printed)
      --no-mmap           read the model into memory instead of mapping it
      --mlock             lock the model in RAM (a warning if RLIMIT_MEMLOCK is too small)
      --info              print the model's metadata and tensor table, then exit
      --all-tensors       with --info: list every tensor
      --verbose           log more on stderr
  -h, --help              this help
      --version           print the version
)";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-cli: error: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  kx::cli::Args args(
      argc, argv,
      kx::cli::WithSparse({"-m", "--model", "-p", "--prompt", "-f", "--file", "-n",
                           "--n-predict", "-t", "--threads", "-c", "--ctx-size", "-s", "--seed",
                           "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                           "--repeat-last-n", "--logit-bias", "--stop", "--kv-type"},
                          false),
      kx::cli::WithSparse({"--chat", "--info", "--all-tensors", "--verbose", "-h", "--help",
                           "--version", "--no-mmap", "--mlock"},
                          true));
  if (!args.ok()) return Fail(args.error());
  if (args.Has("-h", "--help")) {
    std::fputs(kUsage, stdout);
    std::fputs(kx::cli::kSparseUsage, stdout);
    return 0;
  }
  if (args.Has("--version")) {
    std::printf("kairox-cli %s\n", KAIROX_VERSION_STRING);
    return 0;
  }
  if (args.Has("--verbose")) kx::SetLogLevel(spdlog::level::info);
  const std::string model_path = args.Str("-m", "--model", kx::cli::DefaultModelPath());

  if (args.Has("--info")) {
    auto file = kx::GgufFile::Open(model_path);
    if (!file.ok()) return Fail(std::string(file.status().message()));
    std::fputs(kx::DescribeGguf(*file, args.Has("--all-tensors")).c_str(), stdout);
    return 0;
  }

  std::string prompt = args.Str("-p", "--prompt", "");
  if (args.Has("-f", "--file")) {
    std::ifstream in(args.Str("-f", "--file", ""), std::ios::binary);
    if (!in) return Fail("cannot read prompt file '" + args.Str("-f", "--file", "") + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  kx::EngineOptions opts;
  kx::cli::ApplySparseArgs(args, &opts);
  if (!args.ok()) return Fail(args.error());
  opts.n_threads = static_cast<int>(args.Int("-t", "--threads", 0, 0));
  opts.n_ctx = static_cast<int>(args.Int("-c", "--ctx-size", 0, 0));
  const std::string kv_type = args.Str("--kv-type", "", "f16");
  if (kv_type == "q8_0") {
    opts.kv_type = kx::EngineOptions::KvType::kQ8_0;
  } else if (kv_type != "f16") {
    return Fail("--kv-type expects f16 or q8_0, got '" + kv_type + "'");
  }
  kx::SamplerParams sp;
  sp.seed = static_cast<uint64_t>(args.Int("-s", "--seed", 42, 0, LLONG_MAX));
  sp.temperature = static_cast<float>(args.Float("--temp", "", sp.temperature));
  sp.top_k = static_cast<int>(args.Int("--top-k", "", sp.top_k));
  sp.top_p = static_cast<float>(args.Float("--top-p", "", sp.top_p));
  sp.min_p = static_cast<float>(args.Float("--min-p", "", sp.min_p));
  sp.repeat_penalty = static_cast<float>(args.Float("--repeat-penalty", "", sp.repeat_penalty));
  sp.repeat_last_n = static_cast<int>(args.Int("--repeat-last-n", "", sp.repeat_last_n));
  if (args.Has("--logit-bias")) {
    auto bias = kx::ParseLogitBias(args.Str("--logit-bias", "", ""));
    if (!bias.ok()) return Fail("--logit-bias: " + std::string(bias.status().message()));
    sp.logit_bias = *std::move(bias);
  }
  const std::string stop = args.Str("--stop", "", "");
  kx::ModelOptions model_opts;
  model_opts.use_mmap = !args.Has("--no-mmap");
  model_opts.mlock = args.Has("--mlock");
  const long long n_predict = args.Int("-n", "--n-predict", 128, -1);
  if (!args.ok()) return Fail(args.error());
  if (absl::Status st = kx::ValidateSamplerParams(sp); !st.ok()) {
    return Fail("sampling: " + std::string(st.message()));
  }
  if (prompt.empty()) return Fail("no prompt: give -p TEXT or -f FILE (see --help)");
  if (opts.n_threads < 0) return Fail("--threads must be >= 0");
  if (args.Has("--stop") && stop.empty()) return Fail("--stop needs a non-empty string");

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

  if (args.Has("--chat")) {
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
  while (generated < limit && engine.n_past() < engine.n_ctx()) {
    kx::Stopwatch sample_clock;
    const int32_t next = sampler.Sample(engine.Logits(), history);
    sample_s += sample_clock.ElapsedSeconds();
    if (tok.IsEndOfGeneration(next)) break;
    history.push_back(next);
    ++generated;
    print(stops.Push(utf8.Push(tok.TokenToPiece(next, /*render_special=*/false))));
    if (stops.stopped()) break;
    if (generated == limit || engine.n_past() >= engine.n_ctx()) break;
    if (auto st = engine.Eval({&next, 1}); !st.ok()) return Fail(std::string(st.message()));
  }
  // What was held back: an unfinished character or the start of the stop string.
  print(stops.Push(utf8.Flush()));
  print(stops.Flush());
  std::fputc('\n', stdout);
  const double tg_s = tg_clock.ElapsedSeconds();
  std::fprintf(stderr,
               "\nkairox-cli: prompt %zu tokens in %.3f s (%.1f t/s); generated %lld tokens in "
               "%.3f s (%.1f t/s, sampling %.1f%%); %d threads\n",
               ids.size(), pp_s, ids.size() / pp_s, generated, tg_s,
               generated > 0 ? generated / tg_s : 0.0, tg_s > 0 ? 100.0 * sample_s / tg_s : 0.0,
               engine.n_threads());
  return 0;
}
