// kairox-chat: an interactive chat with a model, built on the public C ABI
// (through the header-only C++ wrapper kairox.hpp).
//
// The conversation is kept as messages; each turn re-renders it with the
// model's chat template and evaluates only the tokens after the part the
// session already holds. When the context fills, the oldest turns are dropped
// (with a message). Ctrl-C stops the current answer, not the program — also
// while the prompt is still being read, between two layers (the message is then
// dropped). When stdin is not a terminal, one prompt is read from it, answered,
// and the program exits (only the answer goes to stdout).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "chat/line_reader.h"
#include "common/cli_app.h"
#include "common/sampler_args.h"
#include "common/sparse_args.h"
#include "kairox/kairox.hpp"

namespace {

constexpr const char* kDescription =
    "kairox-chat: chat with a model using its chat template. Commands: /reset (forget the\n"
    "conversation), /stats (speed and context use), /exit (or Ctrl-D). Ctrl-C stops the\n"
    "current answer. When stdin is not a terminal, one prompt is read from it and answered.\n"
    "At a terminal the line is edited with libedit (~/.editrc) and Up/Down walk the history,\n"
    "$XDG_STATE_HOME/kairox/chat_history (KAIROX_CHAT_HISTORY=PATH, or off for none).\n"
    "Sampling defaults are the library's (as in kairox-cli and the C ABI).";

constexpr int32_t kDefaultCtx = 4096;
// Room kept free for an answer when old turns are dropped to fit a new one.
constexpr int32_t kMinAnswerRoom = 256;

// Read by the session's progress callback while the prompt is evaluated (between layers)
// and by kx_session_generate before each token.
volatile int32_t g_abort = 0;
volatile sig_atomic_t g_busy = 0;  // 1 from the start of a turn's evaluation to its end

constexpr char kCtrlCHint[] = "(Ctrl-C stops an answer; /exit or Ctrl-D quits)\n";

// At the prompt, Ctrl-C is a key libedit hands to the LineReader; a SIGINT comes only while
// a turn runs, or in the moment between two lines.
void OnSigint(int) {
  if (g_busy) {
    g_abort = 1;
  } else {
    ssize_t ignored = write(STDOUT_FILENO, "\n", 1);
    ignored = write(STDOUT_FILENO, kCtrlCHint, sizeof kCtrlCHint - 1);
    (void)ignored;
  }
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-chat: error: %s\n", msg.c_str());
  return 1;
}

// Busy for the scope: a Ctrl-C meanwhile stops the turn instead of reprinting the prompt.
struct BusyScope {
  BusyScope() {
    g_abort = 0;
    g_busy = 1;
  }
  ~BusyScope() { g_busy = 0; }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;
};

class Chat {
 public:
  // `show_progress`: the prompt's progress on stderr (a terminal) while it is read.
  Chat(kairox::Model& model, kairox::Session& session, kairox::Sampler& sampler, std::string system,
       int32_t n_predict, bool show_progress)
      : model_(model),
        session_(session),
        sampler_(sampler),
        system_(std::move(system)),
        n_predict_(n_predict),
        show_progress_(show_progress) {
    session_.SetProgressCallback([this](float progress) { return OnProgress(progress); });
    Reset();
  }

  void Reset() {
    messages_.clear();
    if (!system_.empty()) messages_.push_back({"system", system_});
    session_.Reset();
  }

  // Answers `user`, streaming the answer to stdout. Returns false when the
  // message could not be answered (the reason is printed).
  bool Turn(const std::string& user) {
    messages_.push_back({"user", user});
    if (!FitToContext()) {
      messages_.pop_back();
      return false;
    }
    BusyScope busy;  // before the evaluation: Ctrl-C from here on stops this turn
    kairox::GenerateParams gp;
    gp.max_tokens = n_predict_;
    gp.abort_flag = &g_abort;
    // The library evaluates only what the session does not hold yet (kx_session_chat).
    reading_ = true;
    shown_percent_ = -1;
    kairox::ChatResult r;
    try {
      r = session_.Chat(
          messages_, gp,
          [this](std::string_view piece) {
            ClearProgress();
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
          },
          &sampler_, system_.empty());
    } catch (...) {
      ClearProgress();
      messages_.pop_back();
      throw;
    }
    ClearProgress();
    if (r.stop_reason == KX_STOP_ABORTED && r.n_tokens == 0) {
      messages_.pop_back();  // unanswered: the conversation is as before the message
      std::fprintf(stderr, "[stopped while reading the prompt; the message was dropped]\n");
      return false;
    }
    std::fputc('\n', stdout);
    if (r.stop_reason == KX_STOP_ABORTED) std::fprintf(stderr, "[answer stopped]\n");
    if (r.stop_reason == KX_STOP_CONTEXT_FULL) {
      std::fprintf(stderr,
                   "[context full (%d tokens): the answer was cut; the oldest turns will be "
                   "dropped to make room, or type /reset]\n",
                   session_.NCtx());
    }
    messages_.push_back({"assistant", r.text});
    return true;
  }

