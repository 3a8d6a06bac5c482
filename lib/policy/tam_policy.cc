// KAIROX's Temporal Activation Momentum (§6) and adaptive λ (§7, Algorithm 1).
//
// Per layer and group, each step of that layer:
//   S ← λ·S + (1−λ)·A            (A: intensity or 1/0, PolicyOptions::activity)
//   candidates: absent groups with S > τ = (1−λ)+ε — a cold group (S = 0) seen
//   once reaches exactly (1−λ)·A ≤ 1−λ < τ, so a one-hit wonder is refused.
// Candidates, best first, take a free slot, else evict the lowest-score
// evictable resident when their score is higher (this keeps the top-K by score
// of residents ∪ candidates, Algorithm 1 lines 16–18). Evictable: resident,
// unpinned, and not needed in this step — evicting a group the layer is about
// to read would only force a one-shot read of it; it can go next step.
// Variants:
//   keep (tam):   residents whose score fell below τ stay until a candidate
//                 needs their slot — a low-score resident still saves a read
//                 whenever it is needed, and evicting it moves no bytes.
//   evict (tam-t): they are evicted at once, as Algorithm 1 does
//                 (C_{t+1} ⊆ candidates), freeing slots.
// Adaptive (Algorithm 1 phase 1, before the score update): I/O-bound →
// λ ← min(λ(1+α), λ_max); CPU-bound → λ ← max(λ(1−α), λ_min); per layer.
// τ follows λ, with one guard the paper does not spell out: when λ rises, τ
// falls no faster than a score decays, τ_t = max((1−λ_t)+ε, λ_t·τ_{t−1}).
// Without it, a group seen once at λ = 0.8 (S = 0.2) would pass τ = 0.07 a few
// steps after λ climbed to 0.95 — raising λ to cut I/O would admit stale
// one-hit wonders. With it, an isolated activation never passes τ on any λ
// path (S_t = λ_t·S_{t−1} < λ_t·τ_{t−1} ≤ τ_t); with λ fixed, τ = (1−λ)+ε.
#include <algorithm>

#include "policy/policy_internal.h"

namespace kx::policy::internal {
namespace {

class TamPolicy final : public Policy {
 public:
  TamPolicy(const PolicyOptions& o, bool evict_below_tau, bool adaptive)
      : o_(o), evict_below_tau_(evict_below_tau), adaptive_(adaptive) {}

  std::string_view name() const override {
    if (adaptive_) return evict_below_tau_ ? "tam-t-adaptive" : "tam-adaptive";
    return evict_below_tau_ ? "tam-t" : "tam";
  }

  double lambda(int layer) const override {
    return layer >= 0 && layer < static_cast<int>(lambda_.size()) ? lambda_[layer] : o_.lambda;
  }

  void Place(const PlacementStats& s, const Residency& r,
             std::vector<std::pair<int, int>>* loads) override {
    CheckShape(s, r);
    Reset(r.n_layer(), r.n_groups());
    bundle_bytes_ = s.bundle_bytes;
    if (o_.warm_start_scores)
      for (size_t i = 0; i < score_.size(); ++i) score_[i] = ClampIntensity(s.frequency[i]);
    PlaceTopKByFrequency(s, r, loads);
  }

