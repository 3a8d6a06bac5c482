// Real GGUF models against Hugging Face transformers reading the same GGUF
// (float32, CPU): tests/golden/make_hf_reference.py wrote tests/golden/<name>/
// (token ids, teacher-forced logits of 3 prompts × 32 positions as the top 16
// plus a fixed 512-id sample plus the full-vocabulary log-sum-exp, 16 greedy
// tokens per prompt decoded on the KV cache, and the per-chunk NLL of a
// perplexity run).
//
// KAIROX_GOLDEN names the model (each CTest entry sets it): `gemma3` (Gemma 3
// 270M Q4_K_M) or `qwen1.5b` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M). Neither is
// part of the default download: the path comes from the model's environment
// variable or ~/.cache/kairox/models (cmake/fetch_model.sh <name>); without it
// the test is skipped. KAIROX_GOLDEN_PPL_CHUNKS sets how many perplexity chunks
// run (default per model, at most as many as the golden holds).
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

struct GoldenModel {
  const char* name;      // KAIROX_GOLDEN, tests/golden/<name>, fetch_model.sh <name>
  const char* file;      // under ~/.cache/kairox/models
  const char* path_env;  // overrides the path
  const char* title;
  double min_cosine;        // on the sampled + top-16 logits of each position
  double max_abs_error;     // max |Δlogit| there
  double max_lse_error;     // |Δ log-sum-exp| over the whole vocabulary
  double max_greedy_error;  // |Δlogit| of the greedy token at each decode step
  double max_ppl_rel_error;
  int default_ppl_chunks;
};

// Both sides use the same quantised weights; what differs is kairox's 16-bit
// formats (int16 activations per 32-value block into every matvec, an F16 KV
// cache) and summation order. The bounds are the worst values measured (AVX2;
// the test prints them) with room for other ISAs' summation orders. A top-1
// flip needs the reference's top-1/top-2 gap below the two logits' errors
// together, so wherever the gap exceeds twice the bound the top-1 (and the
// greedy token) must agree.
constexpr GoldenModel kModels[] = {
    // Measured: cosine 0.999999, max |Δlogit| 0.016, |Δlse| 0.008 (AVX-512);
    // 0.999998, 0.025, 0.011 and greedy 0.0092 (AVX2). Perplexity within 1%;
    // 4 chunks of 256.
    {"gemma3", "gemma-3-270m-q4_k_m.gguf", "KAIROX_GEMMA3_MODEL", "Gemma 3 270M", 0.999, 0.1, 0.05,
     0.1, 0.01, 4},
    // Measured (AVX2): cosine 0.999998, max |Δlogit| 0.028, |Δlse| 0.0075 on
    // the prompts (3.5× and 6× room, as for Gemma 3). Greedy: 0.01 or less at
    // 46 of 48 steps, but 0.18 at the step after the code prompt's run reaches
    // "<|endoftext|><|fim_prefix|>" (the teacher-forced prefill gives the same
    // 0.18: not a decode-path error). The reference with kairox's formats
    // emulated (int16 blocks into every Linear, K and V rounded to f16) moves
    // that position's logits by up to 0.19 too, int16 alone by 0.002: the F16
    // KV cache accounts for it. Hence 0.25 there. Perplexity chunks of 128
    // tokens (64 scored), 2 by default: the program takes about 40 s of CPU.
    {"qwen1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "KAIROX_QWEN1_5B_MODEL",
     "Qwen2.5-Coder-1.5B-Instruct", 0.999, 0.1, 0.05, 0.25, 0.01, 2},
};

const GoldenModel& Selected() {
  static const GoldenModel* const model = [] {
    const std::string name = kx::test::EnvOr("KAIROX_GOLDEN", "");
    for (const GoldenModel& m : kModels) {
      if (name == m.name) return &m;
    }
    std::fprintf(stderr, "KAIROX_GOLDEN='%s': must be one of gemma3, qwen1.5b\n", name.c_str());
    std::exit(EXIT_FAILURE);
  }();
  return *model;
}

