// Placement and balancing policies: which neuron groups of each layer hold a
// slot in the fast tier (see residency.h). One interface, two users — the
// engine and the trace-driven simulator — and a policy never knows which one
// calls it. Policies are deterministic: the same calls give the same plans.
//
// Usage (engine or simulator):
//   KX_ASSIGN_OR_RETURN(auto policy, kx::policy::MakePolicy("tam-adaptive", {}));
//   kx::policy::Residency r(n_layer, n_groups, slots_per_layer);
//   std::vector<std::pair<int, int>> loads;            // (layer, group)
//   policy->Place(stats, r, &loads);                   // initial residency
//   kx::policy::ApplyLoadsNow(loads, r);               // or issue the reads yourself
//   kx::policy::Plan plan;                              // reuse: keeps its capacity
//   per token, per layer:
//     policy->PlanLayer(layer, intensity, feedback, window, r, &plan);
//     for (int g : plan.evict) r.Evict(layer, g);      // evictions first
//     for (int g : plan.load) r.BeginLoad(layer, g, r.free_slot(layer));  // reads queued
//     ... r.CompleteLoad(layer, g) when each read lands.
//
// A plan never reserves more than the layer's capacity, never evicts a loading
// or pinned group (nor one needed in this step), never loads a loading or
// resident group and never names a group in both lists. `load` is ordered most
// valuable first; with Window.bytes > 0 it holds at most
// Window.bytes / bundle_bytes groups (the most valuable).
//
// Names (MakePolicy):
//   static          top-K by calibration frequency, never moves (PowerInfer-like).
//   lru             load every needed group, evict the least recently used.
//   lfu             ActiveFlow's contextual cache: admit a needed group when its
//                   count beats the least-used resident's.
//   topk            KAIROX's Top-K baseline (Fig. 10): load the step's K most intense
//                   groups, no τ filter, no momentum (TAM at λ = 0 without τ).
//   tam             KAIROX TAM, fixed λ; residents whose score fell below τ stay
//                   until a better candidate needs their slot.
//   tam-t           TAM, fixed λ; residents below τ are evicted even with no
//                   candidate (Algorithm 1 read literally: C_{t+1} ⊆ candidates).
//   tam-adaptive    tam with adaptive λ (Algorithm 1 phase 1). The default.
//   tam-t-adaptive  tam-t with adaptive λ.
// Beware: the KAIROX paper's "TAM-T" (Fig. 10) means TAM with feedback-driven
// Tuning, i.e. our tam-adaptive; our "-t" means threshold eviction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "policy/residency.h"

