// The ReLU-family path of activation sparsity (relu, fatrelu, drelu FFNs, set
// by <arch>.feed_forward_activation) on writer-made tiny models: the key is
// read (and bad values refused), prepare writes the activation's rule with
// the rule's thresholds and reports the natural sparsity, the oracle is the
// dense model, decode over bundles equals masked-dense, and a sidecar built
// under another rule is refused.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/ffn_hook.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "model/gguf.h"
#include "model/model.h"
#include "prepare/prepare.h"
#include "sparse/sidecar.h"
#include "test_util.h"

namespace {

using kx::test::TinyModelSpec;

// FATReLU's t: about the median positive gate value of these tiny models,
// so it cuts about half of the neurons ReLU would keep.
constexpr float kFatReluT = 0.5f;

std::string TempDir() { return kx::test::TempDir("prepare_relu"); }

// test_prepare.cc's shapes, with the FFN activation `act` ("" = SiLU).
TinyModelSpec Spec(const std::string& act, float t = kFatReluT) {
  TinyModelSpec s;
  s.n_layer = 3;
  s.n_embd = 64;
  s.n_ff = 256;
  s.seed = 77;
  s.ffn_act = act;
  s.ffn_act_threshold = act == "fatrelu" ? t : 0.0f;
  return s;
}

struct Prepared {
  std::string model, sidecar;
  kx::PrepareReport report;
};

// Asks for sparsity 0.5 and three levels: a ReLU-family model replaces both
// with its natural sparsity.
Prepared PrepareTiny(const std::string& tag, const TinyModelSpec& spec, kx::GgmlType down,
                     bool predictors = true) {
  Prepared p;
  p.model = TempDir() + "/" + tag + ".gguf";
  p.sidecar = TempDir() + "/" + tag + ".kairox.gguf";
  auto st = kx::test::WriteTinyModel(p.model, spec, nullptr);
  INFO(st.message());
  REQUIRE(st.ok());
  kx::PrepareOptions o;
  o.model_path = p.model;
  o.sidecar_path = p.sidecar;
  o.sparsity = 0.5f;
  o.levels = {0.0f, 0.5f, 0.8f};
  o.sparsity_requested = true;  // the warning path
  o.group_size = 16;
  o.auto_down_type = false;
  o.down_type = down;
  o.n_threads = 2;
  o.calibration.token_budget = 1500;
  o.calibration.max_new_tokens = 48;
  o.train_predictors = predictors;
  o.predictor.ranks = {16, 32};
  o.predictor.max_rank = 32;
  o.predictor.train.epochs = 4;
  auto rep = kx::Prepare(o);
  INFO(rep.status().message());
  REQUIRE(rep.ok());
  p.report = *rep;
  return p;
}

std::unique_ptr<kx::Engine> Load(const std::string& model, const std::string& sidecar,
                                 kx::EngineOptions o) {
  o.n_threads = 2;
  o.sidecar = sidecar;
  auto e = kx::Engine::Load(model, o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  return std::move(*e);
}

using kx::test::MaxAbsDiff;
using kx::test::TeacherForced;

// Counts the activated values the hook sees: exact zeros, and values the
// rule forbids (FATReLU: 0 < A <= t; any: A < 0).
class CountingHook final : public kx::FfnHook {
 public:
  explicit CountingHook(float t) : t_(t) {}
  void OnFfnInput(int, int, const float*) override {}
  void OnActivations(int, int n, float* act) override {
    for (int64_t i = 0; i < static_cast<int64_t>(n) * n_ff; ++i) {
      ++total;
      zeros += act[i] == 0.0f;
      forbidden += act[i] < 0.0f || (act[i] > 0.0f && act[i] <= t_);
    }
  }
  int n_ff = 0;
  int64_t total = 0, zeros = 0, forbidden = 0;

 private:
  float t_;
};

const char* const kActs[] = {"relu", "fatrelu", "drelu"};

}  // namespace

TEST_CASE("feed_forward_activation is read; unknown or bad values are refused by name") {
  for (const char* act : kActs) {
    const std::string path = TempDir() + "/hp_" + act + ".gguf";
    REQUIRE(kx::test::WriteTinyModel(path, Spec(act), nullptr).ok());
    auto m = kx::Model::Load(path);
    INFO(act << ": " << m.status().message());
    REQUIRE(m.ok());
    const kx::LlamaHParams& hp = (*m)->hparams();
    const kx::FfnActivation want = std::string(act) == "relu"      ? kx::FfnActivation::kRelu
                                   : std::string(act) == "fatrelu" ? kx::FfnActivation::kFatRelu
                                                                   : kx::FfnActivation::kDRelu;
    CHECK(hp.ffn_act == want);
    CHECK(hp.ffn_act_threshold == (want == kx::FfnActivation::kFatRelu ? kFatReluT : 0.0f));
  }
  {
    // No key: llama stays SiLU.
    const std::string path = TempDir() + "/hp_default.gguf";
    REQUIRE(kx::test::WriteTinyModel(path, Spec(""), nullptr).ok());
    auto m = kx::Model::Load(path);
    REQUIRE(m.ok());
    CHECK((*m)->hparams().ffn_act == kx::FfnActivation::kSilu);
  }
  {
    const std::string path = TempDir() + "/hp_unknown.gguf";
    REQUIRE(kx::test::WriteTinyModel(path, Spec("swiglu7"), nullptr).ok());
    auto m = kx::Model::Load(path);
    REQUIRE_FALSE(m.ok());
    CHECK_THAT(std::string(m.status().message()), Catch::Contains("'swiglu7'"));
    CHECK_THAT(std::string(m.status().message()), Catch::Contains("feed_forward_activation"));
  }
  {
    const std::string path = TempDir() + "/hp_negative.gguf";
    REQUIRE(kx::test::WriteTinyModel(path, Spec("fatrelu", -0.25f), nullptr).ok());
    auto m = kx::Model::Load(path);
    REQUIRE_FALSE(m.ok());
    CHECK_THAT(std::string(m.status().message()),
               Catch::Contains("feed_forward_activation_threshold"));
  }
}

TEST_CASE("the hook sees the activated values: zeros where the rule says, same logits") {
  for (const char* act : kActs) {
    INFO("activation " << act);
    const TinyModelSpec spec = Spec(act);
    const std::string path = TempDir() + "/hook_" + act + ".gguf";
    REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
    kx::EngineOptions eo;
    eo.n_threads = 2;
    eo.sparse = false;
    auto plain = kx::Engine::Load(path, eo);
    auto hooked = kx::Engine::Load(path, eo);
    REQUIRE(plain.ok());
    REQUIRE(hooked.ok());
    CountingHook hook(spec.ffn_act_threshold);
    hook.n_ff = spec.n_ff;
    (*hooked)->SetFfnHook(&hook);
    const auto tokens = kx::test::RandomTokens(31, 20);
    REQUIRE((*plain)->Eval(tokens, /*all_logits=*/true).ok());
    REQUIRE((*hooked)->Eval(tokens, /*all_logits=*/true).ok());
    for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
      auto a = (*plain)->Logits(i);
      auto b = (*hooked)->Logits(i);
      REQUIRE(a.size() == b.size());
      for (size_t k = 0; k < a.size(); ++k) REQUIRE(a[k] == b[k]);
    }
    REQUIRE(hook.total == static_cast<int64_t>(tokens.size()) * spec.n_layer * spec.n_ff);
    CHECK(hook.forbidden == 0);
    const double zero_frac = static_cast<double>(hook.zeros) / hook.total;
    INFO("zero fraction " << zero_frac);
    // Random symmetric weights: ReLU zeroes about half, dReLU about 3/4,
    // FATReLU (t about the median positive gate) about 3/4.
    if (std::string(act) == "relu") CHECK(zero_frac == Approx(0.5).margin(0.1));
    if (std::string(act) != "relu") CHECK(zero_frac == Approx(0.75).margin(0.1));
  }
}