  void PlanLayer(int layer, const float* intensity, const Feedback& fb, const Window& w,
                 const Residency& r, Plan* out) override {
    const int n = r.n_groups();
    if (n_layer_ != r.n_layer() || n_groups_ != n) Reset(r.n_layer(), n);  // no Place: cold start
    PreparePlan(n, out);
    const int64_t max_loads = MaxLoads(w, bundle_bytes_);

    // Phase 1: balancing intensity from the layer's last step.
    double& lam = lambda_[layer];
    if (adaptive_) {
      switch (Classify(fb, o_.bottleneck_margin)) {
        case Bottleneck::kIo:
          lam = std::min(lam * (1 + o_.alpha), o_.lambda_max);
          break;
        case Bottleneck::kCpu:
          lam = std::max(lam * (1 - o_.alpha), o_.lambda_min);
          break;
        case Bottleneck::kNone:
          break;
      }
    }
    // Phase 2: momentum update and filtering. Scores are float (≤ 1024 per
    // layer, compared only with each other and τ); λ is double.
    const float lam_f = static_cast<float>(lam);
    const float gain = static_cast<float>(1.0 - lam);
    double& tau_layer = tau_[layer];
    tau_layer = std::max((1.0 - lam) + o_.epsilon, lam * tau_layer);
    const float tau = static_cast<float>(tau_layer);
    float* score = score_.data() + static_cast<size_t>(layer) * n;
    candidates_.clear();
    victims_.clear();
    for (int g = 0; g < n; ++g) {
      float a = ClampIntensity(intensity[g]);
      const bool needed = a > 0;
      if (o_.activity == ActivityInput::kBinary) a = needed ? 1.0f : 0.0f;
      score[g] = lam_f * score[g] + gain * a;
      if (r.reserved_slot(layer, g) < 0) {
        if (score[g] > tau || (needed && o_.admit_needed)) candidates_.push_back(g);
      } else if ((!needed || o_.evict_needed) && r.CanEvict(layer, g)) {
        victims_.push_back(g);
      }
    }
    auto by_score_desc = [score](int x, int y) {
      return score[x] != score[y] ? score[x] > score[y] : x < y;
    };
    auto by_score_asc = [score](int x, int y) {
      return score[x] != score[y] ? score[x] < score[y] : x < y;
    };
    int free_slots = r.free_count(layer);
    size_t next_victim = 0;
    if (evict_below_tau_) {
      // The decayed residents all go: move them to the front, lowest first.
      auto decayed_end =
          std::partition(victims_.begin(), victims_.end(), [&](int g) { return score[g] <= tau; });
      std::sort(victims_.begin(), decayed_end, by_score_asc);
      next_victim = static_cast<size_t>(decayed_end - victims_.begin());
      out->evict.assign(victims_.begin(), decayed_end);
      free_slots += static_cast<int>(next_victim);
    }
    // Only the best `take` candidates and the weakest `take` victims can be
    // part of the plan: rank just those (≤ 1024 groups, but every layer of
    // every token pays for this).
    const size_t take = static_cast<size_t>(std::min<int64_t>(
        max_loads, static_cast<int64_t>(
                       std::min(candidates_.size(), free_slots + victims_.size() - next_victim))));
    std::partial_sort(candidates_.begin(), candidates_.begin() + take, candidates_.end(),
                      by_score_desc);
    const size_t victims_needed = std::min(victims_.size() - next_victim, take);
    std::partial_sort(victims_.begin() + next_victim,
                      victims_.begin() + next_victim + victims_needed, victims_.end(),
                      by_score_asc);
    candidates_.resize(take);
    for (int g : candidates_) {
      if (static_cast<int64_t>(out->load.size()) >= max_loads) break;
      if (free_slots > 0) {
        --free_slots;
      } else if (next_victim < victims_.size() &&
                 score[victims_[next_victim]] + o_.swap_margin < score[g]) {
        out->evict.push_back(victims_[next_victim++]);
      } else {
        break;  // candidates descend and victims ascend: no later pair can swap
      }
      out->load.push_back(g);
    }
  }

 private:
  void Reset(int n_layer, int n_groups) {
    n_layer_ = n_layer;
    n_groups_ = n_groups;
    score_.assign(static_cast<size_t>(n_layer) * n_groups, 0.0f);
    lambda_.assign(n_layer, o_.lambda);
    tau_.assign(n_layer, (1.0 - o_.lambda) + o_.epsilon);
    candidates_.reserve(n_groups);
    victims_.reserve(n_groups);
  }

  const PolicyOptions o_;
  const bool evict_below_tau_;
  const bool adaptive_;
  int n_layer_ = -1;
  int n_groups_ = -1;
  uint64_t bundle_bytes_ = 0;
  std::vector<float> score_;     // [layer * n_groups + g]: S
  std::vector<double> lambda_;   // per layer
  std::vector<double> tau_;      // per layer: τ_load of the last step
  std::vector<int> candidates_;  // scratch, capacity n_groups
  std::vector<int> victims_;     // scratch, capacity n_groups
};

}  // namespace

std::unique_ptr<Policy> NewTamPolicy(const PolicyOptions& options, bool evict_below_tau,
                                     bool adaptive) {
  return std::make_unique<TamPolicy>(options, evict_below_tau, adaptive);
}

}  // namespace kx::policy::internal