namespace kx::policy {

// The most groups one layer may have. KAIROX caps M at 1024 so ranking stays cheap, and the
// sidecar keeps that cap (sparse::kMaxGroupsPerLayer); the policies take 4× more so that
// kairox-sim can replay a 7B/13B trace regrouped finer (groups of 4 of 13824 neurons: 3456).
inline constexpr int kMaxGroupsPerLayer = 4096;

// Last step of this layer: time the pipeline stalled waiting on reads vs the
// time it waited on (or spent in) CPU compute. The caller measures; adaptive
// policies only compare the two.
struct Feedback {
  double io_wait_s = 0;
  double cpu_s = 0;
};

// Transfer budget before the layer is needed. bytes = 0: unlimited. seconds is
// informational (the caller turns time into bytes with its bandwidth model).
struct Window {
  double seconds = 0;
  uint64_t bytes = 0;
};

// Evictions happen before loads; afterwards resident + loading ≤ capacity.
struct Plan {
  std::vector<int32_t> load;  // most valuable first
  std::vector<int32_t> evict;
  void clear() {  // keeps the capacity: no allocation per step
    load.clear();
    evict.clear();
  }
};

struct PlacementStats {
  int n_layer = 0;
  int n_groups = 0;
  // [layer * n_groups + g]: calibration activation probability of group g.
  std::vector<float> frequency;
  uint64_t bundle_bytes = 0;  // one group's bundle; needed for byte windows
};

// What TAM's momentum integrates per step (A in S ← λS + (1−λ)A).
enum class ActivityInput : uint8_t {
  // A = fraction of the group's neurons predicted active (the paper's group
  // TAM): a resident group saves work in proportion to its active neurons,
  // which is the fast tier's gain when the slow tier computes (GPU ⇄ CPU).
  kIntensity = 0,
  // A = 1 when the group is needed at all: a miss costs a whole bundle read
  // whatever its intensity, which is the cost when the slow tier is storage.
  kBinary = 1,
};

struct PolicyOptions {
  // TAM decay λ. 0.8: the paper's adaptive runs settle near 0.85 when
  // I/O-bound (Fig. 11) and start from 0.5; a fast-tier miss under a storage
  // budget is I/O, so we start on the conservative side. Memory ≈ 1/(1−λ) = 5
  // steps, the length of a cold group's activation window (§6: reactivation
  // falls below 0.2 after δ > 2 for cold neurons, persists for hot ones).
  double lambda = 0.8;
  // Margin over the one-hit score: τ_load = (1−λ)+ε. Keep ε < λ(1−λ) so that
  // two consecutive full activations from S = 0 still pass τ.
  double epsilon = 0.02;
  // Adaptive λ (Algorithm 1 phase 1): ×(1+α) when I/O-bound, ×(1−α) when
  // CPU-bound, clamped to [lambda_min, lambda_max]; λ starts at `lambda`.
  double lambda_min = 0.5;
  double lambda_max = 0.95;
  double alpha = 0.05;  // the paper's rate
  // Hysteresis: I/O-bound when io_wait_s > (1+margin)·cpu_s, CPU-bound when
  // cpu_s > (1+margin)·io_wait_s, otherwise λ holds.
  double bottleneck_margin = 0.1;
  ActivityInput activity = ActivityInput::kIntensity;
  // TAM: a candidate evicts a resident only when its score is higher by more
  // than this. 0 is the paper's rule. Where most groups are needed most
  // steps (low sparsity, storage tier) a resident missing one step loses
  // only (1−λ)·1 of score and a margin keeps it from being swapped out and
  // read back the next step.
  double swap_margin = 0.0;
  // TAM: needed groups skip the τ filter (they still must beat the lowest
  // evictable resident's score, or find a free slot). Right when the slow tier
  // is storage: a needed absent group is read in this step anyway, so caching
  // it moves no extra bytes and the one-hit filter only throws hits away.
  // Leave false when misses are computed where they live (GPU ⇄ CPU), where
  // every admission is a transfer the filter exists to avoid.
  bool admit_needed = false;
  // TAM and topk: residents needed in this step may be evicted too (lowest score or intensity
  // first), as Algorithm 1's C_t \ C_{t+1} does. It breaks the plan contract (CheckPlan
  // fails) and is meant for kairox-sim only: where the slow side computes a miss (GPU ⇄ CPU)
  // and the plan runs one layer ahead, swapping a weak needed resident for a strong absent
  // group can pay; the engine never sets it.
  bool evict_needed = false;
  // TAM/LFU: scores start at the calibration frequency (its long-run mean)
  // rather than 0, so placed groups are not displaced by the first candidates.
  bool warm_start_scores = true;
};

class Policy {
 public:
  virtual ~Policy();
  virtual std::string_view name() const = 0;
  // Initial residency: appends (layer, group) reads to `loads`, per layer most
  // valuable first, at most the layer's free slots; does not touch `r`
  // (ApplyLoadsNow does BeginLoad + CompleteLoad). Resets the policy's state.
  // KX_CHECK fails when `s` and `r` disagree on the shape.
  virtual void Place(const PlacementStats& s, const Residency& r,
                     std::vector<std::pair<int, int>>* loads) = 0;
  // One step of `layer`: `intensity[g]` ∈ [0,1] (0 = not needed; out-of-range
  // values are clamped, NaN reads as 0) for g < r.n_groups(). Overwrites *out.
  virtual void PlanLayer(int layer, const float* intensity, const Feedback& fb, const Window& w,
                         const Residency& r, Plan* out) = 0;
  // TAM's current decay for the layer (traces, plots); 0 for other policies.
  virtual double lambda(int layer) const { return 0; }
};

// One of the names above; InvalidArgument (listing the valid names) for an
// unknown name, or for options out of range.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options);
// The names MakePolicy accepts, in the order above (for --help).
std::span<const std::string_view> PolicyNames();
// Options a TAM policy can run with (ranges, ε below λ(1−λ) is not enforced).
absl::Status ValidateOptions(const PolicyOptions& options);

// Synchronous helpers for start-up, tests and the simulator: every read lands
// at once.
void ApplyLoadsNow(const std::vector<std::pair<int, int>>& loads, Residency& r);
void ApplyPlanNow(int layer, const Plan& plan, Residency& r);
// The plan contract above, as a Status (tests; the engine's debug checks).
// max_loads < 0: no window limit.
absl::Status CheckPlan(int layer, const Plan& plan, const Residency& r, const float* intensity,
                       int64_t max_loads = -1);

}  // namespace kx::policy
