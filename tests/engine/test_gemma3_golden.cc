// Gemma 3 270M (Q4_K_M) against Hugging Face transformers reading the same
// GGUF: tests/golden/make_gemma3_reference.py wrote tests/golden/gemma3/
// (token ids, teacher-forced logits of 3 prompts × 32 positions as the top 16
// plus a fixed 512-id sample plus the full-vocabulary log-sum-exp, and the
// per-chunk NLL of a perplexity run).
//
// The model is not part of the default download: the path comes from
// KAIROX_GEMMA3_MODEL or ~/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf
// (cmake/fetch_model.sh gemma3); without it the test is skipped.
// KAIROX_GEMMA3_PPL_CHUNKS (default 4, at most 16) sets how many perplexity
// chunks of 256 tokens are run.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace {

// Measured with 16-bit activations against float32 transformers (the test
// prints the worst values; AVX-512): cosine 0.999999 on the sampled logits,
// max |Δlogit| 0.016, |Δlog-sum-exp| 0.008. The bounds leave ~6× room for
// other ISAs' summation orders.
constexpr double kMinCosine = 0.999;
constexpr double kMaxAbsError = 0.1;
constexpr double kMaxLseError = 0.05;
// A top-1 flip needs the reference's top-1/top-2 gap below the two logits'
// errors together; wherever the gap is larger the top-1 must agree.
constexpr double kGapDelta = 2.0 * kMaxAbsError;
// The brief: perplexity within 1% of transformers'.
constexpr double kMaxPplRelError = 0.01;
constexpr int kDefaultPplChunks = 4;

std::string GoldenDir() {
  return kx::test::EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/gemma3";
}

std::string Gemma3ModelOrSkip() {
  const std::string fallback =
      kx::test::EnvOr("HOME", "/root") + "/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf";
  const std::string path = kx::test::EnvOr("KAIROX_GEMMA3_MODEL", fallback);
  if (access(path.c_str(), R_OK) != 0) {
    kx::test::Skip("Gemma 3 270M not found at " + path +
                   " (cmake/fetch_model.sh gemma3, or set KAIROX_GEMMA3_MODEL)");
  }
  return path;
}

nlohmann::json ReadJson(const std::string& name) {
  std::ifstream in(GoldenDir() + "/" + name);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::unique_ptr<kx::Engine> LoadEngine(const std::string& path) {
  kx::EngineOptions opts;
  opts.n_threads = 2;
  opts.n_ctx = 512;
  auto engine = kx::Engine::Load(path, opts);
  INFO((engine.ok() ? std::string("ok") : std::string(engine.status().message())));
  REQUIRE(engine.ok());
  return *std::move(engine);
}

double LogSumExp(std::span<const float> v) {
  const float mx = *std::max_element(v.begin(), v.end());
  double sum = 0.0;
  for (float x : v) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum);
}

}  // namespace

TEST_CASE("Gemma 3 tokenizer matches transformers' GGUF tokenizer") {
  const std::string path = Gemma3ModelOrSkip();
  const nlohmann::json golden = ReadJson("tokens.json");
  auto engine = LoadEngine(path);
  const kx::Tokenizer& tok = engine->tokenizer();
  REQUIRE(golden.at("cases").size() >= 10);
  const bool parse_special = golden.at("parse_special").get<bool>();
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    INFO("text: " << text);
    CHECK(tok.Encode(text, /*add_special=*/true, parse_special) == want);
  }
}

