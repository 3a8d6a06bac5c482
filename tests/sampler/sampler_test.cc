// Unit tests of kx::Sampler: each filter's kept set, the draw's distribution,
// determinism, and non-finite logits.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "catch2/catch.hpp"
#include "test_util.h"

namespace kx {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Filters off, temperature 1: a plain softmax draw.
SamplerParams PlainParams(uint64_t seed) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

SamplerParams GreedyParams() {
  SamplerParams p = PlainParams(1);
  p.temperature = 0.0f;
  return p;
}

std::vector<float> RandomLogits(std::mt19937_64& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

size_t ArgMax(const std::vector<float>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Ids in order of decreasing logit (reference: a full sort).
std::vector<int32_t> ByLikelihood(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  return ids;
}

// Draws `n` tokens and returns the set of ids seen.
std::set<int32_t> DrawnSet(Sampler& s, const std::vector<float>& logits, int n,
                           const std::vector<int32_t>& history = {}) {
  std::set<int32_t> seen;
  for (int i = 0; i < n; ++i) seen.insert(s.Sample(logits, history));
  return seen;
}

// A temperature so high that the draw is near-uniform over the kept set, so
// a few thousand draws see every kept token: the drawn set == the kept set.
constexpr float kFlatTemperature = 1e4f;
constexpr int kSetDraws = 20000;

TEST_CASE("greedy returns the argmax, lowest id on ties", "[sampler]") {
  auto rng = test::SeededRng(11);
  Sampler s(GreedyParams());
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits = RandomLogits(rng, 1000 + trial * 37, 2.0f);
    REQUIRE(s.Sample(logits, {}) == static_cast<int32_t>(ArgMax(logits)));
  }
  std::vector<float> tied = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  REQUIRE(s.Sample(tied, {}) == 1);
}

TEST_CASE("same seed gives the same tokens; Reset restarts", "[sampler]") {
  auto rng = test::SeededRng(12);
  std::vector<float> logits = RandomLogits(rng, 500, 1.5f);
  SamplerParams p;  // the defaults: every filter on
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> seq_a, seq_b;
  for (int i = 0; i < 200; ++i) {
    seq_a.push_back(a.Sample(logits, seq_a));
    seq_b.push_back(b.Sample(logits, seq_b));
  }
  REQUIRE(seq_a == seq_b);
  REQUIRE(std::set<int32_t>(seq_a.begin(), seq_a.end()).size() > 1);  // it does sample

  p.seed = 4321;
  Sampler c(p);
  std::vector<int32_t> seq_c;
  for (int i = 0; i < 200; ++i) seq_c.push_back(c.Sample(logits, seq_c));
  REQUIRE(seq_c != seq_a);

  a.Reset(1234);
  std::vector<int32_t> again;
  for (int i = 0; i < 200; ++i) again.push_back(a.Sample(logits, again));
  REQUIRE(again == seq_a);
}

TEST_CASE("the uniform variate covers [0, 1)", "[sampler]") {
  REQUIRE(Sampler::UniformFromBits(0) == 0.0);
  REQUIRE(Sampler::UniformFromBits(~uint64_t{0}) < 1.0);
  REQUIRE(Sampler::UniformFromBits(uint64_t{1} << 63) == 0.5);
}

TEST_CASE("top-k = 1 is greedy", "[sampler]") {
  auto rng = test::SeededRng(13);
  SamplerParams p = PlainParams(99);
  p.top_k = 1;
  p.temperature = 5.0f;
  Sampler s(p);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits = RandomLogits(rng, 300, 0.5f);
    REQUIRE(s.Sample(logits, {}) == static_cast<int32_t>(ArgMax(logits)));
  }
}

TEST_CASE("a plain draw follows the softmax", "[sampler]") {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.25f};
  std::vector<double> prob(logits.size());
  double z = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) z += std::exp(double{logits[i]});
  for (size_t i = 0; i < logits.size(); ++i) prob[i] = std::exp(double{logits[i]}) / z;

  constexpr int kDraws = 20000;
  Sampler s(PlainParams(2024));
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const int32_t t = s.Sample(logits, {});
    REQUIRE(t >= 0);
    REQUIRE(t < static_cast<int32_t>(logits.size()));
    ++counts[static_cast<size_t>(t)];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double expected = prob[i] * kDraws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  // 7 degrees of freedom: P(chi2 > 24.3) = 0.001 for a correct sampler.
  INFO("chi2 = " << chi2);
  REQUIRE(chi2 < 24.3);

  // Temperature 2 flattens: the same test against softmax(logits / 2).
  SamplerParams hot = PlainParams(77);
  hot.temperature = 2.0f;
  Sampler h(hot);
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(h.Sample(logits, {}))];
  z = 0.0;
  for (float l : logits) z += std::exp(l / 2.0);
  chi2 = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double expected = std::exp(logits[i] / 2.0) / z * kDraws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  INFO("chi2 (T=2) = " << chi2);
  REQUIRE(chi2 < 24.3);
}