TEST_CASE("prepare on ReLU-family models: the rule's thresholds, the natural sparsity") {
  for (const char* act : kActs) {
    INFO("activation " << act);
    const TinyModelSpec spec = Spec(act);
    const Prepared p = PrepareTiny(std::string("rule_") + act, spec, kx::GgmlType::kQ8_0);
    const float rule_t = spec.ffn_act_threshold;
    CHECK(p.report.activation_rule == act);
    REQUIRE(p.report.layers.size() == static_cast<size_t>(spec.n_layer));
    double mean = 0;
    for (const kx::LayerReport& l : p.report.layers) {
      CHECK(l.threshold == rule_t);
      // The natural sparsity, not the 0.5 asked for: ~0.5 (relu), ~0.75 (others).
      const double want = std::string(act) == "relu" ? 0.5 : 0.75;
      CHECK(l.calib_sparsity == Approx(want).margin(0.1));
      // Held-out tokens: active ⇔ A ≠ 0, the complement of the sparsity.
      CHECK(l.active_fraction == Approx(1.0 - l.calib_sparsity).margin(0.05));
      mean += l.calib_sparsity / spec.n_layer;
    }
    CHECK(p.report.sparsity == Approx(mean).epsilon(1e-5));
    CHECK(p.report.ToJson().find("\"activation_rule\": \"" + std::string(act) + "\"") !=
          std::string::npos);

    // The file: the rule's name, one level (the natural sparsity), thresholds t.
    auto g = kx::GgufFile::Open(p.sidecar);
    REQUIRE(g.ok());
    auto rule = g->GetString("kairox.activation_rule");
    REQUIRE(rule.ok());
    CHECK(std::string(*rule) == act);
    auto model = kx::Model::Load(p.model);
    REQUIRE(model.ok());
    auto sc = kx::sparse::Sidecar::Open(p.sidecar, **model);
    INFO(sc.status().message());
    REQUIRE(sc.ok());
    CHECK((*sc)->activation_rule() == act);
    REQUIRE((*sc)->sparsity_levels().size() == 1);
    CHECK((*sc)->sparsity() == p.report.sparsity);
    for (int l = 0; l < spec.n_layer; ++l) {
      REQUIRE((*sc)->layer(l).thresholds.size() == 1);
      CHECK((*sc)->layer(l).thresholds[0] == rule_t);
    }
    // --sparsity does not apply: the runtime keeps the natural one.
    kx::EngineOptions eo;
    eo.sparsity = 0.3f;
    auto e = Load(p.model, p.sidecar, eo);
    REQUIRE(e->sparse() != nullptr);
    CHECK(e->sparse()->sparsity() == p.report.sparsity);
  }
}

