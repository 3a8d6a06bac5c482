// kairox.hpp, the C++ wrapper: RAII, strings and vectors, statuses as
// kairox::Error carrying the C message, callbacks and exceptions through them.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/tiny_model.h"
#include "kairox/kairox.hpp"
#include "model/chat_template.h"
#include "test_util.h"

namespace {

// One tiny model per test program, written by the test-side writer.
const std::string& TinyModelPath() {
  static const std::string path = [] {
    std::string p = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                    "/kx_cpp_wrapper_tiny_" + std::to_string(::getpid()) + ".gguf";
    REQUIRE(kx::test::WriteTinyModel(p, kx::test::TinyModelSpec{}, nullptr).ok());
    return p;
  }();
  return path;
}

struct RemoveAtExit {
  ~RemoveAtExit() { std::remove(TinyModelPath().c_str()); }
};

}  // namespace

TEST_CASE("wrapper: model, tokens and chat template") {
  static RemoveAtExit cleanup;
  std::vector<float> progress;
  kairox::ModelOptions mo;
  mo.n_threads = 2;
  mo.progress = [&](float p) {
    progress.push_back(p);
    return true;
  };
  kairox::Model model(TinyModelPath(), mo);
  CHECK(progress == std::vector<float>{0.0f, 0.5f, 1.0f});
  const kx_model_info info = model.Info();
  CHECK(info.n_vocab == 256);
  CHECK(std::string(info.arch) == "llama");
  const std::string text = "tiny models speak bytes: \xc3\xa9";
  const std::vector<int32_t> ids = model.Tokenize(text, false, false);
  CHECK(ids.size() == text.size());  // one token per byte
  CHECK(model.Detokenize(ids) == text);
  const std::string chat = model.ApplyChatTemplate({{"user", "hi"}});
  CHECK(chat.find("hi") != std::string::npos);
  CHECK(model.IsEndOfGeneration(info.eos_token));
  CHECK_FALSE(model.IsEndOfGeneration(40));
}

TEST_CASE("wrapper: errors carry the status and the C message") {
  try {
    kairox::Model missing("/nonexistent/dir/model.gguf");
    FAIL("no exception");
  } catch (const kairox::Error& e) {
    CHECK(e.status() == KX_STATUS_NOT_FOUND);
    CHECK(std::string(e.what()).find("/nonexistent/dir/model.gguf") != std::string::npos);
  }
  kairox::ModelOptions cancel;
  cancel.progress = [](float p) { return p < 0.5f; };
  try {
    kairox::Model m(TinyModelPath(), cancel);
    FAIL("no exception");
  } catch (const kairox::Error& e) {
    CHECK(e.status() == KX_STATUS_CANCELLED);
  }
  kairox::Model model(TinyModelPath());
  kairox::SessionParams sp;
  sp.n_ctx = 100000;
  try {
    kairox::Session s(model, sp);
    FAIL("no exception");
  } catch (const kairox::Error& e) {
    CHECK(e.status() == KX_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("context") != std::string::npos);
  }
  kairox::Session s(model);
  CHECK_THROWS_AS(s.Logits(), kairox::Error);
}

TEST_CASE("wrapper: generation, streaming, stop, continue") {
  kairox::Model model(TinyModelPath());
  kairox::SessionParams sp;
  sp.n_ctx = 128;
  sp.n_threads = 2;
  kairox::Session session(model, sp);
  kairox::Sampler greedy = kairox::Sampler::Greedy();
  kairox::GenerateParams gp;
  gp.max_tokens = 16;
  std::string streamed;
  const kairox::GenerateResult r = session.Generate(
      "hello", gp,
      [&](std::string_view piece) {
        streamed += piece;
        return true;
      },
      &greedy);
  CHECK(r.text == streamed);
  CHECK(r.n_prompt == 5);
  CHECK(session.NPast() == r.n_prompt + r.n_tokens);
  CHECK(session.Tokens().size() == static_cast<size_t>(session.NPast()));
  const kx_stats st = session.Stats();
  CHECK(st.n_prompt_tokens == 5);
  CHECK(st.n_gen_tokens == static_cast<uint64_t>(r.n_tokens));

  // Stopping from the callback after the first non-empty piece.
  session.Reset();
  int pieces = 0;
  const kairox::GenerateResult one = session.Generate(
      "hello", gp, [&](std::string_view) { return ++pieces < 1; }, &greedy);
  CHECK(one.stop_reason == KX_STOP_CALLBACK);
  CHECK(pieces == 1);

  // An exception from the callback stops generation and comes out of Generate.
  session.Reset();
  CHECK_THROWS_WITH(session.Generate(
                        "hello", gp,
                        [](std::string_view) -> bool { throw std::runtime_error("from callback"); },
                        &greedy),
                    "from callback");

  // Moves keep one owner.
  kairox::Session moved = std::move(session);
  moved.Reset();
  CHECK(moved.NPast() == 0);
  const std::vector<int32_t> ids = model.Tokenize("ab", false, false);
  moved.Eval(ids, true);
  CHECK(moved.Logits(0).size() == 256);
  CHECK(moved.Logits(1) == moved.Logits(-1));
}