TEST_CASE("top-p keeps the smallest set that reaches p", "[sampler]") {
  // Probabilities 0.5, 0.2, 0.15, 0.1, 0.05 (logits are their logs).
  const std::vector<float> logits = {std::log(0.2f), std::log(0.05f), std::log(0.5f),
                                     std::log(0.1f), std::log(0.15f)};
  SamplerParams p = PlainParams(5);
  p.temperature = kFlatTemperature;
  p.top_p = 0.69f;  // 0.5 + 0.2 reaches it
  Sampler a(p);
  REQUIRE(DrawnSet(a, logits, 2000) == std::set<int32_t>{2, 0});
  p.top_p = 0.75f;  // needs 0.15 as well
  Sampler b(p);
  REQUIRE(DrawnSet(b, logits, 2000) == std::set<int32_t>{2, 0, 4});
  p.top_p = 0.1f;  // the top token alone
  Sampler c(p);
  REQUIRE(DrawnSet(c, logits, 2000) == std::set<int32_t>{2});
}

TEST_CASE("top-p over a large vocabulary (several sort chunks)", "[sampler]") {
  auto rng = test::SeededRng(14);
  const std::vector<float> logits = RandomLogits(rng, 4096, 1.0f);
  for (float top_p : {0.05f, 0.3f, 0.6f}) {
    // Reference: the full sort, then the smallest prefix reaching p.
    std::vector<int32_t> order = ByLikelihood(logits);
    double z = 0.0;
    for (float l : logits) z += std::exp(double{l});
    std::set<int32_t> expected;
    double mass = 0.0;
    for (int32_t id : order) {
      expected.insert(id);
      mass += std::exp(double{logits[static_cast<size_t>(id)]}) / z;
      if (mass >= top_p) break;
    }
    INFO("top_p = " << top_p << ", kept " << expected.size());
    REQUIRE(expected.size() > 1);
    SamplerParams p = PlainParams(6);
    p.temperature = kFlatTemperature;
    p.top_p = top_p;
    Sampler s(p);
    REQUIRE(DrawnSet(s, logits, kSetDraws) == expected);
  }
}

TEST_CASE("top-k keeps the k most likely", "[sampler]") {
  auto rng = test::SeededRng(15);
  const std::vector<float> logits = RandomLogits(rng, 2000, 1.0f);
  const std::vector<int32_t> order = ByLikelihood(logits);
  for (int k : {3, 40, 150}) {
    SamplerParams p = PlainParams(7);
    p.temperature = kFlatTemperature;
    p.top_k = k;
    Sampler s(p);
    REQUIRE(DrawnSet(s, logits, kSetDraws) == std::set<int32_t>(order.begin(), order.begin() + k));
  }
  // Ties at the cut keep the lowest ids (a platform-independent choice).
  const std::vector<float> flat = {1.0f, 0.5f, 0.5f, 2.0f, 0.5f, 0.5f};
  SamplerParams p = PlainParams(70);
  p.temperature = kFlatTemperature;
  p.top_k = 3;
  Sampler s(p);
  REQUIRE(DrawnSet(s, flat, 2000) == std::set<int32_t>{3, 0, 1});
  // Top-k among +inf tokens too.
  const std::vector<float> infs = {kInf, 0.0f, kInf, kInf, kInf};
  Sampler t(p);
  REQUIRE(DrawnSet(t, infs, 2000) == std::set<int32_t>{0, 2, 3});
}