  void PrintStats() const {
    const kx_stats st = session_.Stats();
    std::printf(
        "[context %d/%d tokens, %zu messages; prompt %llu tokens at %.1f t/s; "
        "generated %llu tokens at %.1f t/s; %d threads]\n",
        session_.NPast(), session_.NCtx(), messages_.size(),
        static_cast<unsigned long long>(st.n_prompt_tokens), st.prompt_tokens_per_second,
        static_cast<unsigned long long>(st.n_gen_tokens), st.gen_tokens_per_second, st.n_threads);
  }

 private:
  // The session's progress callback: shows how much of the prompt was read, and stops
  // the evaluation once Ctrl-C set g_abort.
  bool OnProgress(float progress) {
    constexpr float kPercent = 100.0f;
    const int percent = static_cast<int>(progress * kPercent);
    // Only forward: generation polls with 0 before each token.
    if (reading_ && show_progress_ && percent > shown_percent_) {
      std::fprintf(stderr, "\rreading the prompt %3d%%", percent);
      shown_percent_ = percent;
    }
    return g_abort == 0;
  }

  void ClearProgress() {
    if (shown_percent_ >= 0) std::fputs("\r\033[K", stderr);
    reading_ = false;
    shown_percent_ = -1;
  }

  // Drops the oldest turns while the rendered conversation does not leave room for an
  // answer. False when even the last message alone does not fit.
  bool FitToContext() {
    const int32_t n_ctx = session_.NCtx();
    const int32_t room = std::min(kMinAnswerRoom, n_ctx / 4);
    size_t dropped = 0;
    for (;;) {
      const size_t n_ids =
          model_.Tokenize(model_.ApplyChatTemplate(messages_, true, system_.empty())).size();
      if (static_cast<int32_t>(n_ids) + room <= n_ctx) break;
      const size_t first = (!messages_.empty() && messages_[0].role == "system") ? 1 : 0;
      if (messages_.size() - first <= 1) {
        std::fprintf(stderr,
                     "[the message is too long: %zu tokens with the template, the context holds "
                     "%d; raise -c or shorten it]\n",
                     n_ids, n_ctx);
        return false;
      }
      messages_.erase(messages_.begin() + first);  // the oldest turn after the system prompt
      ++dropped;
    }
    if (dropped > 0) {
      std::fprintf(stderr, "[context full: dropped the %zu oldest message(s) to make room]\n",
                   dropped);
    }
    return true;
  }

