// The load-aware dual thresholds (sparse/dual_threshold.h) on seeded random logits:
//   - the error bound E(θ_g, θ_c) ≤ E(θ) holds at every step, and the step's gain − loss is
//     E(θ) − E(θ_g, θ_c); without the clamp (the negative control) it fails;
//   - θ_g = θ_c = θ gives the single threshold's masks bit for bit (LogitsToMask's);
//   - the greedy: with the device as the bottleneck θ_g rises toward θ and never above it,
//     θ_c falls toward θ and never below it; with the CPU as the bottleneck θ_g falls (not
//     below θ − max) and θ_c rises unless a step was clamped.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch2/catch.hpp"
#include "sparse/dual_threshold.h"
#include "sparse/predictor.h"
#include "test_util.h"

namespace {

using kx::sparse::BuildDualMasks;
using kx::sparse::DualMaskStep;
using kx::sparse::SkippedMass;

struct Step {
  std::vector<float> logits;
  std::vector<uint8_t> on_device;
  float logit_g = 0, logit_c = 0;
};

// Logits around the threshold (so both bands hold neurons), about a third of the groups on
// the device, offsets up to 3 logits on either side.
Step RandomStep(std::mt19937_64& rng, int n_groups, int gs, float logit) {
  std::normal_distribution<float> z(logit - 0.5f, 2.0f);
  std::uniform_real_distribution<float> off(0.0f, 3.0f);
  std::bernoulli_distribution dev(0.35);
  Step s;
  s.logits.resize(static_cast<size_t>(n_groups) * gs);
  for (float& v : s.logits) v = z(rng);
  s.on_device.resize(n_groups);
  for (uint8_t& d : s.on_device) d = dev(rng) ? 1 : 0;
  s.logit_g = logit - off(rng);
  s.logit_c = logit + off(rng);
  return s;
}

// Tolerance of the two sums' rounding (about 1e3 terms of at most 1).
constexpr double kMassTol = 1e-9;

}  // namespace

TEST_CASE("dual thresholds: the error bound holds at every step", "[dual_threshold]") {
  auto rng = kx::test::SeededRng(1301);
  const float logit = kx::sparse::ThresholdLogit(0.4f);
  for (int gs : {4, 16, 32}) {
    const int n_groups = 1536 / gs;
    std::vector<uint32_t> single(n_groups), dual(n_groups);
    const std::vector<uint8_t> none(n_groups, 0);
    int clamped = 0, free_steps = 0, partial = 0, violations_without_clamp = 0;
    for (int step = 0; step < 200; ++step) {
      const Step s = RandomStep(rng, n_groups, gs, logit);
      BuildDualMasks(s.logits.data(), n_groups, gs, logit, logit, logit, none.data(),
                     single.data());
      const DualMaskStep d = BuildDualMasks(s.logits.data(), n_groups, gs, logit, s.logit_g,
                                            s.logit_c, s.on_device.data(), dual.data());
      const double e_single = SkippedMass(s.logits.data(), n_groups, gs, single.data());
      const double e_dual = SkippedMass(s.logits.data(), n_groups, gs, dual.data());
      INFO("gs " << gs << " step " << step << ": E(θ) " << e_single << ", E(θ_g, θ_c) " << e_dual
                 << ", gain " << d.gain_mass << ", loss " << d.loss_mass);
      REQUIRE(e_single > 1.0);  // the logits are not degenerate: there is error to bound
      CHECK(e_dual <= e_single + kMassTol);
      CHECK(std::fabs((e_single - e_dual) - (d.gain_mass - d.loss_mass)) < 1e-6);
      int predicted = 0;
      for (uint32_t m : dual) predicted += __builtin_popcount(m);
      CHECK(predicted == d.predicted);
      clamped += d.clamped;
      free_steps += !d.clamped && d.dropped > 0;
      partial += d.clamped && d.dropped > 0;  // put back only as much of the CPU's band as needed

      // The negative control: the same step with the clamp skipped.
      std::vector<uint32_t> broken(n_groups);
      BuildDualMasks(s.logits.data(), n_groups, gs, logit, s.logit_g, s.logit_c, s.on_device.data(),
                     broken.data(), /*debug_no_clamp=*/true);
      violations_without_clamp +=
          SkippedMass(s.logits.data(), n_groups, gs, broken.data()) > e_single + kMassTol;
    }
    INFO("gs " << gs << ": " << clamped << " clamped steps, " << free_steps
               << " steps that skipped CPU neurons within the bound, " << partial
               << " clamped steps that still skipped some");
    CHECK(clamped > 0);                   // the clamp was needed and applied,
    CHECK(free_steps > 0);                // and steps also moved work off the CPU under the bound
    CHECK(violations_without_clamp > 0);  // the clamp is what holds the bound
    CHECK(violations_without_clamp <= clamped);
  }
}

