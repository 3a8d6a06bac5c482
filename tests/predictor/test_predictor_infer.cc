// Decode-time predictor: F16 RunPredictor against a plain float loop, and the
// logit → mask / active-list helpers.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

#include "sparse/predictor.h"
#include "test_util.h"

namespace kx::sparse {
namespace {

// Shapes: n_in not a multiple of 16 or 64, n_out not a multiple of 64, so the
// kernels' tails and the last mask word are exercised.
constexpr int kIn = 77, kRank = 24, kOut = 203;
constexpr int kGuard = 8;  // poisoned elements past every output
constexpr float kPoison = 12345.0f;

Predictor RandomPredictor(std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Predictor p;
  p.n_in = kIn;
  p.rank = kRank;
  p.n_out = kOut;
  p.w1.resize(kRank * kIn);
  p.b1.resize(kRank);
  p.w2.resize(kOut * kRank);
  p.b2.resize(kOut);
  for (float& w : p.w1) w = normal(rng) / std::sqrt(static_cast<float>(kIn));
  for (float& w : p.b1) w = 0.2f * normal(rng);
  for (float& w : p.w2) w = normal(rng) / std::sqrt(static_cast<float>(kRank));
  for (float& w : p.b2) w = 0.5f * normal(rng);
  p.threshold = 0.3f;
  return p;
}

// The float reference on the F16-rounded weights, in double.
void Reference(const Predictor& r, const float* x, std::vector<double>& hidden,
               std::vector<double>& logits) {
  hidden.assign(r.rank, 0.0);
  logits.assign(r.n_out, 0.0);
  for (int j = 0; j < r.rank; ++j) {
    double acc = r.b1[j];
    for (int i = 0; i < r.n_in; ++i) acc += static_cast<double>(r.w1[j * r.n_in + i]) * x[i];
    hidden[j] = std::max(acc, 0.0);
  }
  for (int n = 0; n < r.n_out; ++n) {
    double acc = r.b2[n];
    for (int j = 0; j < r.rank; ++j) acc += static_cast<double>(r.w2[n * r.rank + j]) * hidden[j];
    logits[n] = acc;
  }
}

TEST_CASE("RunPredictor matches a float loop on every ISA", "[predictor]") {
  std::mt19937_64 rng = test::SeededRng(777);
  const Predictor p = RandomPredictor(rng);
  const PredictorF16 h = ToF16Predictor(p);
  const Predictor r = RoundedToF16(p);
  REQUIRE(h.w1.size() == p.w1.size());
  REQUIRE(h.WeightBytes() ==
          static_cast<int64_t>((kRank * kIn + kOut * kRank) * 2 + (kRank + kOut) * 4));
  for (size_t i = 0; i < p.w1.size(); ++i) REQUIRE(cpu::HalfToFloat(h.w1[i]) == r.w1[i]);

  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kIn);
  for (float& v : x) v = normal(rng);
  std::vector<double> ref_h, ref_z;
  Reference(r, x.data(), ref_h, ref_z);

