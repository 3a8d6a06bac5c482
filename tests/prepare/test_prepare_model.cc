// kairox-prepare on the real default model, inside CI: the sidecar is built in
// minutes, its report holds what the issue asks for, and the sparse engine on
// it decodes through the bundles close to its masked-dense reference.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/device_ffn.h"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "model/tokenizer.h"
#include "prepare/prepare.h"
#include "test_util.h"

namespace {

// Perplexity of tokens[1..] from an empty context, one token per Eval (the
// sparse engine through its bundles): logits[t] follows tokens[t].
double Perplexity(kx::Engine& e, const std::vector<int32_t>& tokens) {
  e.TruncateKv(0);
  const auto logits = kx::test::TeacherForced(e, {}, tokens);
  double nll = 0;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const std::vector<float>& l = logits[t];
    const double mx = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (float v : l) z += std::exp(static_cast<double>(v) - mx);
    nll += mx + std::log(z) - l[static_cast<size_t>(tokens[t + 1])];
  }
  return std::exp(nll / static_cast<double>(tokens.size() - 1));
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

TEST_CASE("the default model's sidecar: prepare, report, sparse decode") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string sidecar =
      kx::test::EnvOr("KAIROX_BIN_DIR", "/tmp") + "/../default-model.kairox.gguf";
  kx::PrepareOptions o;
  o.model_path = model;
  o.sidecar_path = sidecar;
  o.sparsity = 0.3f;
  o.n_threads = 2;
  o.calibration.token_budget = 4096;
  // The default layout for this Q4_1 model: its own ffn_down blocks.
  auto rep = kx::Prepare(o);
  INFO(rep.status().message());
  REQUIRE(rep.ok());
  std::fprintf(stderr, "%s", rep->ToTable().c_str());
  REQUIRE(rep->layers.size() == 30);
  int beats = 0;
  for (const kx::LayerReport& l : rep->layers) {
    // The threshold leaves the target fraction of calibration values below it.
    CHECK(l.calib_sparsity == Approx(0.3).margin(0.01));
    CHECK(l.predictor.rank > 0);
    beats += l.predictor.beats_static_mask;
  }
  // The predictor beats the most-frequent-neurons mask of the same size on
  // held-out tokens (recall and precision both) in every layer.
  CHECK(beats == 30);
  CHECK(rep->bundle_bytes > 0);

  // Decode over bundles vs masked-dense: the same predictor decisions and the
  // same ffn_down bytes (down blocks); they differ by the order of the float
  // sums, which moves neurons whose |act| sits within a rounding error of the
  // threshold to the other side in later layers and tokens. The worst of the
  // 16 steps depends on that order: with Q8_0 down_t rows it was 0.9911 with
  // 16 fixed chunks and 0.9607 with one chunk per thread, while perplexity
  // through the bundles was 37.558 for both; down blocks gave 0.9876 (one
  // chunk per thread) and 0.9798 (two). So the bound on the worst step only
  // catches gross errors; the mean and the top-1 agreement carry the check.
  kx::EngineOptions eo;
  eo.n_threads = 2;
  eo.sidecar = sidecar;
  auto sparse = kx::Engine::Load(model, eo);
  REQUIRE(sparse.ok());
  eo.masked_dense = true;
  auto masked = kx::Engine::Load(model, eo);
  REQUIRE(masked.ok());
  REQUIRE((*sparse)->sparse()->UsesBundles(1));
  const std::vector<int32_t> prompt =
      (*sparse)->tokenizer().Encode("The capital of France is Paris. The capital of Italy is", false, false);
  REQUIRE((*sparse)->Eval(prompt).ok());
  REQUIRE((*masked)->Eval(prompt).ok());
  double worst = 1.0, sum = 0.0;
  int same_top1 = 0;
  int32_t next = 0;
  for (int step = 0; step < 16; ++step) {
    auto ls = (*sparse)->Logits();
    auto lm = (*masked)->Logits();
    const std::vector<float> a(ls.begin(), ls.end()), b(lm.begin(), lm.end());
    const double c = Cosine(a, b);
    worst = std::min(worst, c);
    sum += c;
    next = static_cast<int32_t>(std::max_element(b.begin(), b.end()) - b.begin());
    same_top1 += next == static_cast<int32_t>(std::max_element(a.begin(), a.end()) - a.begin());
    REQUIRE((*sparse)->Eval({&next, 1}).ok());
    REQUIRE((*masked)->Eval({&next, 1}).ok());
  }
  std::fprintf(stderr,
               "sparse vs masked-dense decode: logit cosine mean %.6f, worst %.6f; same top-1 "
               "%d of 16\n",
               sum / 16, worst, same_top1);
  CHECK(sum / 16 > 0.995);
  CHECK(worst > 0.95);
  CHECK(same_top1 >= 14);

