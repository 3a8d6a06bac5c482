// The chat API (kx_session_chat through kairox.hpp's Session::Chat): a conversation evaluated
// incrementally gives what a fresh session evaluating all of it gives (text, token count,
// the last logits), reuses the prefix it holds (counted in n_reused), re-evaluates an edited
// history from where it differs, refuses what does not fit with the session unchanged; and
// kx_sampler_set_logit_bias bans and forces tokens. [unit] runs on a writer-made tiny model,
// [model] on the default model (SmolLM2, ChatML with its end-of-turn marker).
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/tiny_model.h"
#include "kairox/kairox.hpp"
#include "test_util.h"

namespace {

const std::string& TinyModelPath() {
  static const std::string path = [] {
    std::string p = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                    "/kx_chat_api_tiny_" + std::to_string(::getpid()) + ".gguf";
    REQUIRE(kx::test::WriteTinyModel(p, kx::test::TinyModelSpec{}, nullptr).ok());
    return p;
  }();
  return path;
}

struct RemoveAtExit {
  ~RemoveAtExit() { std::remove(TinyModelPath().c_str()); }
};

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// Largest logit difference accepted between incremental and full evaluation: the two split
// the tokens into different batches, so sums are ordered differently. The incremental session
// decoded the earlier answers one token at a time (matvec), the fresh one prefills them in
// one batch, where matmuls of 8 or more columns run the rows-in-lanes kernels
// (kernels/cpu/legacy_gemm.h for SmolLM2's Q4_1): each dot product differs by float32
// rounding (~1e-6 relative, within the kernels' error bound, tests/kernels), and every layer
// re-quantizes its activations to int16, so an ulp can move a rounding step that the next
// 29 layers carry. Measured with SmolLM2-135M Q4_1 (logits O(10)): 0, 5.5e-3, 7.8e-3 for the
// three turns (0 everywhere while every matmul equalled matvec); ~2.5× the largest.
constexpr float kLogitTolerance = 2e-2f;

struct Turn {
  kairox::ChatResult result;
  std::vector<float> last_logits;
};

Turn Answer(kairox::Session& session, const std::vector<kairox::ChatMessage>& msgs,
            int32_t max_tokens) {
  kairox::Sampler greedy = kairox::Sampler::Greedy();
  kairox::GenerateParams gp;
  gp.max_tokens = max_tokens;
  std::string streamed;
  Turn t;
  t.result = session.Chat(
      msgs, gp,
      [&](std::string_view piece) {
        streamed += piece;
        return true;
      },
      &greedy);
  CHECK(streamed == t.result.text);
  // The end-of-generation token is not evaluated: the session holds prompt and answer.
  CHECK(session.NPast() == t.result.n_prompt + t.result.n_tokens);
  t.last_logits = session.Logits(-1);
  return t;
}

// Three turns on one session against a fresh session per turn.
void CheckIncrementalEqualsFull(const kairox::Model& model, int32_t n_ctx, int32_t max_tokens,
                                const std::vector<std::string>& questions) {
  kairox::SessionParams sp;
  sp.n_ctx = n_ctx;
  sp.n_threads = 2;
  kairox::Session kept(model, sp);
  std::vector<kairox::ChatMessage> msgs;
  int32_t previous_prompt = 0;
  for (size_t i = 0; i < questions.size(); ++i) {
    INFO("turn " << i);
    msgs.push_back({"user", questions[i]});
    const Turn inc = Answer(kept, msgs, max_tokens);
    kairox::Session fresh(model, sp);
    const Turn full = Answer(fresh, msgs, max_tokens);
    CHECK(full.result.n_reused == 0);
    CHECK(inc.result.n_prompt == full.result.n_prompt);
    CHECK(inc.result.text == full.result.text);
    CHECK(inc.result.n_tokens == full.result.n_tokens);
    CHECK(inc.result.n_tokens > 0);
    CHECK(MaxAbsDiff(inc.last_logits, full.last_logits) <= kLogitTolerance);
    if (i == 0) {
      CHECK(inc.result.n_reused == 0);
    } else {
      // The previous render (its generation prompt included) is a prefix of this one.
      CHECK(inc.result.n_reused >= previous_prompt);
      CHECK(inc.result.n_reused < inc.result.n_prompt);
    }
    previous_prompt = inc.result.n_prompt;
    msgs.push_back({"assistant", inc.result.text});
  }
}

}  // namespace

TEST_CASE("chat: incremental turns equal full re-evaluation (tiny model)", "[unit]") {
  static RemoveAtExit cleanup;
  kairox::Model model(TinyModelPath());
  CheckIncrementalEqualsFull(model, 256, 6, {"hello there", "and again", "a third"});
}

TEST_CASE("chat: an edited history is re-evaluated from where it differs", "[unit]") {
  kairox::Model model(TinyModelPath());
  kairox::SessionParams sp;
  sp.n_ctx = 256;
  sp.n_threads = 2;
  kairox::Session session(model, sp);
  const Turn first = Answer(session, {{"user", "first question"}}, 4);
  const std::vector<kairox::ChatMessage> edited = {{"user", "first quest!on"}};
  const Turn again = Answer(session, edited, 4);
  CHECK(again.result.n_reused > 0);  // the template's opening is shared
  CHECK(again.result.n_reused < first.result.n_prompt);
  kairox::Session fresh(model, sp);
  const Turn full = Answer(fresh, edited, 4);
  CHECK(again.result.text == full.result.text);
  CHECK(MaxAbsDiff(again.last_logits, full.last_logits) <= kLogitTolerance);
}