TEST_CASE("min-p keeps tokens with p >= min_p * p_max", "[sampler]") {
  auto rng = test::SeededRng(16);
  const std::vector<float> logits = RandomLogits(rng, 2000, 1.0f);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  for (float min_p : {0.02f, 0.2f}) {
    std::set<int32_t> expected;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::exp(double{logits[i]} - max_logit) >= min_p) expected.insert(int32_t(i));
    }
    INFO("min_p = " << min_p << ", kept " << expected.size());
    REQUIRE(expected.size() > 1);
    REQUIRE(expected.size() < logits.size());
    SamplerParams p = PlainParams(8);
    p.temperature = kFlatTemperature;
    p.min_p = min_p;
    Sampler s(p);
    REQUIRE(DrawnSet(s, logits, kSetDraws) == expected);
  }
}

TEST_CASE("filters compose: top-k, then min-p, then top-p", "[sampler]") {
  // Probabilities ~ 0.4, 0.3, 0.2, 0.06, 0.04: top-k 4 drops 0.04; min-p 0.2
  // (threshold 0.08) drops 0.06; top-p 0.5 keeps 0.4 and 0.3.
  const std::vector<float> logits = {std::log(0.06f), std::log(0.3f), std::log(0.04f),
                                     std::log(0.4f), std::log(0.2f)};
  SamplerParams p = PlainParams(9);
  p.temperature = kFlatTemperature;
  p.top_k = 4;
  p.min_p = 0.2f;
  Sampler a(p);
  REQUIRE(DrawnSet(a, logits, 2000) == std::set<int32_t>{1, 3, 4});
  p.top_p = 0.5f;  // of the mass left after top-k and min-p (0.9): 0.4 + 0.3 > 0.45
  Sampler b(p);
  REQUIRE(DrawnSet(b, logits, 2000) == std::set<int32_t>{1, 3});
}

TEST_CASE("repetition penalty", "[sampler]") {
  SamplerParams p = GreedyParams();
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 3;
  Sampler s(p);
  const std::vector<float> logits = {3.0f, 2.0f, -1.0f, -0.6f};
  // No history: plain argmax.
  REQUIRE(s.Sample(logits, {}) == 0);
  // Token 0 in the window: 3 / 2 = 1.5 < 2.
  const std::vector<int32_t> recent = {0};
  REQUIRE(s.Sample(logits, recent) == 1);
  // Token 0 outside the window of 3: not penalised.
  const std::vector<int32_t> old = {0, 2, 2, 2};
  REQUIRE(s.Sample(logits, old) == 0);
  // Negative logits are multiplied: with 0 and 1 penalised (1.5, 1.0) nothing
  // changes at the top, but -0.6 * 2 = -1.2 falls below -1, seen with top-k 2.
  SamplerParams q = PlainParams(3);
  q.temperature = kFlatTemperature;
  q.repeat_penalty = 2.0f;
  q.top_k = 3;
  q.repeat_last_n = -1;  // the whole history
  Sampler t(q);
  const std::vector<int32_t> hist = {3, 1, 1, 1, 1, 1, 1, 1, 1};
  REQUIRE(DrawnSet(t, logits, 2000) == std::set<int32_t>{0, 1, 3});        // no history
  REQUIRE(DrawnSet(t, logits, 2000, hist) == std::set<int32_t>{0, 1, 2});  // 3 dropped
  // A token repeated many times is penalised once: 2 / 2 = 1 > 0.9.
  const std::vector<float> close = {2.0f, 0.9f};
  const std::vector<int32_t> many = {0, 0, 0};
  REQUIRE(s.Sample(close, many) == 0);
  // A penalty <= 0 is off (documented), not a sign flip.
  SamplerParams z = GreedyParams();
  z.repeat_penalty = 0.0f;
  Sampler off(z);
  REQUIRE(off.Sample(logits, recent) == 0);
  // Out-of-range history ids are ignored.
  const std::vector<int32_t> bad = {-5, 1000};
  REQUIRE(s.Sample(logits, bad) == 0);
}