  // Over a paragraph of real text the two agree closely: perplexity through
  // the bundles within 3 % of masked-dense's (what a down projection of the
  // wrong bytes, groups or coefficients would break by far). Not closer: the two
  // sum in different orders (16-bit coefficients in the down blocks), which moves
  // neurons at the CATS threshold across it, and those flips compound through the
  // layers — the CPU alone at 1 and 2 threads was measured 2.4 % apart, and a change
  // of the attention's summation order alone moved this ratio from < 1 % to 1.5 %.
  const std::vector<int32_t> text = (*sparse)->tokenizer().Encode(
      "It was a bright cold day in April, and the clocks were striking thirteen. The village "
      "had one road, a church with a square tower, and a small school where the children "
      "learned to read and count. In the evenings the farmers met at the inn to talk about the "
      "weather, the price of wheat and the new railway that was to be built across the valley. "
      "Nobody believed it would ever come, but the engineers had already arrived.",
      false, false);
  REQUIRE(text.size() > 60);
  const double ppl_sparse = Perplexity(**sparse, text), ppl_masked = Perplexity(**masked, text);
  std::fprintf(stderr, "paragraph perplexity: bundles %.4f, masked-dense %.4f\n", ppl_sparse,
               ppl_masked);
  CHECK(std::fabs(ppl_sparse / ppl_masked - 1.0) < 0.03);

  // The split FFN (docs/device.md) on the sim device, the attention on the device too: the
  // device sums in another order than the CPU (and multiplies float coefficients where the
  // CPU's down blocks take 16-bit ones), which moves neurons at the CATS threshold to the
  // other side, and those flips grow through the layers: at this sparsity the CPU alone with
  // 1 and 2 threads (sums in another order, nothing else) differed by 2.5 % in this
  // paragraph's perplexity (29.48 vs 28.77 with kairox-sim's SmolLM2 sidecar). So the bound is
  // 5 %, under a RAM budget too (three tiers), while the device computes a growing share of
  // the groups; a wrong partial sum or a group computed twice or not at all moves it by far
  // more (a skipped device share: tests/tier/test_device_ffn.cc's negative control).
  double last_share = -1.0;
  for (const char* vram_ffn : {"10%", "50%", "100%"}) {
    for (const char* ram : {"", "50%"}) {
      if (*ram && std::string(vram_ffn) != "50%") continue;
      kx::EngineOptions so;
      so.n_threads = 2;
      so.sidecar = sidecar;
      so.device = "sim";
      so.vram_ffn = vram_ffn;
      so.ram_budget = ram;
      auto split = kx::Engine::Load(model, so);
      INFO("vram-ffn " << vram_ffn << " ram " << ram << ": " << split.status().message());
      REQUIRE(split.ok());
      REQUIRE((*split)->device_ffn() != nullptr);
      const double ppl = Perplexity(**split, text);
      const kx::DeviceFfnStats& st = (*split)->device_ffn()->stats();
      const double share = static_cast<double>(st.neurons_on_device) / st.neurons_needed;
      std::fprintf(stderr,
                   "split FFN, vram-ffn %s%s%s: perplexity %.4f (CPU bundles %.4f), %.1f %% of "
                   "predicted neurons on the device, %lld reloads\n",
                   vram_ffn, *ram ? ", ram-budget " : "", ram, ppl, ppl_sparse, 100.0 * share,
                   static_cast<long long>(st.loads));
      CHECK(std::fabs(ppl / ppl_sparse - 1.0) < 0.05);
      if (!*ram) {
        CHECK(share > last_share);
        last_share = share;
      }
    }
  }
  ::unlink(sidecar.c_str());
}

}  // namespace
