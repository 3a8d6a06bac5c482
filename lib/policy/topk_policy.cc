// KAIROX's Top-K baseline (§9.3, Fig. 10): "a simple Top-K strategy that reloads the most
// activated neuron groups". Each step, the layer's target set is the K groups (K = the layer's
// slots) with the highest intensity in *this* step; every absent group of that set is loaded.
// It is Algorithm 1 lines 16–18 with S = A_t and no τ filter, i.e. TAM at λ = 0 without the
// one-hit-wonder threshold — the policy TAM's filter and momentum are measured against.
//
// Where the literal rule meets the plan contract:
// - only needed groups (intensity > 0) are loaded; ties in intensity go to groups already
//   resident or loading (so equal groups never swap), then to the lower group id;
// - a slot is freed only when a load needs it (as our TAM's "keep" variant): evicting a
//   resident that is not needed moves no bytes, and keeping it can only save a later load.
//   Victims are evictable residents not needed in this step, lowest intensity in the layer's
//   previous step first (the only ranking Top-K keeps), then by group id;
// - a needed resident outside the top K is never evicted (it is about to be read), so some
//   loads of the top K may find no slot; they wait for a later step. With
//   PolicyOptions::evict_needed (the simulator's bound) it is, least intense first.
#include <algorithm>

#include "policy/policy_internal.h"

namespace kx::policy::internal {
namespace {

class TopKPolicy final : public Policy {
 public:
  explicit TopKPolicy(bool evict_needed) : evict_needed_(evict_needed) {}
  std::string_view name() const override { return "topk"; }

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
    float* last = last_.data() + static_cast<size_t>(layer) * n;

    needed_.clear();
    victims_.clear();
    for (int g = 0; g < n; ++g) {
      const float a = ClampIntensity(intensity[g]);
      a_[g] = a;
      if (a > 0) {
        needed_.push_back(g);
      } else if (r.CanEvict(layer, g)) {
        victims_.push_back(g);  // never a group needed now, loading or pinned
      }
    }
    // The step's top K: by intensity, held groups first among equals, then by id.
    auto by_rank = [&](int x, int y) {
      if (a_[x] != a_[y]) return a_[x] > a_[y];
      const bool hx = r.reserved_slot(layer, x) >= 0, hy = r.reserved_slot(layer, y) >= 0;
      return hx != hy ? hx : x < y;
    };
    const size_t k = std::min(needed_.size(), static_cast<size_t>(r.capacity(layer)));
    std::partial_sort(needed_.begin(), needed_.begin() + k, needed_.end(), by_rank);
    if (evict_needed_) {  // needed residents outside the top K may go too (simulator only)
      for (size_t i = k; i < needed_.size(); ++i)
        if (r.CanEvict(layer, needed_[i])) victims_.push_back(needed_[i]);
    }
    int free_slots = r.free_count(layer);
    const size_t victims_needed = std::min(victims_.size(), k);
    std::partial_sort(victims_.begin(), victims_.begin() + victims_needed, victims_.end(),
                      [&](int x, int y) {
                        if (a_[x] != a_[y]) return a_[x] < a_[y];
                        return last[x] != last[y] ? last[x] < last[y] : x < y;
                      });
    size_t next_victim = 0;
    for (size_t i = 0; i < k; ++i) {
      const int g = needed_[i];
      if (r.reserved_slot(layer, g) >= 0) continue;  // held already
      if (static_cast<int64_t>(out->load.size()) >= max_loads) break;
      if (free_slots > 0) {
        --free_slots;
      } else if (next_victim < victims_.size()) {
        out->evict.push_back(victims_[next_victim++]);
      } else {
        break;  // every other slot holds a needed group
      }
      out->load.push_back(g);
    }
    std::copy_n(a_.begin(), n, last);
  }

 private:
  void Reset(int n_layer, int n_groups) {
    n_layer_ = n_layer;
    n_groups_ = n_groups;
    last_.assign(static_cast<size_t>(n_layer) * n_groups, 0.0f);
    a_.assign(n_groups, 0.0f);
    needed_.reserve(n_groups);
    victims_.reserve(n_groups);
  }

  const bool evict_needed_;
  int n_layer_ = -1;
  int n_groups_ = -1;
  uint64_t bundle_bytes_ = 0;
  std::vector<float> last_;   // [layer * n_groups + g]: the layer's previous intensities
  std::vector<float> a_;      // this step's clamped intensities (scratch)
  std::vector<int> needed_;   // scratch, capacity n_groups
  std::vector<int> victims_;  // scratch, capacity n_groups
};

}  // namespace

std::unique_ptr<Policy> NewTopKPolicy(const PolicyOptions& options) {
  return std::make_unique<TopKPolicy>(options.evict_needed);
}

}  // namespace kx::policy::internal
