// DynamicInfer's load-aware dual thresholds (§4.4, Appendix E.4) for the split FFN: the
// predictor's masks are built with θ_g for the neurons of groups resident on the device and
// θ_c for the others, moved per layer step by which side of the split FFN finished last,
// under an error bound relative to the single threshold θ.
//
// Error model. A skipped neuron i is a missed activation with probability p_i = σ(z_i)
// (z_i: the predictor's logit), so a mask's error is the expected number of missed
// activations, E = Σ_{skipped i} p_i. DynamicInfer writes Σ (1 − p_i) over the skipped
// neurons; that weights the surest skips (p ≈ 0) most and would make lowering a threshold
// *increase* the error, so we use p_i, which is what the constraint is meant to bound.
// With θ_g ≤ θ ≤ θ_c (logits T_g ≤ T ≤ T_c) the dual masks differ from the single one only
// in two bands, and
//   E(θ_g, θ_c) ≤ E(θ)  ⟺  loss ≤ gain,
//   gain = Σ_{resident, T_g ≤ z < T} σ(z)   (device neurons the single threshold skips),
//   loss = Σ_{not resident, T ≤ z < T_c} σ(z)   (CPU neurons it computes and we skip).
// It holds per layer step, on the logits at hand (up to the rounding of the sums): when
// loss > gain, CPU groups get the single threshold's masks back, in group order, until
// loss ≤ gain, and the step counts as clamped. σ is evaluated only for band neurons.
//
// The greedy (one step of `step_logit` per layer step, from the last step's signal):
//   CPU finished last:     T_g lowers (more work on the device: gain), T_c rises (less on
//                          the CPU) unless the last step was clamped;
//   device finished last:  both move back toward T (T_g rises, T_c lowers);
//   a clamped step:        T_c lowers.
// Offsets stay in [0, max_offset_logit], so θ_g ≤ θ ≤ θ_c always (DynamicInfer's rule
// favours the device; moving work *to* the CPU is not done).
//
// Usage (engine/sparse_runtime.cc, per decode layer step):
//   DualThreshold dual(n_layer, options);
//   DualMaskStep s = BuildDualMasks(logits, n_groups, gs, T, dual.logit_g(l, T),
//                                   dual.logit_c(l, T), on_device, masks);
//   dual.Record(l, s, T);                              // stats, and the clamp for the greedy
//   ... the split FFN runs the layer ...
//   dual.Feedback(l, ClassifySplit(wait_ns, cpu_ns, options.device_wait_share));
// Thread-compatible; no allocation after construction.
#pragma once

#include <cstdint>
#include <vector>

namespace kx::sparse {

struct DualThresholdOptions {
  float step_logit = 0.25f;       // how far T_g and T_c move per layer step
  float max_offset_logit = 4.0f;  // |T_g − T|, |T_c − T| at most this
  // The device finished last when End waited more than this share of the CPU's time (a
  // small wait is the download's tail and the wake-up, not the device's work).
  double device_wait_share = 0.05;
  bool debug_no_clamp = false;  // tests' negative control: never put the CPU's band back
};

// σ(logit): a threshold in probability units (stats, logs).
float ThresholdProbability(float logit);

// Which side of a split FFN step finished last.
enum class SplitBottleneck { kCpu, kDevice };
SplitBottleneck ClassifySplit(int64_t device_wait_ns, int64_t cpu_ns, double device_wait_share);

// One layer step's masks against the single threshold's.
struct DualMaskStep {
  int gained = 0;          // device-group neurons predicted that the single threshold skips
  int dropped = 0;         // CPU-group neurons it predicts that are skipped (after any clamp)
  double gain_mass = 0.0;  // Σ σ(z) over the gained: E(θ) − E(θ_g, θ) on device groups
  double loss_mass = 0.0;  // Σ σ(z) over the dropped
  int predicted = 0;       // neurons set in the masks
  bool clamped = false;    // loss exceeded gain: (part of) the CPU's band was put back
};

// masks[g] (bit j: neuron g·gs + j, logits in the sidecar's permuted order) = logits ≥ T_g
// where on_device[g] != 0, ≥ T_c elsewhere, then CPU groups put back until loss ≤ gain. Needs
// logit_g ≤ logit ≤ logit_c and 1 ≤ gs ≤ 32. With logit_g = logit = logit_c the masks are
// the single threshold's bit for bit.
DualMaskStep BuildDualMasks(const float* logits, int n_groups, int gs, float logit, float logit_g,
                            float logit_c, const uint8_t* on_device, uint32_t* masks,
                            bool debug_no_clamp = false);

// E = Σ σ(z) over the neurons whose bit is clear (the error model above; tests and tools).
double SkippedMass(const float* logits, int n_groups, int gs, const uint32_t* masks);

// Counters since the last reset.
struct DualThresholdStats {
  int64_t steps = 0;
  int64_t gained = 0, dropped = 0, clamped = 0;
  double gain_mass = 0.0, loss_mass = 0.0;
  // Σ over steps of θ_g, θ_c and θ (probabilities, σ of the logits used): means = ÷ steps.
  double theta_g_sum = 0.0, theta_c_sum = 0.0, theta_sum = 0.0;
};

class DualThreshold {
 public:
  DualThreshold(int n_layer, const DualThresholdOptions& options);

  float logit_g(int layer, float logit) const { return logit - offset_g_[layer]; }
  float logit_c(int layer, float logit) const { return logit + offset_c_[layer]; }
  // The step's outcome: stats, and whether it was clamped (the greedy's next move).
  void Record(int layer, const DualMaskStep& step, float logit);
  // The greedy's step for the layer's next masks.
  void Feedback(int layer, SplitBottleneck bottleneck);

  const DualThresholdOptions& options() const { return options_; }
  const DualThresholdStats& stats() const { return stats_; }
  void ResetStats() { stats_ = DualThresholdStats{}; }

 private:
  DualThresholdOptions options_;
  std::vector<float> offset_g_, offset_c_;  // per layer, logits: T − T_g, T_c − T
  std::vector<uint8_t> clamped_;            // per layer: the last step was clamped
  DualThresholdStats stats_;
};

}  // namespace kx::sparse
