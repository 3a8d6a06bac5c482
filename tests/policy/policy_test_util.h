// Helpers for the policy tests: building policies and stats, and a driver
// that applies plans to a Residency with the contract checked every step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "policy/policy.h"

namespace kx::policy::test_util {

inline std::unique_ptr<Policy> Make(std::string_view name, const PolicyOptions& o = {}) {
  auto p = MakePolicy(name, o);
  INFO(std::string(name) << ": " << p.status().ToString());
  REQUIRE(p.ok());
  return std::move(p).value();
}

inline PlacementStats Stats(int n_layer, int n_groups, std::vector<float> frequency,
                            uint64_t bundle_bytes = 4096) {
  PlacementStats s;
  s.n_layer = n_layer;
  s.n_groups = n_groups;
  s.frequency = std::move(frequency);
  s.bundle_bytes = bundle_bytes;
  return s;
}

// Runs one policy over a Residency: Place, then per step PlanLayer → CheckPlan
// → apply (every read lands at once) → CheckInvariants.
struct Driver {
  Driver(std::unique_ptr<Policy> p, const PlacementStats& s, int slots_per_layer)
      : policy(std::move(p)), r(s.n_layer, s.n_groups, slots_per_layer) {
    std::vector<std::pair<int, int>> loads;
    policy->Place(s, r, &loads);
    ApplyLoadsNow(loads, r);
    r.CheckInvariants();
  }
  const Plan& Step(int layer, const std::vector<float>& intensity, Feedback fb = {},
                   Window w = {}) {
    policy->PlanLayer(layer, intensity.data(), fb, w, r, &plan);
    const absl::Status st = CheckPlan(layer, plan, r, intensity.data());
    INFO(policy->name() << ": " << st.ToString());
    REQUIRE(st.ok());
    ApplyPlanNow(layer, plan, r);
    r.CheckInvariants();
    return plan;
  }
  std::unique_ptr<Policy> policy;
  Residency r;
  Plan plan;
};

// Intensities with only the listed groups active (at `a`).
inline std::vector<float> Active(int n_groups, std::initializer_list<int> groups, float a = 1.0f) {
  std::vector<float> v(n_groups, 0.0f);
  for (int g : groups) v[g] = a;
  return v;
}

}  // namespace kx::policy::test_util