TEST_CASE("chat: refusals leave the session as it was; the abort flag stops it", "[unit]") {
  kairox::Model model(TinyModelPath());
  kairox::SessionParams sp;
  sp.n_ctx = 64;
  sp.n_threads = 2;
  kairox::Session session(model, sp);
  Answer(session, {{"user", "hi"}}, 3);
  const std::vector<int32_t> before = session.Tokens();
  REQUIRE_FALSE(before.empty());

  try {
    session.Chat({{"user", std::string(200, 'x')}});
    FAIL("a conversation longer than the context was accepted");
  } catch (const kairox::Error& e) {
    CHECK(e.status() == KX_STATUS_CONTEXT_FULL);
    CHECK(std::string(e.what()).find("context holds 64") != std::string::npos);
  }
  CHECK(session.Tokens() == before);

  CHECK(kx_session_chat(session.get(), nullptr, nullptr, 0, 0, nullptr, nullptr) ==
        KX_STATUS_INVALID_ARGUMENT);
  kx_chat_message none[1] = {{"user", "x"}};
  CHECK(kx_session_chat(session.get(), nullptr, none, 0, 0, nullptr, nullptr) ==
        KX_STATUS_INVALID_ARGUMENT);
  kx_chat_message null_content[1] = {{"user", nullptr}};
  CHECK(kx_session_chat(session.get(), nullptr, null_content, 1, 0, nullptr, nullptr) ==
        KX_STATUS_INVALID_ARGUMENT);
  CHECK(kx_session_chat(session.get(), nullptr, none, 1, 0x100, nullptr, nullptr) ==
        KX_STATUS_INVALID_ARGUMENT);
  CHECK(session.Tokens() == before);

  volatile int32_t stop = 1;
  kairox::GenerateParams gp;
  gp.abort_flag = &stop;
  const kairox::ChatResult r = session.Chat({{"user", "something new"}}, gp);
  CHECK(r.stop_reason == KX_STOP_ABORTED);
  CHECK(r.n_tokens == 0);
  CHECK(r.text.empty());
}

TEST_CASE("chat: a chat call from inside the session's own callback is BUSY", "[unit]") {
  kairox::Model model(TinyModelPath());
  kairox::SessionParams sp;
  sp.n_ctx = 128;
  sp.n_threads = 2;
  kairox::Session session(model, sp);
  kx_status inner = KX_STATUS_OK;
  kairox::GenerateParams gp;
  gp.max_tokens = 3;
  kairox::Sampler greedy = kairox::Sampler::Greedy();
  const kairox::ChatResult r = session.Chat(
      {{"user", "hi"}}, gp,
      [&](std::string_view) {
        kx_chat_message m = {"user", "again"};
        inner = kx_session_chat(session.get(), nullptr, &m, 1, 0, nullptr, nullptr);
        return false;
      },
      &greedy);
  CHECK(inner == KX_STATUS_BUSY);
  CHECK(r.stop_reason == KX_STOP_CALLBACK);
  CHECK(session.NPast() == r.n_prompt + r.n_tokens);  // the outer call was not disturbed
}

TEST_CASE("chat: logit bias bans and forces tokens", "[unit]") {
  std::mt19937_64 rng = kx::test::SeededRng(18);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  constexpr int32_t kVocab = 300;
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(rng);
  const int32_t top =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  kairox::Sampler greedy = kairox::Sampler::Greedy();
  auto draw = [&] {
    int32_t token = -1;
    REQUIRE(kx_sampler_sample_logits(greedy.get(), logits.data(), kVocab, nullptr, 0, &token) ==
            KX_STATUS_OK);
    return token;
  };
  CHECK(draw() == top);
  greedy.SetLogitBias({{top, -INFINITY}});
  const int32_t second = draw();
  CHECK(second != top);
  const int32_t forced = (top + 7) % kVocab;
  greedy.SetLogitBias({{forced, INFINITY}});
  CHECK(draw() == forced);
  greedy.SetLogitBias({{forced, INFINITY}, {forced, -INFINITY}});  // a ban wins
  CHECK(draw() != forced);
  greedy.SetLogitBias({});
  CHECK(draw() == top);
  const int32_t bad_id = -1;
  const float bias = 1.0f, nan = NAN;
  CHECK(kx_sampler_set_logit_bias(greedy.get(), &bad_id, &bias, 1) == KX_STATUS_INVALID_ARGUMENT);
  CHECK(kx_sampler_set_logit_bias(greedy.get(), &top, &nan, 1) == KX_STATUS_INVALID_ARGUMENT);
  CHECK(kx_sampler_set_logit_bias(greedy.get(), nullptr, &bias, 1) == KX_STATUS_INVALID_ARGUMENT);
  CHECK(kx_sampler_set_logit_bias(nullptr, nullptr, nullptr, 0) == KX_STATUS_INVALID_ARGUMENT);
  CHECK(draw() == top);  // the refusals changed nothing
}

TEST_CASE("chat: incremental turns equal full re-evaluation (default model, ChatML)", "[model]") {
  const std::string path = kx::test::DefaultModelOrSkip();
  kairox::Model model(path);
  REQUIRE(std::string(model.Info().chat_template_kind) == "chatml");
  CheckIncrementalEqualsFull(model, 512, 8,
                             {"What is the capital of France?", "And of Italy?", "Thanks!"});
}