TEST_CASE("ReLU family: the oracle is the dense model; bundles equal masked-dense") {
  for (const char* act : kActs) {
    INFO("activation " << act);
    const TinyModelSpec spec = Spec(act);
    const Prepared p = PrepareTiny(std::string("eq_") + act, spec, kx::GgmlType::kF32);
    const auto prompt = kx::test::RandomTokens(11, 10);
    const auto forced = kx::test::RandomTokens(12, 24);

    kx::EngineOptions dense_opts;
    dense_opts.sparse = false;
    auto dense = Load(p.model, "", dense_opts);
    const auto d = TeacherForced(*dense, prompt, forced);

    // (c) Oracle masked-dense (no predictor, the rule's thresholds): it
    // zeroes only values that are already zero, so not one bit changes.
    kx::EngineOptions oracle;
    oracle.masked_dense = true;
    oracle.use_predictor = false;
    auto o = Load(p.model, p.sidecar, oracle);
    REQUIRE_FALSE(o->sparse()->UsesBundles(1));
    const auto od = TeacherForced(*o, prompt, forced);
    for (size_t i = 0; i < d.size(); ++i) CHECK(MaxAbsDiff(d[i], od[i]) == 0.0);

    double scale = 0;
    for (const auto& v : d) {
      for (float x : v) scale = std::max(scale, std::fabs(static_cast<double>(x)));
    }
    // The oracle over bundles: every neuron predicted, the kernel keeps the
    // non-zero ones. Equal to dense up to the masked-dense bound below.
    kx::EngineOptions oracle_bundles;
    oracle_bundles.use_predictor = false;
    auto ob = Load(p.model, p.sidecar, oracle_bundles);
    REQUIRE(ob->sparse()->UsesBundles(1));
    const auto obd = TeacherForced(*ob, prompt, forced);
    double worst_oracle = 0;
    for (size_t i = 0; i < d.size(); ++i) worst_oracle = std::max(worst_oracle, MaxAbsDiff(d[i], obd[i]));
    INFO("oracle over bundles: worst |logit diff| " << worst_oracle << " of " << scale);
    CHECK(worst_oracle < 1e-3 * scale);
    // It computed fewer neurons than the dense FFN: the natural zeros.
    const kx::SparseStats& os = ob->sparse()->stats();
    CHECK(os.kept < os.predicted);

    // (d) With predictors: bundles against masked-dense, test_prepare.cc's
    // bound (16-bit h into ffn_down vs float down_t rows, other sum order).
    auto ref = Load(p.model, p.sidecar, [] {
      kx::EngineOptions e;
      e.masked_dense = true;
      return e;
    }());
    auto sparse = Load(p.model, p.sidecar, {});
    REQUIRE(sparse->sparse()->UsesBundles(1));
    const auto a = TeacherForced(*ref, prompt, forced);
    const auto b = TeacherForced(*sparse, prompt, forced);
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, MaxAbsDiff(a[i], b[i]));
    INFO("worst |logit diff| " << worst << " of max |logit| " << scale);
    CHECK(worst < 1e-3 * scale);
    // The same neurons kept, but for a gate within rounding of 0 (or t),
    // where the two paths' dot products may decide differently.
    const int64_t ka = ref->sparse()->stats().kept, kb = sparse->sparse()->stats().kept;
    CHECK(std::abs(ka - kb) <= 1 + ka / 1000);
    CHECK(kb < sparse->sparse()->stats().predicted + 1);
  }
}

