// MakePolicy, option checks, the plan contract and the synchronous helpers.
#include "policy/policy.h"

#include <algorithm>
#include <array>
#include <string>

#include "policy/policy_internal.h"

namespace kx::policy {

Policy::~Policy() = default;

namespace {

constexpr std::array<std::string_view, 8> kPolicyNames = {
    "static", "lru", "lfu", "topk", "tam", "tam-t", "tam-adaptive", "tam-t-adaptive"};

bool InRange(double v, double lo, double hi) { return v >= lo && v <= hi; }

// Debian's abseil has its own string_view, so join std::string_views by hand.
std::string JoinedNames() {
  std::string out;
  for (std::string_view n : kPolicyNames) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

std::span<const std::string_view> PolicyNames() { return kPolicyNames; }

absl::Status ValidateOptions(const PolicyOptions& o) {
  // λ = 1 would freeze every score (τ = ε, nothing ever changes).
  if (!(o.lambda >= 0 && o.lambda < 1))
    return absl::InvalidArgumentError(
        absl::StrFormat("policy: lambda %g is not in [0, 1)", o.lambda));
  if (!(o.epsilon >= 0 && o.epsilon < 1))
    return absl::InvalidArgumentError(
        absl::StrFormat("policy: epsilon %g is not in [0, 1)", o.epsilon));
  if (!(o.lambda_min >= 0 && o.lambda_min <= o.lambda_max && o.lambda_max < 1))
    return absl::InvalidArgumentError(absl::StrFormat(
        "policy: need 0 <= lambda_min (%g) <= lambda_max (%g) < 1", o.lambda_min, o.lambda_max));
  if (!(o.alpha >= 0 && o.alpha < 1))
    return absl::InvalidArgumentError(
        absl::StrFormat("policy: alpha %g is not in [0, 1)", o.alpha));
  if (!(o.swap_margin >= 0 && o.swap_margin <= 1))
    return absl::InvalidArgumentError(
        absl::StrFormat("policy: swap_margin %g is not in [0, 1]", o.swap_margin));
  if (!(o.bottleneck_margin >= 0 && std::isfinite(o.bottleneck_margin)))
    return absl::InvalidArgumentError(
        absl::StrFormat("policy: bottleneck_margin %g is negative", o.bottleneck_margin));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options) {
  KX_RETURN_IF_ERROR(ValidateOptions(options));
  if (name == "static") return internal::NewStaticPolicy();
  if (name == "lru") return internal::NewRecencyPolicy(/*frequency_keyed=*/false);
  if (name == "lfu") return internal::NewRecencyPolicy(/*frequency_keyed=*/true);
  if (name == "topk") return internal::NewTopKPolicy(options);
  const bool tam_family =
      name == "tam" || name == "tam-t" || name == "tam-adaptive" || name == "tam-t-adaptive";
  if (tam_family) {
    const bool evict_below_tau = name.starts_with("tam-t");
    const bool adaptive = name.ends_with("-adaptive");
    if (adaptive && !InRange(options.lambda, options.lambda_min, options.lambda_max))
      return absl::InvalidArgumentError(absl::StrFormat(
          "policy %s: the starting lambda %g is outside [%g, %g]", std::string(name),
          options.lambda, options.lambda_min, options.lambda_max));
    return internal::NewTamPolicy(options, evict_below_tau, adaptive);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy \"", std::string(name), "\"; valid: ", JoinedNames()));
}

void ApplyLoadsNow(const std::vector<std::pair<int, int>>& loads, Residency& r) {
  for (const auto& [layer, group] : loads) {
    const int slot = r.free_slot(layer);
    KX_CHECK_MSG(slot >= 0, "ApplyLoadsNow: more loads than free slots in a layer");
    r.BeginLoad(layer, group, slot);
    r.CompleteLoad(layer, group);
  }
}

void ApplyPlanNow(int layer, const Plan& plan, Residency& r) {
  for (int32_t g : plan.evict) r.Evict(layer, g);
  for (int32_t g : plan.load) {
    const int slot = r.free_slot(layer);
    KX_CHECK_MSG(slot >= 0, "ApplyPlanNow: the plan loads more groups than there are slots");
    r.BeginLoad(layer, g, slot);
    r.CompleteLoad(layer, g);
  }
}

absl::Status CheckPlan(int layer, const Plan& plan, const Residency& r, const float* intensity,
                       int64_t max_loads) {
  const int n = r.n_groups();
  // Marks: 1 = evicted, 2 = loaded. The group count is bounded, so a stack array.
  std::array<uint8_t, kMaxGroupsPerLayer> mark{};
  if (n > kMaxGroupsPerLayer) return absl::InvalidArgumentError("CheckPlan: too many groups");
  for (int32_t g : plan.evict) {
    if (g < 0 || g >= n)
      return absl::InternalError(absl::StrCat("evicts group ", g, " out of range"));
    if (mark[g]) return absl::InternalError(absl::StrCat("evicts group ", g, " twice"));
    mark[g] = 1;
    if (r.loading(layer, g)) return absl::InternalError(absl::StrCat("evicts loading group ", g));
    if (!r.resident(layer, g)) return absl::InternalError(absl::StrCat("evicts absent group ", g));
    if (!r.CanEvict(layer, g)) return absl::InternalError(absl::StrCat("evicts pinned group ", g));
    if (intensity && internal::ClampIntensity(intensity[g]) > 0)
      return absl::InternalError(absl::StrCat("evicts group ", g, " needed in this step"));
  }
  for (int32_t g : plan.load) {
    if (g < 0 || g >= n)
      return absl::InternalError(absl::StrCat("loads group ", g, " out of range"));
    if (mark[g] == 1) return absl::InternalError(absl::StrCat("loads and evicts group ", g));
    if (mark[g] == 2) return absl::InternalError(absl::StrCat("loads group ", g, " twice"));
    mark[g] = 2;
    if (r.reserved_slot(layer, g) >= 0)
      return absl::InternalError(absl::StrCat("loads group ", g, " that is resident or loading"));
  }
  const int occupied = r.resident_count(layer) + r.loading_count(layer);
  const int after =
      occupied - static_cast<int>(plan.evict.size()) + static_cast<int>(plan.load.size());
  if (after > r.capacity(layer))
    return absl::InternalError(
        absl::StrCat("plan needs ", after, " slots; layer ", layer, " has ", r.capacity(layer)));
  if (max_loads >= 0 && static_cast<int64_t>(plan.load.size()) > max_loads)
    return absl::InternalError(
        absl::StrCat("plan loads ", plan.load.size(), " groups; the window allows ", max_loads));
  return absl::OkStatus();
}

namespace internal {

void CheckShape(const PlacementStats& s, const Residency& r) {
  KX_CHECK_MSG(s.n_layer == r.n_layer() && s.n_groups == r.n_groups(),
               "PlacementStats and Residency disagree on layers/groups");
  KX_CHECK_MSG(s.frequency.size() == static_cast<size_t>(s.n_layer) * s.n_groups,
               "PlacementStats.frequency must have n_layer * n_groups entries");
  KX_CHECK_MSG(s.n_groups <= kMaxGroupsPerLayer, "more groups per layer than kMaxGroupsPerLayer");
}

void PlaceTopKByFrequency(const PlacementStats& s, const Residency& r,
                          std::vector<std::pair<int, int>>* loads) {
  CheckShape(s, r);
  std::vector<int> order;
  order.reserve(s.n_groups);
  for (int l = 0; l < s.n_layer; ++l) {
    const float* freq = s.frequency.data() + static_cast<size_t>(l) * s.n_groups;
    order.clear();
    for (int g = 0; g < s.n_groups; ++g)
      if (r.reserved_slot(l, g) < 0) order.push_back(g);
    const int take = std::min(r.free_count(l), static_cast<int>(order.size()));
    std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](int a, int b) {
      const float fa = ClampIntensity(freq[a]), fb = ClampIntensity(freq[b]);
      return fa != fb ? fa > fb : a < b;
    });
    for (int i = 0; i < take; ++i) loads->emplace_back(l, order[i]);
  }
}

}  // namespace internal
}  // namespace kx::policy