std::string GoldenDir() {
  return kx::test::EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/" + Selected().name;
}

nlohmann::json ReadJson(const std::string& name) {
  std::ifstream in(GoldenDir() + "/" + name);
  INFO(GoldenDir() << "/" << name);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// Loaded once per program (the 1.5B model takes seconds); every case starts
// from an empty KV cache.
kx::Engine& SharedEngineOrSkip() {
  static std::unique_ptr<kx::Engine> engine;
  if (!engine) {
    const GoldenModel& m = Selected();
    const std::string fallback =
        kx::test::EnvOr("HOME", "/root") + "/.cache/kairox/models/" + m.file;
    const std::string path = kx::test::EnvOr(m.path_env, fallback);
    if (access(path.c_str(), R_OK) != 0) {
      kx::test::Skip(std::string(m.title) + " not found at " + path + " (cmake/fetch_model.sh " +
                     m.name + ", or set " + m.path_env + ")");
    }
    kx::EngineOptions opts;
    opts.n_threads = 2;
    opts.n_ctx = 512;
    auto loaded = kx::Engine::Load(path, opts);
    INFO((loaded.ok() ? std::string("ok") : std::string(loaded.status().message())));
    REQUIRE(loaded.ok());
    engine = *std::move(loaded);
  }
  engine->TruncateKv(0);
  return *engine;
}

double LogSumExp(std::span<const float> v) {
  const float mx = *std::max_element(v.begin(), v.end());
  double sum = 0.0;
  for (float x : v) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum);
}

int32_t ArgMax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding, one token per Eval on the KV cache, from the prompt the
// engine holds (its last logits current): the same tokens as the reference up
// to the first flip, which only a near-tie may cause (the continuations differ
// after it). Returns the steps that agreed; raises *worst_err.
int CheckGreedy(kx::Engine& engine, const nlohmann::json& steps, const GoldenModel& m, size_t run,
                double* worst_err) {
  int agreed = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const int32_t want = steps[s].at("id").get<int32_t>();
    const double want_logit = steps[s].at("logit").get<double>();
    const double gap = want_logit - steps[s].at("runner_up_logit").get<double>();
    std::span<const float> got = engine.Logits();
    const int32_t id = ArgMax(got);
    const double err = std::abs(got[want] - want_logit);
    INFO("greedy run " << run << " step " << s << ": got " << id << ", want " << want << " (gap "
                       << gap << "), |Δlogit| " << err);
    CHECK(err <= m.max_greedy_error);
    *worst_err = std::max(*worst_err, err);
    if (id != want) {
      CHECK(gap <= 2.0 * m.max_greedy_error);
      break;
    }
    ++agreed;
    REQUIRE(engine.Eval(std::span<const int32_t>(&id, 1)).ok());
  }
  return agreed;
}

}  // namespace

TEST_CASE("tokenizer matches transformers' GGUF tokenizer") {
  kx::Engine& engine = SharedEngineOrSkip();
  const nlohmann::json golden = ReadJson("tokens.json");
  const kx::Tokenizer& tok = engine.tokenizer();
  REQUIRE(golden.at("cases").size() >= 10);
  const bool parse_special = golden.at("parse_special").get<bool>();
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    INFO("text: " << text);
    CHECK(tok.Encode(text, /*add_special=*/true, parse_special) == want);
  }
}

