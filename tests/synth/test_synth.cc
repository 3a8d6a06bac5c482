// kairox-synth's models realise the activation statistics they were asked
// for, as the engine measures them: a tiny-shape model (4 layers x 1024
// neurons) is prepared (oracle sidecar: no predictors, so the trace's actual
// set is the model's own), decoded greedily with --trace's machinery, and the
// trace's sparsity, hot share and reuse are checked against the request within
// synth::Tolerance. Negative control: a model made with other values meets its
// own request and fails the first one's, so the check can fail.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "model/gguf.h"
#include "prepare/prepare.h"
#include "synth/synth_model.h"
#include "synth/synth_stats.h"
#include "test_util.h"

namespace {

constexpr int kPromptTokens = 8;
constexpr int kDecodeTokens = 192;

std::string TempDir() { return kx::test::TempDir("synth"); }

kx::synth::SynthSpec TinySpec(uint64_t seed) {
  kx::synth::SynthSpec s;
  s.shape = kx::synth::ShapeByName("tiny").value();
  s.weight_type = kx::GgmlType::kQ8_0;
  s.act = "relu";
  s.seed = seed;
  return s;
}

struct Measured {
  kx::synth::SynthDerived derived;
  kx::synth::RealisedStats stats;
  size_t distinct_decoded = 0;
};

// Writes the model, prepares an oracle sidecar, decodes greedily with a trace.
Measured GenerateAndTrace(const std::string& tag, const kx::synth::SynthSpec& spec) {
  const std::string model = TempDir() + "/" + tag + ".gguf";
  const std::string sidecar = TempDir() + "/" + tag + ".kairox.gguf";
  const std::string trace = TempDir() + "/" + tag + ".kxtr";
  Measured m;
  auto derived = kx::synth::WriteSynthModel(model, spec);
  INFO(derived.status().message());
  REQUIRE(derived.ok());
  m.derived = *derived;
  kx::PrepareOptions o;
  o.model_path = model;
  o.sidecar_path = sidecar;
  o.down_layout = kx::PrepareOptions::DownLayoutChoice::kRows;
  o.auto_down_type = false;
  o.group_size = 16;
  o.n_threads = 2;
  o.calibration.token_budget = 512;
  o.calibration.max_new_tokens = 64;
  o.train_predictors = false;
  auto rep = kx::Prepare(o);
  INFO(rep.status().message());
  REQUIRE(rep.ok());
  REQUIRE(rep->activation_rule == "relu");

  kx::EngineOptions eo;
  eo.n_threads = 2;
  eo.n_ctx = 256;
  eo.sidecar = sidecar;
  eo.masked_dense = true;
  eo.trace_path = trace;
  auto e = kx::test::LoadEngine(model, eo);
  REQUIRE(e->sparse() != nullptr);
  const std::vector<int32_t> prompt = kx::test::RandomTokens(spec.seed + 5, kPromptTokens);
  REQUIRE(e->Eval(prompt).ok());
  std::set<int32_t> decoded;
  for (int i = 0; i < kDecodeTokens; ++i) {
    std::span<const float> logits = e->Logits();
    const auto tok =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    decoded.insert(tok);
    REQUIRE(e->Eval(std::span<const int32_t>(&tok, 1)).ok());
  }
  m.distinct_decoded = decoded.size();
  REQUIRE(e->sparse()->CloseTrace().ok());
  auto stats = kx::synth::MeasureTrace(trace, spec.hot_fraction, kPromptTokens);
  INFO(stats.status().message());
  REQUIRE(stats.ok());
  m.stats = *stats;
  return m;
}

}  // namespace

TEST_CASE("a synthetic model realises its requested sparsity, hot share and reuse") {
  const kx::synth::SynthSpec spec = TinySpec(17);
  const Measured a = GenerateAndTrace("default", spec);
  INFO(kx::synth::FormatRealised(a.stats));
  CHECK(a.stats.steps == kDecodeTokens);
  // The LM head's successor map: greedy decode walks a cycle, it does not loop.
  CHECK(a.distinct_decoded >= kDecodeTokens - 2);
  const absl::Status own = kx::synth::CheckRealised(a.stats, spec, a.derived, {});
  INFO(own.message());
  CHECK(own.ok());

  SECTION("other requested values give other statistics (negative control)") {
    kx::synth::SynthSpec other = TinySpec(18);
    other.sparsity = {0.80};
    other.hot_share = 0.65;
    other.reuse = 0.80;  // its chance overlap is 0.45: reuse must be above it
    const Measured b = GenerateAndTrace("other", other);
    INFO(kx::synth::FormatRealised(b.stats));
    const absl::Status b_own = kx::synth::CheckRealised(b.stats, other, b.derived, {});
    INFO(b_own.message());
    CHECK(b_own.ok());
    // Each model's statistics fail the other's request, on every statistic.
    const absl::Status cross = kx::synth::CheckRealised(b.stats, spec, a.derived, {});
    INFO(cross.message());
    CHECK_FALSE(cross.ok());
    for (const char* what : {"sparsity", "hot share", "reuse"}) {
      CHECK_THAT(std::string(cross.message()), Catch::Contains(what));
    }
    CHECK_FALSE(kx::synth::CheckRealised(a.stats, other, b.derived, {}).ok());
  }
}

TEST_CASE("impossible requests are refused by name") {
  kx::synth::SynthSpec s = TinySpec(1);
  s.sparsity = {0.5};  // hot neurons would need p > 1
  auto d = kx::synth::Derive(s);
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(std::string(d.status().message()), Catch::Contains("--sparsity"));
  s = TinySpec(1);
  s.reuse = 0.1;  // below the hot set's chance overlap
  d = kx::synth::Derive(s);
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(std::string(d.status().message()), Catch::Contains("--reuse"));
  s = TinySpec(1);
  s.topics = 1000;
  CHECK_FALSE(kx::synth::Derive(s).ok());
  CHECK_FALSE(kx::synth::ShapeByName("70b").ok());
}
