// The simulator calls the policy objects exactly as a direct driver does: the
// same Place, then per (step, layer) the same PlanLayer inputs, so the same
// load/evict plans — the property the engine's split FFN also has. The driver
// here computes intensities from the test's own counts, not from the trace.
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "sim_test_util.h"
#include "test_util.h"

namespace kx::sim {
namespace {

using test_util::Counts;

constexpr int kGs = 8;  // a power of two: count / GS is exact in float either way
constexpr int kLayers = 3, kGroups = 32, kSteps = 80;
constexpr double kBudget = 0.25;

struct Replay {
  std::vector<PlanEvent> events;
  SimResult result;
};

Replay RunRecorded(const SimTrace& t, const SimHardware& hw, const std::string& name,
                   const std::vector<float>& freq) {
  Replay out;
  SimConfig config;
  config.policy = name;
  config.budget = kBudget;
  config.placement_frequency = freq;
  config.on_plan = [&out](const PlanEvent& e) { out.events.push_back(e); };
  out.result = test_util::RunOrFail(t, hw, test_util::RoundCosts(1), config);
  return out;
}

// Drives `name` directly over `counts`, applying the landings the simulator
// reports (all of them at once when `instant`), and checks every plan.
// Returns how many plans ran while one of the layer's loads was in flight.
int DriveAndCompare(const std::string& name, const Counts& counts, const std::vector<float>& freq,
                    const Replay& replay, bool instant) {
  auto made = policy::MakePolicy(name, {});
  REQUIRE(made.ok());
  policy::Policy& p = **made;
  const int slots = static_cast<int>(kBudget * kGroups);
  policy::Residency r(kLayers, kGroups, slots);
  policy::PlacementStats ps;
  ps.n_layer = kLayers;
  ps.n_groups = kGroups;
  ps.frequency = freq;
  ps.bundle_bytes = kGs * 1000;
  std::vector<std::pair<int, int>> initial;
  p.Place(ps, r, &initial);
  policy::ApplyLoadsNow(initial, r);
  REQUIRE(replay.events.size() == static_cast<size_t>(kSteps * kLayers));
  std::vector<float> intensity(kGroups);
  policy::Plan plan;
  int plans_with_loads_in_flight = 0;
  size_t i = 0;
  for (int s = 0; s < kSteps; ++s) {
    for (int l = 0; l < kLayers; ++l, ++i) {
      const PlanEvent& e = replay.events[i];
      REQUIRE(e.step == s);
      REQUIRE(e.layer == l);
      if (!instant) {
        for (const auto& [ll, g] : e.landed_before) r.CompleteLoad(ll, g);
      }
      if (r.loading_count(l) > 0) ++plans_with_loads_in_flight;
      for (int g = 0; g < kGroups; ++g) intensity[g] = counts[s][l][g] / static_cast<float>(kGs);
      p.PlanLayer(l, intensity.data(), e.feedback, policy::Window{}, r, &plan);
      INFO(name << " step " << s << " layer " << l);
      REQUIRE(policy::CheckPlan(l, plan, r, intensity.data()).ok());
      CHECK(plan.load == e.plan.load);
      CHECK(plan.evict == e.plan.evict);
      if (instant) {
        policy::ApplyPlanNow(l, plan, r);
      } else {
        for (int32_t g : plan.evict) r.Evict(l, g);
        for (int32_t g : plan.load) r.BeginLoad(l, g, r.free_slot(l));
      }
    }
  }
  return plans_with_loads_in_flight;
}

TEST_CASE("sim: same plans as driving the policy directly", "[sim][plans]") {
  auto rng = kx::test::SeededRng(2024);
  const Counts counts = test_util::RandomCounts(kSteps, kLayers, kGroups, kGs, rng());
  const std::string path = test_util::TempTracePath("plans");
  test_util::WriteTrace(path, kGs, counts);
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  std::vector<float> freq(static_cast<size_t>(kLayers) * kGroups);
  std::uniform_real_distribution<float> u(0, 1);
  for (float& f : freq) f = u(rng);

  for (std::string_view view : policy::PolicyNames()) {
    const std::string name(view);
    SECTION(name + ", every reload landed before the layer's next plan") {
      SimHardware fast = test_util::RoundHardware();
      fast.h2d_bytes_per_s = 1e18;
      fast.d2h_bytes_per_s = 1e18;
      fast.copy_latency_s = 0;
      const Replay replay = RunRecorded(t, fast, name, freq);
      DriveAndCompare(name, counts, freq, replay, /*instant=*/true);
      if (name != "static") CHECK(replay.result.loads > 0);
    }
    SECTION(name + ", reloads still in flight at later plans") {
      SimHardware slow = test_util::RoundHardware();
      slow.h2d_bytes_per_s = 1e8;  // a bundle: 81 µs, several layer steps
      const Replay replay = RunRecorded(t, slow, name, freq);
      const int in_flight = DriveAndCompare(name, counts, freq, replay, /*instant=*/false);
      if (name != "static") {
        CHECK(replay.result.loads > 0);
        CHECK(in_flight > 0);  // the slow link really left loads pending
      }
      if (name.ends_with("-adaptive")) {
        // The feedback reached the policy and moved λ (here mostly up: critical copies
        // wait behind 81 µs reloads, so the GPU side is I/O-bound).
        bool io_wait = false;
        for (const PlanEvent& e : replay.events) io_wait = io_wait || e.feedback.io_wait_s > 0;
        CHECK(io_wait);
        CHECK(replay.result.mean_lambda != policy::PolicyOptions{}.lambda);
      }
    }
  }
}

}  // namespace
}  // namespace kx::sim