// The greedy runs start from the logits prompts, so they reuse their prefill.
TEST_CASE("logits and greedy decoding match transformers") {
  kx::Engine& engine = SharedEngineOrSkip();
  const GoldenModel& m = Selected();
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
  REQUIRE(engine.n_vocab() == meta.at("n_vocab").get<int>());
  const nlohmann::json greedy = ReadJson("greedy.json");
  const auto& runs = greedy.at("runs");
  REQUIRE(runs.size() == prompts.size());

  double worst_cos = 1.0, worst_err = 0.0, worst_lse = 0.0, worst_greedy = 0.0;
  int checked_top1 = 0, greedy_agreed = 0, greedy_total = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto ids = prompts[p].at("ids").get<std::vector<int32_t>>();
    REQUIRE(static_cast<int>(ids.size()) == n_pos);
    REQUIRE(runs[p].at("prompt_ids").get<std::vector<int32_t>>() == ids);
    engine.TruncateKv(0);
    REQUIRE(engine.Eval(ids, /*all_logits=*/true).ok());
    const auto top_ids = prompts[p].at("top_ids").get<std::vector<std::vector<int32_t>>>();
    const auto top_logits = prompts[p].at("top_logits").get<std::vector<std::vector<float>>>();
    const auto lse = prompts[p].at("logsumexp").get<std::vector<double>>();
    for (int t = 0; t < n_pos; ++t) {
      std::span<const float> got = engine.Logits(t);
      REQUIRE(got.size() == static_cast<size_t>(engine.n_vocab()));
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
      CHECK(cos >= m.min_cosine);
      CHECK(err <= m.max_abs_error);
      CHECK(lse_err <= m.max_lse_error);
      worst_cos = std::min(worst_cos, cos);
      worst_err = std::max(worst_err, err);
      worst_lse = std::max(worst_lse, lse_err);
      if (top_logits[t][0] - top_logits[t][1] > 2.0 * m.max_abs_error) {
        CHECK(ArgMax(got) == top_ids[t][0]);
        ++checked_top1;
      }
    }
    const auto& steps = runs[p].at("steps");
    greedy_total += static_cast<int>(steps.size());
    greedy_agreed += CheckGreedy(engine, steps, m, p, &worst_greedy);
  }
  std::printf(
      "%s logits: worst cosine %.6f, max |err| %.4f, max |Δlse| %.4f, top-1 checked "
      "at %d of %zu positions\n",
      m.name, worst_cos, worst_err, worst_lse, checked_top1, prompts.size() * n_pos);
  CHECK(checked_top1 >= static_cast<int>(prompts.size()) * n_pos / 4);
  std::printf("%s greedy: %d of %d tokens agree before any near-tie flip, max |Δlogit| %.4f\n",
              m.name, greedy_agreed, greedy_total, worst_greedy);
}

TEST_CASE("perplexity within tolerance of transformers") {
  kx::Engine& engine = SharedEngineOrSkip();
  const GoldenModel& m = Selected();
  const nlohmann::json meta = ReadJson("perplexity.json");
  const nlohmann::json tokens = ReadJson(meta.at("tokens_file").get<std::string>());
  const auto chunks = tokens.at("chunks").get<std::vector<std::vector<int32_t>>>();
  const auto ref_nll = meta.at("nll_per_chunk").get<std::vector<double>>();
  const int first = meta.at("scored_positions").at(0).get<int>();
  const int n_ctx = meta.at("n_ctx").get<int>();
  const std::string chunks_env =
      kx::test::EnvOr("KAIROX_GOLDEN_PPL_CHUNKS", std::to_string(m.default_ppl_chunks));
  const int n_chunks =
      std::clamp(std::atoi(chunks_env.c_str()), 1, static_cast<int>(chunks.size()));

  double nll = 0.0, want = 0.0;
  for (int c = 0; c < n_chunks; ++c) {
    REQUIRE(static_cast<int>(chunks[c].size()) == n_ctx);
    engine.TruncateKv(0);
    REQUIRE(engine.Eval(chunks[c], /*all_logits=*/true).ok());
    for (int i = first; i < n_ctx; ++i) {
      std::span<const float> row = engine.Logits(i - 1);
      nll += LogSumExp(row) - row[chunks[c][i]];
    }
    want += ref_nll[c];
  }
  const double n_scored = static_cast<double>(n_chunks) * (n_ctx - first);
  const double ppl = std::exp(nll / n_scored), ref = std::exp(want / n_scored);
  std::printf("%s perplexity over %d chunks of %d: %.4f (transformers %.4f)\n", m.name, n_chunks,
              n_ctx, ppl, ref);
  CHECK(std::abs(ppl / ref - 1.0) <= m.max_ppl_rel_error);
}