TEST_CASE("a sidecar built under another activation rule is refused, saying how to rebuild") {
  // Same weights (same seed), different activation key: only the rule differs
  // once the sha256 check is off (it would refuse first otherwise).
  const Prepared relu = PrepareTiny("mis_relu", Spec("relu"), kx::GgmlType::kQ8_0, false);
  const Prepared silu = PrepareTiny("mis_silu", Spec(""), kx::GgmlType::kQ8_0, false);
  CHECK(silu.report.activation_rule == "cats");
  kx::sparse::SidecarOptions no_sha;
  no_sha.check_model_sha256 = false;
  auto relu_model = kx::Model::Load(relu.model);
  auto silu_model = kx::Model::Load(silu.model);
  REQUIRE(relu_model.ok());
  REQUIRE(silu_model.ok());
  {
    auto s = kx::sparse::Sidecar::Open(relu.sidecar, **silu_model, no_sha);
    REQUIRE_FALSE(s.ok());
    const std::string msg(s.status().message());
    CHECK_THAT(msg, Catch::Contains("activation rule 'relu'"));
    CHECK_THAT(msg, Catch::Contains("silu"));
    CHECK_THAT(msg, Catch::Contains("kairox-prepare"));
  }
  {
    auto s = kx::sparse::Sidecar::Open(silu.sidecar, **relu_model, no_sha);
    REQUIRE_FALSE(s.ok());
    const std::string msg(s.status().message());
    CHECK_THAT(msg, Catch::Contains("activation rule 'cats'"));
    CHECK_THAT(msg, Catch::Contains("kairox-prepare"));
  }
  {
    // Each opens against its own model.
    CHECK(kx::sparse::Sidecar::Open(relu.sidecar, **relu_model).ok());
    CHECK(kx::sparse::Sidecar::Open(silu.sidecar, **silu_model).ok());
  }
  {
    // A FATReLU sidecar against a model with another t: the thresholds differ.
    const Prepared fat = PrepareTiny("mis_fat", Spec("fatrelu", 0.5f), kx::GgmlType::kQ8_0, false);
    const std::string other = TempDir() + "/mis_fat_other.gguf";
    REQUIRE(kx::test::WriteTinyModel(other, Spec("fatrelu", 0.25f), nullptr).ok());
    auto other_model = kx::Model::Load(other);
    REQUIRE(other_model.ok());
    auto s = kx::sparse::Sidecar::Open(fat.sidecar, **other_model, no_sha);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("threshold"));
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("kairox-prepare"));
  }
}