TEST_CASE("Gemma 3 logits match transformers (cosine, top-1, log-sum-exp)") {
  const std::string path = Gemma3ModelOrSkip();
  const nlohmann::json meta = ReadJson("logits.json");
  const auto sample_ids = meta.at("sample_ids").get<std::vector<int32_t>>();
  const int n_pos = meta.at("n_positions").get<int>();
  const auto& prompts = meta.at("prompts");
  const size_t n_sample = sample_ids.size();

  std::ifstream bin(GoldenDir() + "/" + meta.at("sample_file").get<std::string>(),
                    std::ios::binary);
  REQUIRE(bin.good());
  std::vector<float> ref_sample(prompts.size() * n_pos * n_sample);
  bin.read(reinterpret_cast<char*>(ref_sample.data()),
           static_cast<std::streamsize>(ref_sample.size() * sizeof(float)));
  REQUIRE(bin.gcount() == static_cast<std::streamsize>(ref_sample.size() * sizeof(float)));

  auto engine = LoadEngine(path);
  REQUIRE(engine->n_vocab() == meta.at("n_vocab").get<int>());

  double worst_cos = 1.0, worst_err = 0.0, worst_lse = 0.0;
  int checked_top1 = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto ids = prompts[p].at("ids").get<std::vector<int32_t>>();
    REQUIRE(static_cast<int>(ids.size()) == n_pos);
    engine->TruncateKv(0);
    REQUIRE(engine->Eval(ids, /*all_logits=*/true).ok());
    const auto top_ids = prompts[p].at("top_ids").get<std::vector<std::vector<int32_t>>>();
    const auto top_logits = prompts[p].at("top_logits").get<std::vector<std::vector<float>>>();
    const auto lse = prompts[p].at("logsumexp").get<std::vector<double>>();
    for (int t = 0; t < n_pos; ++t) {
      std::span<const float> got = engine->Logits(t);
      REQUIRE(got.size() == static_cast<size_t>(engine->n_vocab()));
      // The sampled ids and the reference's top 16 together.
      double dot = 0.0, nr = 0.0, ng = 0.0, err = 0.0;
      auto add = [&](int32_t id, double ref) {
        const double g = got[id];
        dot += g * ref;
        nr += ref * ref;
        ng += g * g;
        err = std::max(err, std::abs(g - ref));
      };
      const float* rs = &ref_sample[(p * n_pos + t) * n_sample];
      for (size_t i = 0; i < n_sample; ++i) add(sample_ids[i], rs[i]);
      for (size_t i = 0; i < top_ids[t].size(); ++i) add(top_ids[t][i], top_logits[t][i]);
      const double cos = dot / std::sqrt(nr * ng);
      const double lse_err = std::abs(LogSumExp(got) - lse[t]);
      INFO("prompt " << p << " position " << t << ": cosine " << cos << ", max |err| " << err
                     << ", |Δlse| " << lse_err);
      CHECK(cos >= kMinCosine);
      CHECK(err <= kMaxAbsError);
      CHECK(lse_err <= kMaxLseError);
      worst_cos = std::min(worst_cos, cos);
      worst_err = std::max(worst_err, err);
      worst_lse = std::max(worst_lse, lse_err);
      if (top_logits[t][0] - top_logits[t][1] > kGapDelta) {
        const auto argmax = std::max_element(got.begin(), got.end()) - got.begin();
        CHECK(argmax == top_ids[t][0]);
        ++checked_top1;
      }
    }
  }
  std::printf("gemma3 logits: worst cosine %.6f, max |err| %.4f, max |Δlse| %.4f, top-1 checked "
              "at %d of %zu positions\n",
              worst_cos, worst_err, worst_lse, checked_top1, prompts.size() * n_pos);
  CHECK(checked_top1 >= static_cast<int>(prompts.size()) * n_pos / 4);
}

TEST_CASE("Gemma 3 perplexity within 1% of transformers") {
  const std::string path = Gemma3ModelOrSkip();
  const nlohmann::json meta = ReadJson("perplexity.json");
  const nlohmann::json tokens = ReadJson(meta.at("tokens_file").get<std::string>());
  const auto chunks = tokens.at("chunks").get<std::vector<std::vector<int32_t>>>();
  const auto ref_nll = meta.at("nll_per_chunk").get<std::vector<double>>();
  const int first = meta.at("scored_positions").at(0).get<int>();
  const int n_ctx = meta.at("n_ctx").get<int>();
  const std::string chunks_env =
      kx::test::EnvOr("KAIROX_GEMMA3_PPL_CHUNKS", std::to_string(kDefaultPplChunks));
  const int n_chunks =
      std::clamp(std::atoi(chunks_env.c_str()), 1, static_cast<int>(chunks.size()));

  auto engine = LoadEngine(path);
  double nll = 0.0, want = 0.0;
  for (int c = 0; c < n_chunks; ++c) {
    REQUIRE(static_cast<int>(chunks[c].size()) == n_ctx);
    engine->TruncateKv(0);
    REQUIRE(engine->Eval(chunks[c], /*all_logits=*/true).ok());
    for (int i = first; i < n_ctx; ++i) {
      std::span<const float> row = engine->Logits(i - 1);
      nll += LogSumExp(row) - row[chunks[c][i]];
    }
    want += ref_nll[c];
  }
  const double n_scored = static_cast<double>(n_chunks) * (n_ctx - first);
  const double ppl = std::exp(nll / n_scored), ref = std::exp(want / n_scored);
  std::printf("gemma3 perplexity over %d chunks: %.4f (transformers %.4f)\n", n_chunks, ppl, ref);
  CHECK(std::abs(ppl / ref - 1.0) <= kMaxPplRelError);
}