  kairox::Model& model_;
  kairox::Session& session_;
  kairox::Sampler& sampler_;
  std::string system_;
  int32_t n_predict_;
  bool show_progress_;
  bool reading_ = false;    // the prompt is being evaluated
  int shown_percent_ = -1;  // what the progress line shows (-1: nothing)
  std::vector<kairox::ChatMessage> messages_;
};

// A seed a user can pass back with -s to reproduce the conversation.
uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32 | rd()) & static_cast<uint64_t>(INT64_MAX);
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "kairox-chat");
  kx::cli::SetUp(app);
  std::string model_path = kx::cli::DefaultModelPath();
  std::string system;
  int64_t n_predict = -1, seed = -1;
  int32_t n_threads = 0;
  bool version = false;
  kairox::SamplerParams sp;     // the library's defaults (kx_sampler_params_init)
  kairox::SessionParams sessp;  // n_ctx 0: min(trained, kDefaultCtx)
  app.add_option("-m,--model", model_path,
                 "GGUF model (default: $KAIROX_MODEL, else the fetched default model)")
      ->type_name("PATH");
  app.add_option("--system", system, "system prompt (default: the template's own, if any)")
      ->type_name("TEXT");
  kx::cli::AddInt(app, "-n,--n-predict", &n_predict, -1, kx::cli::kMaxContext,
                  "most tokens per answer (-1: until the model stops or the context is full)");
  kx::cli::AddInt(app, "-t,--threads", &n_threads, 0, kx::cli::kMaxThreads,
                  "threads (0: all available cores)");
  kx::cli::AddInt(app, "-c,--ctx-size", &sessp.n_ctx, 0, kx::cli::kMaxContext,
                  "context size (0: min(trained, 4096))");
  const std::string sampling = "sampling (the library's defaults, as in kairox-cli and the C ABI)";
  kx::cli::AddSamplerOptions(app, &sp, &seed, sampling,
                             "sampling seed (-1: a random one, shown at the start)");
  app.add_flag("--version", version, "print the version and exit");
  kx::cli::AddSparseOptions(app, &sessp);
  if (const int rc = kx::cli::Parse(app, argc, argv); rc != kx::cli::kContinue) return rc;
  if (version) {
    std::printf("kairox-chat %s\n", kairox::Version().c_str());
    return 0;
  }
  sp.seed = seed < 0 ? RandomSeed() : static_cast<uint64_t>(seed);

  const bool interactive = isatty(STDIN_FILENO) != 0;
  try {
    kairox::ModelOptions mo;
    mo.n_threads = n_threads;
    const bool bar = isatty(STDERR_FILENO) != 0;
    if (bar) {
      mo.progress = [](float p) {
        std::fprintf(stderr, "\rloading model %3d%%", static_cast<int>(p * 100.0f + 0.5f));
        if (p >= 1.0f) std::fputs("\r\033[K", stderr);
        return true;
      };
    }
    kairox::Sampler sampler(sp);  // validates the sampling flags before the model loads
    kairox::Model model(model_path, mo);
    const kx_model_info info = model.Info();
    if (sessp.n_ctx == 0) sessp.n_ctx = std::min(kDefaultCtx, info.n_ctx_train);
    sessp.seed = sp.seed;
    kairox::Session session(model, sessp);
    Chat chat(model, session, sampler, system, static_cast<int32_t>(n_predict),
              /*show_progress=*/interactive && isatty(STDERR_FILENO) != 0);

    if (!interactive) {  // one prompt from stdin, one answer
      const std::string prompt = Trim(std::string(std::istreambuf_iterator<char>(std::cin), {}));
      if (prompt.empty()) return Fail("no prompt on stdin");
      return chat.Turn(prompt) ? 0 : 1;
    }

    struct sigaction sa {};
    sa.sa_handler = OnSigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    std::printf("kairox-chat %s: %s (%s template, context %d, seed %llu). /help for commands.\n",
                kairox::Version().c_str(), model_path.c_str(), info.chat_template_kind,
                session.NCtx(), static_cast<unsigned long long>(sp.seed));
    kx::chat::LineReader reader("kairox-chat");  // line editing and history (line_reader.h)
    std::string line;
    for (;;) {
      const kx::chat::LineReader::Result got = reader.Read("> ", &line);
      if (got == kx::chat::LineReader::Result::kEof) {
        std::fputc('\n', stdout);
        break;
      }
      if (got == kx::chat::LineReader::Result::kInterrupted) {  // Ctrl-C at the prompt
        std::fputs(kCtrlCHint, stdout);
        continue;
      }
      line = Trim(line);
      if (line.empty()) continue;
      reader.Remember(line);
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        chat.Reset();
        std::printf("[conversation cleared]\n");
      } else if (line == "/stats") {
        chat.PrintStats();
      } else if (line == "/help") {
        std::printf(
            "/reset  forget the conversation\n/stats  speed and context use\n"
            "/exit   quit (or Ctrl-D)\nCtrl-C   stop the current answer\n");
      } else if (line[0] == '/') {
        std::printf("[unknown command %s; /help lists them]\n", line.c_str());
      } else {
        chat.Turn(line);
      }
    }
  } catch (const kairox::Error& e) {
    return Fail(e.what());
  }
  return 0;
}