TEST_CASE("wrapper: a progress callback stops Eval and Generate's prompt between layers") {
  kairox::Model model(TinyModelPath());
  const int32_t n_layer = model.Info().n_layer;
  kairox::SessionParams sp;
  sp.n_ctx = 128;
  sp.n_batch = 4;
  sp.n_threads = 2;
  kairox::Session session(model, sp);
  const std::vector<int32_t> ids = model.Tokenize("twelve bytes", false, false);
  REQUIRE(ids.size() == 12);  // three batches of four
  std::vector<float> seen;
  session.SetProgressCallback([&](float p) {
    seen.push_back(p);
    return static_cast<int32_t>(seen.size()) < n_layer + 1;  // stop as batch 2 starts
  });
  try {
    session.Eval(ids);
    FAIL("no exception");
  } catch (const kairox::Error& e) {
    CHECK(e.status() == KX_STATUS_CANCELLED);
  }
  CHECK(static_cast<int32_t>(seen.size()) == n_layer + 1);
  CHECK(seen.back() == Approx(4.0 / 12.0));
  CHECK(session.NPast() == 0);
  CHECK_THROWS_AS(session.Logits(), kairox::Error);  // no logits after a stopped eval

  // Generate: stopped while its prompt is evaluated, a normal stop with nothing evaluated.
  seen.clear();
  kairox::GenerateParams gp;
  gp.max_tokens = 4;
  const kairox::GenerateResult r = session.Generate("twelve bytes", gp);
  CHECK(r.stop_reason == KX_STOP_ABORTED);
  CHECK(r.n_prompt == 0);
  CHECK(r.text.empty());
  CHECK(session.NPast() == 0);

  // An exception from the callback stops too; an empty callback removes it.
  session.SetProgressCallback([](float) -> bool { throw std::runtime_error("stop"); });
  CHECK_THROWS_AS(session.Eval(ids), kairox::Error);
  session.SetProgressCallback({});
  session.Eval(ids);
  CHECK(session.NPast() == 12);
}

TEST_CASE("wrapper: use_mmap off reads the file and gives the same logits") {
  kairox::ModelOptions mapped, read;
  read.use_mmap = false;
  kairox::Model a(TinyModelPath(), mapped);
  kairox::Model b(TinyModelPath(), read);
  kairox::SessionParams sp;
  sp.n_threads = 2;
  kairox::Session sa(a, sp), sb(b, sp);
  const std::vector<int32_t> ids = a.Tokenize("mapped or read", true, false);
  sa.Eval(ids);
  sb.Eval(ids);
  CHECK(sa.Logits() == sb.Logits());
}

TEST_CASE("wrapper: kairox.h lists every chat_template_kind the library returns") {
  const char* src = std::getenv("KAIROX_SOURCE_DIR");
  REQUIRE(src != nullptr);
  std::ifstream in(std::string(src) + "/include/kairox/kairox.h");
  REQUIRE(in.good());
  const std::string header((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t field = header.find("const char* chat_template_kind;");
  REQUIRE(field != std::string::npos);
  const size_t comment = header.rfind("/*", field);
  REQUIRE(comment != std::string::npos);
  const std::string doc = header.substr(comment, field - comment);
  // Every kind the enum has (ChatTemplateName says "unknown" past the last one).
  int kinds = 0;
  for (int k = 0;; ++k) {
    const std::string_view name = kx::ChatTemplateName(static_cast<kx::ChatTemplateKind>(k));
    if (name == "unknown") break;
    ++kinds;
    INFO(name);
    CHECK(doc.find("\"" + std::string(name) + "\"") != std::string::npos);
  }
  CHECK(kinds >= 6);
}
