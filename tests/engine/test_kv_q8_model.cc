// The Q8_0 KV cache on the default model (SmolLM2-135M), teacher-forced over
// a fixed text: top-1 agreement and logit differences against the F16 cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "test_util.h"

namespace {

constexpr const char* kText =
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg combined movable metal type, oil-based ink and a wooden screw press into a "
    "system that could produce books far faster than scribes. Within fifty years presses "
    "operated in more than two hundred European cities, and the price of books fell so far "
    "that merchants, students and artisans could own them. Literacy spread, scientific "
    "results travelled quickly between scholars, and the standardisation of spelling and "
    "grammar followed. Historians still argue about how much of the Reformation, the "
    "scientific revolution and the rise of the nation state can be traced to this one "
    "machine, but few doubt that it changed how ideas moved through society.";

// Measured on SmolLM2-135M-Instruct Q4_1 (this text, 132 positions, AVX-512):
// top-1 agreement 0.985 (2 flips, both where F16's top-2 gap < 1) and
// max |logit diff| 0.53; the bounds leave about 2× room for other ISAs.
constexpr double kMaxLogitDiff = 1.0;       // bound on max |logit Q8_0 − F16| over all positions
constexpr double kMinTop1Agreement = 0.95;  // fraction of positions with the same argmax
// Where F16's top two logits are further apart than this, the argmax must agree.
constexpr float kClearGap = 1.0f;

int Argmax(std::span<const float> v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

float Top2Gap(std::span<const float> v) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : v) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b;
}

TEST_CASE("SmolLM2 with a Q8_0 KV cache tracks the F16 cache", "[engine][kv][model]") {
  const std::string path = kx::test::DefaultModelOrSkip();
  auto model = kx::Model::Load(path);
  INFO(model.status().message());
  REQUIRE(model.ok());
  std::shared_ptr<const kx::Model> shared = std::move(*model);

  std::vector<std::unique_ptr<kx::Engine>> engines;
  for (auto kv : {kx::EngineOptions::KvType::kF16, kx::EngineOptions::KvType::kQ8_0}) {
    kx::EngineOptions opts;
    opts.n_threads = 2;
    opts.n_ctx = 512;
    opts.kv_type = kv;
    auto e = kx::Engine::Create(shared, opts);
    INFO(e.status().message());
    REQUIRE(e.ok());
    engines.push_back(std::move(*e));
  }
  const std::vector<int32_t> ids = engines[0]->tokenizer().Encode(kText, true, false);
  REQUIRE(ids.size() > 100);
  for (auto& e : engines) REQUIRE(e->Eval(ids, /*all_logits=*/true).ok());

  const int n = static_cast<int>(ids.size());
  int agree = 0;
  double max_diff = 0;
  for (int i = 0; i < n; ++i) {
    const auto a = engines[0]->Logits(i), b = engines[1]->Logits(i);
    REQUIRE(a.size() == b.size());
    for (size_t j = 0; j < a.size(); ++j)
      max_diff = std::max(max_diff, std::fabs(double(a[j]) - b[j]));
    const bool same = Argmax(a) == Argmax(b);
    agree += same;
    if (Top2Gap(a) > kClearGap) {
      INFO("position " << i << " gap " << Top2Gap(a));
      CHECK(same);
    }
  }
  const double agreement = static_cast<double>(agree) / n;
  std::fprintf(stderr, "kv q8_0 vs f16: %d positions, top-1 agreement %.4f, max|logit diff| %.4f\n",
               n, agreement, max_diff);
  CHECK(agreement >= kMinTop1Agreement);
  CHECK(max_diff <= kMaxLogitDiff);
}

}  // namespace
