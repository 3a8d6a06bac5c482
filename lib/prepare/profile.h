// Profiling for kairox-prepare: two FfnHooks driven over the calibration set.
//   pass 1, MagnitudeHistogram: per layer, the distribution of |act(gate·x)|,
//           from which the CATS threshold t_l for any target sparsity s is the
//           s-quantile (a fraction s of the neuron-token values lies at or
//           below t_l);
//   pass 2, ActivityRecorder: per layer, which neurons are above t_l for each
//           token (the ActivityMatrix grouping and predictor labels use) and
//           the FFN input of each token (the predictors' training inputs).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "engine/ffn_hook.h"
#include "prepare/calibration.h"
#include "sparse/activity.h"

namespace kx {

class Engine;

class MagnitudeHistogram final : public FfnHook {
 public:
  MagnitudeHistogram(int n_layer, int n_ff);
  void OnFfnInput(int, int, const float*) override {}
  void OnActivations(int layer, int n, float* act) override;

  // Per layer: the smallest t with P(|act| <= t) >= s (interpolated inside a
  // histogram bin: relative precision about 0.5 %). s in [0, 1).
  std::vector<float> Thresholds(double s) const;
  // Fraction of layer l's values with |act| <= t.
  double FractionAtOrBelow(int layer, float t) const;
  int64_t values(int layer) const { return totals_[layer]; }

 private:
  // Bins over log2|a| in [kLogMin, kLogMax), kBinsPerOctave per octave; exact
  // zeros (ReLU) and underflow in bin 0's own counter.
  static constexpr int kLogMin = -40;
  static constexpr int kLogMax = 24;
  static constexpr int kBinsPerOctave = 128;
  static constexpr int kBins = (kLogMax - kLogMin) * kBinsPerOctave;
  int n_ff_;
  std::vector<std::vector<uint64_t>> bins_;  // [layer][bin]
  std::vector<uint64_t> zeros_;              // [layer]: a == 0 or below 2^kLogMin
  std::vector<int64_t> totals_;
};

class ActivityRecorder final : public FfnHook {
 public:
  // Room for n_tokens tokens; thresholds per layer.
  ActivityRecorder(int n_layer, int n_embd, int n_ff, int64_t n_tokens,
                   std::vector<float> thresholds);
  void OnFfnInput(int layer, int n, const float* x) override;
  void OnActivations(int layer, int n, float* act) override;

  int64_t recorded() const { return next_; }
  std::vector<sparse::ActivityMatrix>& activity() { return activity_; }
  // inputs()[l]: n_tokens × n_embd FFN inputs of layer l.
  std::vector<std::vector<float>>& inputs() { return inputs_; }
  // max_abs()[l][n]: the largest |act| neuron n of layer l reached.
  const std::vector<std::vector<float>>& max_abs() const { return max_abs_; }

 private:
  int n_embd_, n_ff_;
  int64_t capacity_;
  std::vector<float> thresholds_;
  int64_t next_ = 0, batch_start_ = 0;
  std::vector<sparse::ActivityMatrix> activity_;
  std::vector<std::vector<float>> inputs_;
  std::vector<std::vector<float>> max_abs_;
};

// Evaluates every sequence of `set` (KV cleared before each) with `hook`
// attached; progress (may be empty) gets (tokens done, total).
absl::Status RunCalibration(Engine& engine, const CalibrationSet& set, FfnHook* hook,
                            const std::function<void(int64_t, int64_t)>& progress);

}  // namespace kx
