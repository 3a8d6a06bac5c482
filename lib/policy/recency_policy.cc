// The baselines: static (PowerInfer-like offline placement that never moves),
// LRU, and LFU (ActiveFlow's contextual hot-weight cache, §4: per-layer
// counters, a newly needed group replaces the least-used resident when its
// count is higher).
//
// LRU and LFU admit on demand: every needed, absent group is a candidate in
// this step, taking a free slot first, then a victim. Victims are residents
// not needed in this step and not pinned, least recently (LRU) or least
// frequently (LFU) used first. Both start from the static placement.
#include <algorithm>

#include "policy/policy_internal.h"

namespace kx::policy::internal {
namespace {

class StaticPolicy final : public Policy {
 public:
  std::string_view name() const override { return "static"; }
  void Place(const PlacementStats& s, const Residency& r,
             std::vector<std::pair<int, int>>* loads) override {
    PlaceTopKByFrequency(s, r, loads);
  }
  void PlanLayer(int layer, const float* intensity, const Feedback& fb, const Window& w,
                 const Residency& r, Plan* out) override {
    out->clear();
  }
};

class RecencyPolicy final : public Policy {
 public:
  explicit RecencyPolicy(bool frequency_keyed) : lfu_(frequency_keyed) {}
  std::string_view name() const override { return lfu_ ? "lfu" : "lru"; }

  void Place(const PlacementStats& s, const Residency& r,
             std::vector<std::pair<int, int>>* loads) override {
    Reset(r.n_layer(), r.n_groups());
    bundle_bytes_ = s.bundle_bytes;
    PlaceTopKByFrequency(s, r, loads);
  }

  void PlanLayer(int layer, const float* intensity, const Feedback& fb, const Window& w,
                 const Residency& r, Plan* out) override {
    const int n = r.n_groups();
    if (n_layer_ != r.n_layer() || n_groups_ != n) Reset(r.n_layer(), n);  // no Place: cold start
    PreparePlan(n, out);
    const int64_t max_loads = MaxLoads(w, bundle_bytes_);
    uint64_t* key = key_.data() + static_cast<size_t>(layer) * n;
    const uint64_t now = ++step_[layer];

    misses_.clear();
    victims_.clear();
    for (int g = 0; g < n; ++g) {
      const float a = ClampIntensity(intensity[g]);
      a_[g] = a;
      if (a > 0) {
        key[g] = lfu_ ? key[g] + 1 : now;
        if (r.reserved_slot(layer, g) < 0) misses_.push_back(g);
      } else if (r.CanEvict(layer, g)) {
        victims_.push_back(g);  // never a group needed now, loading or pinned
      }
    }
    // Most valuable miss first: LFU by count, then intensity; LRU by intensity
    // (all misses are equally recent). Ties by group id keep it deterministic.
    auto by_value_desc = [&](int x, int y) {
      if (lfu_ && key[x] != key[y]) return key[x] > key[y];
      return a_[x] != a_[y] ? a_[x] > a_[y] : x < y;
    };
    auto by_key_asc = [&](int x, int y) { return key[x] != key[y] ? key[x] < key[y] : x < y; };
    int free_slots = r.free_count(layer);
    // Only the best `take` misses and the weakest `take` victims can be part
    // of the plan: rank just those.
    const size_t take = static_cast<size_t>(std::min<int64_t>(
        max_loads, static_cast<int64_t>(std::min(misses_.size(), free_slots + victims_.size()))));
    std::partial_sort(misses_.begin(), misses_.begin() + take, misses_.end(), by_value_desc);
    const size_t victims_needed = std::min(victims_.size(), take);
    std::partial_sort(victims_.begin(), victims_.begin() + victims_needed, victims_.end(),
                      by_key_asc);
    misses_.resize(take);

    size_t next_victim = 0;
    for (int g : misses_) {
      if (static_cast<int64_t>(out->load.size()) >= max_loads) break;
      if (free_slots > 0) {
        --free_slots;
      } else if (next_victim < victims_.size() && (!lfu_ || key[victims_[next_victim]] < key[g])) {
        out->evict.push_back(victims_[next_victim++]);
      } else {
        break;  // misses are sorted, so no later one can do better
      }
      out->load.push_back(g);
    }
  }

 private:
  void Reset(int n_layer, int n_groups) {
    n_layer_ = n_layer;
    n_groups_ = n_groups;
    key_.assign(static_cast<size_t>(n_layer) * n_groups, 0);
    step_.assign(n_layer, 0);
    a_.assign(n_groups, 0.0f);
    misses_.reserve(n_groups);
    victims_.reserve(n_groups);
  }

  const bool lfu_;
  int n_layer_ = -1;
  int n_groups_ = -1;
  uint64_t bundle_bytes_ = 0;
  std::vector<uint64_t> key_;   // [layer * n_groups + g]: last-used step (LRU) or count (LFU)
  std::vector<uint64_t> step_;  // per layer
  std::vector<float> a_;        // this step's clamped intensities (scratch)
  std::vector<int> misses_;     // scratch, capacity n_groups
  std::vector<int> victims_;    // scratch, capacity n_groups
};

}  // namespace

std::unique_ptr<Policy> NewStaticPolicy() { return std::make_unique<StaticPolicy>(); }
std::unique_ptr<Policy> NewRecencyPolicy(bool frequency_keyed) {
  return std::make_unique<RecencyPolicy>(frequency_keyed);
}

}  // namespace kx::policy::internal