  const Isa isas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
  int tested = 0;
  for (Isa isa : isas) {
    const cpu::KernelTable* kt = cpu::KernelsFor(isa);
    if (!kt) continue;
    ++tested;
    INFO("isa " << static_cast<int>(isa));
    std::vector<float> hidden(kRank + kGuard, kPoison), logits(kOut + kGuard, kPoison);
    hidden.assign(kRank + kGuard, std::numeric_limits<float>::quiet_NaN());
    logits.assign(kOut + kGuard, std::numeric_limits<float>::quiet_NaN());
    for (int g = 0; g < kGuard; ++g) hidden[kRank + g] = logits[kOut + g] = kPoison;
    RunPredictor(h.View(), *kt, x.data(), hidden.data(), logits.data());
    for (int j = 0; j < kRank; ++j) {
      // Sum of kIn products of O(1/√kIn · 1) terms in float: ~1e-6 relative.
      REQUIRE(std::isfinite(hidden[j]));
      REQUIRE(hidden[j] == Approx(ref_h[j]).margin(1e-4));
    }
    for (int n = 0; n < kOut; ++n) {
      REQUIRE(std::isfinite(logits[n]));
      REQUIRE(logits[n] == Approx(ref_z[n]).margin(1e-4));
    }
    for (int g = 0; g < kGuard; ++g) {
      REQUIRE(hidden[kRank + g] == kPoison);
      REQUIRE(logits[kOut + g] == kPoison);
    }
    // Rows split across two "threads" give the same logits.
    std::vector<float> split(kOut + kGuard, kPoison);
    RunPredictorRows(h.View(), *kt, hidden.data(), 0, 100, split.data());
    RunPredictorRows(h.View(), *kt, hidden.data(), 100, kOut, split.data());
    for (int n = 0; n < kOut; ++n) REQUIRE(split[n] == logits[n]);
    REQUIRE(split[kOut] == kPoison);
    // The sidecar's layout: W2 transposed (rank rows of n_out), whole and
    // split, against the same reference.
    std::vector<uint16_t> w2t(h.w2.size());
    for (int n = 0; n < kOut; ++n) {
      for (int k = 0; k < kRank; ++k) w2t[k * kOut + n] = h.w2[n * kRank + k];
    }
    PredictorView vt = h.View();
    vt.w2 = nullptr;
    vt.w2t = w2t.data();
    std::vector<float> lt(kOut + kGuard, kPoison), lt_split(kOut + kGuard, kPoison);
    RunPredictor(vt, *kt, x.data(), hidden.data(), lt.data());
    RunPredictorRows(vt, *kt, hidden.data(), 0, 100, lt_split.data());
    RunPredictorRows(vt, *kt, hidden.data(), 100, kOut, lt_split.data());
    for (int n = 0; n < kOut; ++n) {
      REQUIRE(lt[n] == Approx(ref_z[n]).margin(1e-4));
      REQUIRE(lt_split[n] == lt[n]);
    }
    for (int g = 0; g < kGuard; ++g) REQUIRE(lt[kOut + g] == kPoison);
  }
  CHECK(tested >= 1);
}

TEST_CASE("F16 predictor metrics match the float ones", "[predictor]") {
  std::mt19937_64 rng = test::SeededRng(4242);
  const Predictor p = RandomPredictor(rng);
  constexpr int64_t kTokens = 300;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kTokens * kIn);
  for (float& v : x) v = normal(rng);
  // Labels: the float predictor's own decisions, with every 7th bit flipped.
  ActivityMatrix labels(kTokens, kOut);
  std::vector<double> ref_h, ref_z;
  const float tl = ThresholdLogit(p.threshold);
  for (int64_t t = 0; t < kTokens; ++t) {
    Reference(p, x.data() + t * kIn, ref_h, ref_z);
    for (int n = 0; n < kOut; ++n) labels.Set(t, n, (ref_z[n] >= tl) != ((t * kOut + n) % 7 == 0));
  }
  const PredictorMetrics m = EvaluatePredictor(p, x.data(), kTokens, labels, 2);
  const PredictorMetrics m16 = EvaluatePredictor(RoundedToF16(p), x.data(), kTokens, labels, 1);
  CHECK(m.recall > 0.7);
  CHECK(m.recall < 1.0);
  CHECK(std::fabs(m16.recall - m.recall) < 5e-3);
  CHECK(std::fabs(m16.precision - m.precision) < 5e-3);
  CHECK(std::fabs(m16.predicted_fraction - m.predicted_fraction) < 5e-3);
  // The single-token decode path agrees with the batched evaluation.
  const PredictorF16 h = ToF16Predictor(p);
  std::vector<float> hidden(kRank), logits(kOut);
  int64_t tp = 0, pred = 0;
  for (int64_t t = 0; t < kTokens; ++t) {
    RunPredictor(h.View(), cpu::Kernels(), x.data() + t * kIn, hidden.data(), logits.data());
    for (int n = 0; n < kOut; ++n) {
      const bool yhat = logits[n] >= tl;
      pred += yhat;
      tp += yhat && labels.Get(t, n);
    }
  }
  CHECK(std::llabs(pred - (m16.true_positives + m16.false_positives)) <= kTokens * kOut / 500);
  CHECK(std::llabs(tp - m16.true_positives) <= kTokens * kOut / 500);
}

TEST_CASE("logits to mask and active list compare against logit(threshold)", "[predictor]") {
  std::mt19937_64 rng = test::SeededRng(99);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kOut);
  for (float& z : logits) z = normal(rng);
  for (float t : {0.5f, 0.2f, 0.9f}) {
    INFO("threshold " << t);
    std::vector<uint64_t> mask((kOut + 63) / 64 + 1, ~uint64_t{0});
    std::vector<int32_t> active(kOut + 1, -7);
    const int nm = LogitsToMask(logits.data(), kOut, t, mask.data());
    const int na = LogitsToActiveList(logits.data(), kOut, t, active.data());
    CHECK(nm == na);
    CHECK(nm > 0);
    CHECK(nm < kOut);
    int k = 0;
    for (int n = 0; n < kOut; ++n) {
      const float p = 1.0f / (1.0f + std::exp(-logits[n]));
      const bool on = (mask[n >> 6] >> (n & 63)) & 1u;
      // Away from the boundary the sigmoid and the logit test must agree.
      if (std::fabs(p - t) > 1e-5f) REQUIRE(on == (p >= t));
      if (on) REQUIRE(active[k++] == n);
    }
    CHECK(k == na);
    CHECK((mask[kOut / 64] >> (kOut % 64)) == 0);  // bits past n_out are clear
    CHECK(mask.back() == ~uint64_t{0});            // the word after the mask is untouched
    CHECK(active[kOut] == -7);
  }
  CHECK(ThresholdLogit(0.5f) == 0.0f);
  CHECK(ThresholdLogit(0.0f) == -std::numeric_limits<float>::infinity());
  CHECK(ThresholdLogit(0.25f) == Approx(std::log(1.0 / 3.0)));
}

TEST_CASE("ToF16 rounds to nearest half", "[predictor]") {
  const std::vector<float> v = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-8f, 0.1f};
  const std::vector<uint16_t> h = ToF16(v);
  REQUIRE(h.size() == v.size());
  CHECK(h[0] == 0x0000);
  CHECK(h[1] == 0x3C00);
  CHECK(h[2] == 0xC100);
  CHECK(h[3] == 0x7BFF);
  CHECK(cpu::HalfToFloat(h[5]) == Approx(0.1f).epsilon(1e-3));
}

}  // namespace
}  // namespace kx::sparse
