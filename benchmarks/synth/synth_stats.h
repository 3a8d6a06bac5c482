// The activation statistics kairox-synth asks for, measured where the engine
// reports them: from an activity trace (`kairox-cli --trace`, docs/trace.md)
// or from sets handed in directly (tests). Definitions, per layer l:
//   sparsity   1 − Σ_t |A_t| / (T · n_ff)
//   hot share  the share of all activations taken by the hot_fraction of
//              neurons that fired most often (PowerInfer's "x % of neurons
//              take y % of activations")
//   reuse      Σ_t |A_t ∩ A_t+1| / Σ_t |A_t| over consecutive steps: the
//              micro-averaged P(active at t+1 | active at t) (KAIROX §6)
// reuse is pooled over layers; sparsity and hot share are reported per layer
// and as the mean over layers.
//
//   KX_ASSIGN_OR_RETURN(auto got, kx::synth::MeasureTrace(path, 0.2, /*first_step=*/16));
//   KX_RETURN_IF_ERROR(kx::synth::CheckRealised(got, spec, derived, {}));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "synth/synth_model.h"

namespace kx::synth {

struct RealisedStats {
  int64_t steps = 0;                        // steps measured (records of layer 0)
  std::vector<double> sparsity, hot_share;  // per layer
  double sparsity_mean = 0, hot_share_mean = 0;
  double reuse = 0;
};

class StatsAccumulator {
 public:
  StatsAccumulator(std::vector<uint32_t> n_ff, double hot_fraction);
  // One step's active set of `layer` (n_ff bits, 64 a word). Steps of a
  // layer come in increasing order; reuse counts pairs of consecutive steps.
  absl::Status Add(int64_t step, int layer, const uint64_t* bits);
  RealisedStats Finish() const;

 private:
  struct Layer {
    std::vector<uint32_t> count;  // per neuron: steps it was active
    std::vector<uint64_t> prev;
    int64_t prev_step = -2;
    int64_t steps = 0, active = 0, kept = 0, pair_base = 0, last_active = 0;
  };
  std::vector<uint32_t> n_ff_;
  double hot_fraction_;
  std::vector<Layer> layers_;
};

// Reads `path` from step `first_step` on (skip the prompt with it): the actual
// sets, or the predicted ones where a record has no actual set (traces of a
// tier). Errors name the file.
absl::StatusOr<RealisedStats> MeasureTrace(const std::string& path, double hot_fraction,
                                           int64_t first_step);

struct Tolerance {
  // Absolute. At the tiny test shape (4 layers × 1024 neurons, 192 decode
  // tokens) the sampling noise of reuse is ~0.025 (which of ~190 steps stay in
  // their topic: binomial), of sparsity and hot share ~0.01; the tolerances are
  // about 3σ, with room for the neurons the residual stream moves across the
  // threshold.
  double sparsity = 0.03, hot_share = 0.06, reuse = 0.08;
};

// OK when the mean sparsity, the mean hot share and the reuse are within
// `tol` of what `spec` asked for (sparsity per layer from `derived`);
// otherwise FailedPrecondition listing every statistic outside, with both values.
absl::Status CheckRealised(const RealisedStats& got, const SynthSpec& spec,
                           const SynthDerived& derived, const Tolerance& tol);

std::string FormatRealised(const RealisedStats& got);

}  // namespace kx::synth
