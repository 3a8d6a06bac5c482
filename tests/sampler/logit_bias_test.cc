// Unit tests of the sampler's logit bias (step 0 of the pipeline) and of
// ParseLogitBias, the ID(+|-)BIAS list parser behind kairox-cli --logit-bias.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/sampler.h"
#include "test_util.h"

namespace kx {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kVocab = 97;

SamplerParams Params(float temperature, uint64_t seed) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

std::vector<float> RandomLogits(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

size_t ArgMax(const std::vector<float>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) best = v[i] > v[best] ? i : best;
  return best;
}

}  // namespace

TEST_CASE("logit bias: greedy follows the biased logits", "[sampler][bias]") {
  auto rng = test::SeededRng(101);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = RandomLogits(rng, kVocab);
    const size_t top = ArgMax(logits);
    const int32_t other = static_cast<int32_t>((top + 1 + rng() % (kVocab - 1)) % kVocab);
    SamplerParams p = Params(0.0f, 1);
    // A bias that lifts `other` just above the top logit makes it the argmax.
    p.logit_bias = {{other, logits[top] - logits[static_cast<size_t>(other)] + 0.5f}};
    Sampler s(p);
    CHECK(s.Sample(logits, {}) == other);
    // Pairs for the same id add up: cancelling it restores the old argmax.
    p.logit_bias.push_back({other, -(logits[top] - logits[static_cast<size_t>(other)] + 0.5f)});
    Sampler s2(p);
    CHECK(s2.Sample(logits, {}) == static_cast<int32_t>(top));
  }
}

TEST_CASE("logit bias: -inf bans a token in every mode", "[sampler][bias]") {
  auto rng = test::SeededRng(202);
  const std::vector<float> logits = RandomLogits(rng, kVocab);
  const int32_t top = static_cast<int32_t>(ArgMax(logits));
  SamplerParams greedy = Params(0.0f, 1);
  greedy.logit_bias = {{top, -kInf}};
  Sampler g(greedy);
  const int32_t second = g.Sample(logits, {});
  CHECK(second != top);
  // Hot sampling with the top tokens banned never returns them.
  SamplerParams hot = Params(1.5f, 7);
  hot.top_k = 5;
  hot.logit_bias = {{top, -kInf}, {second, -kInf}};
  Sampler h(hot);
  for (int i = 0; i < 500; ++i) {
    const int32_t t = h.Sample(logits, {});
    REQUIRE(t != top);
    REQUIRE(t != second);
    REQUIRE(t >= 0);
    REQUIRE(t < static_cast<int32_t>(kVocab));
  }
}

TEST_CASE("logit bias: +inf forces a token, a ban beats it", "[sampler][bias]") {
  auto rng = test::SeededRng(303);
  const std::vector<float> logits = RandomLogits(rng, kVocab);
  SamplerParams p = Params(1.0f, 3);
  p.logit_bias = {{42, kInf}};
  Sampler s(p);
  for (int i = 0; i < 50; ++i) REQUIRE(s.Sample(logits, {}) == 42);
  // +inf on a -inf logit (or with a ban) stays banned: NaN never wins.
  std::vector<float> masked = logits;
  masked[42] = -kInf;
  SamplerParams q = Params(0.0f, 3);
  q.logit_bias = {{42, kInf}};
  Sampler t(q);
  CHECK(t.Sample(masked, {}) == static_cast<int32_t>(ArgMax(masked)));
  q.logit_bias = {{42, kInf}, {42, -kInf}};
  Sampler u(q);
  CHECK(u.Sample(logits, {}) != 42);
}

TEST_CASE("logit bias: ids outside the vocabulary and NaN biases are ignored", "[sampler][bias]") {
  auto rng = test::SeededRng(404);
  const std::vector<float> logits = RandomLogits(rng, kVocab);
  SamplerParams plain = Params(0.9f, 11);
  SamplerParams biased = plain;
  biased.logit_bias = {{-1, kInf},
                       {static_cast<int32_t>(kVocab), kInf},
                       {3, std::numeric_limits<float>::quiet_NaN()}};
  Sampler a(plain);
  Sampler b(biased);
  for (int i = 0; i < 200; ++i) REQUIRE(a.Sample(logits, {}) == b.Sample(logits, {}));
}

TEST_CASE("logit bias: runs before the repetition penalty", "[sampler][bias]") {
  // Token 1 is negative after its bias, so the penalty multiplies instead of dividing.
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -3.0f};
  SamplerParams p = Params(0.0f, 1);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = -1;
  p.logit_bias = {{1, -2.5f}};                  // 2 - 2.5 = -0.5, penalised to -1.0
  const std::vector<int32_t> history = {1, 0};  // 0: 1.0 / 2 = 0.5; 2 is untouched at 0.5
  Sampler s(p);
  CHECK(s.Sample(logits, history) == 0);  // 0.5 ties with id 2: the lowest id
  p.logit_bias = {{1, -2.5f}, {2, 0.25f}};
  Sampler s2(p);
  CHECK(s2.Sample(logits, history) == 2);
}

TEST_CASE("ParseLogitBias reads ID+BIAS and ID-BIAS lists", "[sampler][bias]") {
  auto one = ParseLogitBias("15043+1.5,2-inf");
  REQUIRE(one.ok());
  REQUIRE(one->size() == 2);
  CHECK((*one)[0] == LogitBias{15043, 1.5f});
  CHECK((*one)[1].token == 2);
  CHECK((*one)[1].bias == -kInf);
  auto more = ParseLogitBias("0+inf,7-0.25,9+1e2,11-infinity");
  REQUIRE(more.ok());
  REQUIRE(more->size() == 4);
  CHECK((*more)[0] == LogitBias{0, kInf});
  CHECK((*more)[1] == LogitBias{7, -0.25f});
  CHECK((*more)[2] == LogitBias{9, 100.0f});
  CHECK((*more)[3] == LogitBias{11, -kInf});
  auto empty = ParseLogitBias("");
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("ParseLogitBias refuses malformed entries by name", "[sampler][bias]") {
  for (const char* bad :
       {"15043", "+1.5", "-1+2", "x+1", "1+", "1+abc", "1+nan", "1+0x10", "1+1.5,", ",1+1.5",
        "1+1.5,,2-1", "99999999999+1", "1+1e99", "1 +1", "1+-1"}) {
    INFO(bad);
    auto r = ParseLogitBias(bad);
    CHECK(absl::IsInvalidArgument(r.status()));
    CHECK(std::string(r.status().message()).find("logit bias '") != std::string::npos);
  }
  auto r = ParseLogitBias("3+1,7+oops");
  CHECK(std::string(r.status().message()).find("'7+oops'") != std::string::npos);
}

}  // namespace kx