TEST_CASE("dual thresholds: θ_g = θ_c = θ gives the single threshold's masks bit for bit",
          "[dual_threshold]") {
  auto rng = kx::test::SeededRng(1302);
  const float threshold = 0.35f, logit = kx::sparse::ThresholdLogit(threshold);
  for (int gs : {8, 16, 32}) {
    const int n_groups = 512 / gs, n_ff = 512;
    for (int rep = 0; rep < 20; ++rep) {
      const Step s = RandomStep(rng, n_groups, gs, logit);
      std::vector<uint32_t> dual(n_groups);
      const DualMaskStep d = BuildDualMasks(s.logits.data(), n_groups, gs, logit, logit, logit,
                                            s.on_device.data(), dual.data());
      std::vector<uint64_t> ref((n_ff + 63) / 64);
      const int n_ref = kx::sparse::LogitsToMask(s.logits.data(), n_ff, threshold, ref.data());
      REQUIRE(n_ref > 0);
      REQUIRE(n_ref < n_ff);
      CHECK(d.predicted == n_ref);
      CHECK(d.gained == 0);
      CHECK(d.dropped == 0);
      CHECK(!d.clamped);
      int mismatches = 0;
      for (int i = 0; i < n_ff; ++i) {
        const bool got = (dual[i / gs] >> (i % gs)) & 1u;
        const bool want = (ref[i / 64] >> (i % 64)) & 1u;
        mismatches += got != want;
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("dual thresholds: the bottleneck decides the direction", "[dual_threshold]") {
  using kx::sparse::SplitBottleneck;
  CHECK(kx::sparse::ClassifySplit(0, 1000, 0.05) == SplitBottleneck::kCpu);
  CHECK(kx::sparse::ClassifySplit(40, 1000, 0.05) == SplitBottleneck::kCpu);
  CHECK(kx::sparse::ClassifySplit(60, 1000, 0.05) == SplitBottleneck::kDevice);

  kx::sparse::DualThresholdOptions o;
  o.step_logit = 0.25f;
  o.max_offset_logit = 2.0f;
  const int n_layer = 3;
  const float t = kx::sparse::ThresholdLogit(0.5f) + 0.3f;
  kx::sparse::DualThreshold dual(n_layer, o);
  DualMaskStep free_step, clamped_step;
  clamped_step.clamped = true;

  // The CPU is the bottleneck: θ_g falls by a step to its floor, θ_c rises while unclamped.
  for (int i = 0; i < 12; ++i) {
    const float g0 = dual.logit_g(1, t), c0 = dual.logit_c(1, t);
    dual.Record(1, free_step, t);
    dual.Feedback(1, SplitBottleneck::kCpu);
    CHECK(dual.logit_g(1, t) <= g0);
    CHECK(dual.logit_c(1, t) >= c0);
    CHECK(dual.logit_g(1, t) >= t - o.max_offset_logit);
    CHECK(dual.logit_c(1, t) <= t + o.max_offset_logit);
  }
  CHECK(dual.logit_g(1, t) == Approx(t - 2.0f));
  CHECK(dual.logit_c(1, t) == Approx(t + 2.0f));
  CHECK(dual.logit_g(0, t) == t);  // other layers untouched
  // A clamped step: θ_c backs off though the CPU is still the bottleneck; θ_g keeps its floor.
  dual.Record(1, clamped_step, t);
  dual.Feedback(1, SplitBottleneck::kCpu);
  CHECK(dual.logit_c(1, t) == Approx(t + 1.75f));
  CHECK(dual.logit_g(1, t) == Approx(t - 2.0f));

  // The device is the bottleneck: both return toward θ, never past it.
  for (int i = 0; i < 12; ++i) {
    const float g0 = dual.logit_g(1, t), c0 = dual.logit_c(1, t);
    dual.Record(1, free_step, t);
    dual.Feedback(1, SplitBottleneck::kDevice);
    CHECK(dual.logit_g(1, t) >= g0);
    CHECK(dual.logit_g(1, t) <= t);
    CHECK(dual.logit_c(1, t) <= c0);
    CHECK(dual.logit_c(1, t) >= t);
  }
  CHECK(dual.logit_g(1, t) == t);
  CHECK(dual.logit_c(1, t) == t);

  // Any sequence keeps θ_g ≤ θ ≤ θ_c.
  auto rng = kx::test::SeededRng(1303);
  std::bernoulli_distribution coin(0.5);
  for (int i = 0; i < 500; ++i) {
    const int l = static_cast<int>(rng() % n_layer);
    DualMaskStep s;
    s.clamped = coin(rng);
    dual.Record(l, s, t);
    dual.Feedback(l, coin(rng) ? SplitBottleneck::kCpu : SplitBottleneck::kDevice);
    REQUIRE(dual.logit_g(l, t) <= t);
    REQUIRE(dual.logit_c(l, t) >= t);
  }
  CHECK(dual.stats().steps == 12 + 1 + 12 + 500);
  CHECK(dual.stats().theta_g_sum <= dual.stats().theta_sum);
  CHECK(dual.stats().theta_c_sum >= dual.stats().theta_sum);
}