TEST_CASE("non-finite logits", "[sampler]") {
  SamplerParams p = PlainParams(10);
  Sampler greedy(GreedyParams());
  Sampler s(p);
  // NaN is never picked, even where it would be the "largest".
  std::vector<float> with_nan = {0.1f, kNaN, 0.3f, kNaN};
  REQUIRE(greedy.Sample(with_nan, {}) == 2);
  for (int32_t t : DrawnSet(s, with_nan, 500)) REQUIRE((t == 0 || t == 2));
  // -inf is never picked.
  std::vector<float> with_neg_inf = {-kInf, 0.0f, -kInf, -50.0f};
  REQUIRE(greedy.Sample(with_neg_inf, {}) == 1);
  for (int32_t t : DrawnSet(s, with_neg_inf, 500)) REQUIRE((t == 1 || t == 3));
  // +inf: uniform over the +inf tokens.
  std::vector<float> with_pos_inf = {1.0f, kInf, 100.0f, kInf, kNaN};
  REQUIRE(greedy.Sample(with_pos_inf, {}) == 1);
  REQUIRE(DrawnSet(s, with_pos_inf, 500) == std::set<int32_t>{1, 3});
  // Nothing samplable: token 0, no crash.
  std::vector<float> hopeless = {kNaN, -kInf, kNaN};
  REQUIRE(greedy.Sample(hopeless, {}) == 0);
  REQUIRE(s.Sample(hopeless, {}) == 0);
  // The default filters on the same inputs do not crash either.
  Sampler defaults{SamplerParams{}};
  REQUIRE(defaults.Sample(with_pos_inf, {}) % 2 == 1);
  REQUIRE(defaults.Sample(hopeless, {}) == 0);
}

TEST_CASE("parameters out of range are refused by name, before anything samples", "[sampler]") {
  REQUIRE(ValidateSamplerParams(SamplerParams{}).ok());
  struct Case {
    const char* name;
    void (*set)(SamplerParams&);
  };
  const Case cases[] = {
      {"min_p", [](SamplerParams& p) { p.min_p = 2.0f; }},
      {"min_p", [](SamplerParams& p) { p.min_p = -0.5f; }},
      {"min_p", [](SamplerParams& p) { p.min_p = std::nanf(""); }},
      {"top_p", [](SamplerParams& p) { p.top_p = 1.5f; }},
      {"top_p", [](SamplerParams& p) { p.top_p = std::nanf(""); }},
      {"temperature", [](SamplerParams& p) { p.temperature = std::nanf(""); }},
      {"temperature", [](SamplerParams& p) { p.temperature = INFINITY; }},
      {"repeat_penalty", [](SamplerParams& p) { p.repeat_penalty = 0.0f; }},
      {"repeat_penalty", [](SamplerParams& p) { p.repeat_penalty = -1.0f; }},
      {"repeat_last_n", [](SamplerParams& p) { p.repeat_last_n = -2; }},
      {"top_k", [](SamplerParams& p) { p.top_k = -5; }},
  };
  for (const Case& c : cases) {
    SamplerParams p;
    c.set(p);
    const absl::Status st = ValidateSamplerParams(p);
    INFO(c.name << ": " << st.ToString());
    REQUIRE(absl::IsInvalidArgument(st));
    REQUIRE(st.message().find(c.name) != absl::string_view::npos);
    REQUIRE(st.message().find("range") != absl::string_view::npos);
  }
}

TEST_CASE("min_p at its limit keeps the top token (the draw never runs out of candidates)",
          "[sampler]") {
  // min_p = 1 keeps exactly the tokens tied with the maximum; a sampler built without
  // validation and min_p > 1 (which used to read before its candidate vector) still returns
  // the top token.
  auto rng = test::SeededRng(31);
  std::vector<float> logits = RandomLogits(rng, 500, 3.0f);
  for (float min_p : {1.0f, 2.0f, 1e30f}) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.min_p = min_p;
    p.top_k = 0;
    Sampler s(p);
    for (int i = 0; i < 50; ++i)
      REQUIRE(s.Sample(logits, {}) == static_cast<int32_t>(ArgMax(logits)));
  }
}

}  // namespace
}  // namespace kx
