// The engine's activation-sparse FFN: a sidecar's thresholds, predictors and
// bundles applied to a session.
//
// Prediction is adjacent (KAIROX §5): while layer l's FFN input is at hand,
// layer l+1's predictor runs on it, so layer l+1's active set is known one
// layer ahead (what the hybrid runtime prefetches with); layer 0 is predicted
// from its own FFN input. A neuron is computed iff predicted active, and kept
// iff also |act(gate·x)| > t_l (CATS): so the predictor only ever loses
// neurons the oracle (threshold alone) would keep.
//
// Two ways to run the same semantics:
//   - decode (one token): SparseFfn over the sidecar's bundles — only the
//     predicted rows are read;
//   - batches (prefill, perplexity) and masked-dense mode: the dense FFN with
//     inactive activations zeroed (OnActivations), the reference the sparse
//     kernels are tested against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/memory_budget.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/bundle_tier.h"
#include "engine/device_ffn.h"
#include "engine/ffn_hook.h"
#include "kernels/cpu/kernels.h"
#include "sparse/dual_threshold.h"
#include "sparse/sidecar.h"
#include "sparse/sparse_ffn.h"
#include "sparse/trace.h"

namespace kx {

class Model;

struct SparseConfig {
  float sparsity = -1.0f;     // < 0: the sidecar's own
  bool use_predictor = true;  // false: the oracle (threshold only; computes every neuron)
  bool masked_dense = false;  // decode through masked-dense too (reference, tracing)
  std::string trace_path;     // record predicted and actual sets per token and layer
  // Bundles under a RAM budget (engine/bundle_tier.h): read from the sidecar
  // file into `tier.resident_bytes` of slots instead of the mapped file.
  // tier.resident_bytes comes from resident_share × the sidecar's bundle
  // bytes when resident_share ≥ 0, else from what the budget has left.
  bool tiered = false;
  double resident_share = -1.0;
  TierOptions tier;
  // DynamicInfer's load-aware dual thresholds (sparse/dual_threshold.h): with a split FFN,
  // decode masks use θ_g on the groups resident on the device and θ_c on the others, moved
  // per layer step by which side finished last, under the single threshold's error bound.
  bool dual_threshold = false;
  sparse::DualThresholdOptions dual;
};

// Counters since the last reset: neurons predicted and kept per layer-token.
struct SparseStats {
  int64_t layer_tokens = 0;
  int64_t predicted = 0;  // neurons predicted active (computed)
  int64_t kept = 0;       // neurons computed and above the threshold
  int64_t actual = 0;     // neurons above the threshold (masked-dense only: needs every gate)
  int64_t missed = 0;     // above the threshold but not predicted (masked-dense only)
  int64_t n_ff = 0;
};

class SparseRuntime final : public FfnHook {
 public:
  static absl::StatusOr<std::unique_ptr<SparseRuntime>> Create(
      const Model& model, std::unique_ptr<const sparse::Sidecar> sidecar,
      const SparseConfig& config, const cpu::KernelTable& kernels, int n_threads, int max_batch,
      MemoryBudget* budget);
  ~SparseRuntime() override;

  // Bytes the runtime owns besides a tier: predictor weights (read every
  // token, so counted though mapped), masks and scratch.
  uint64_t OwnedBytes() const;

  const sparse::Sidecar& sidecar() const { return *sidecar_; }
  float sparsity() const { return sparsity_; }
  const SparseConfig& config() const { return config_; }
  // Whether a batch of n tokens runs the FFN on bundles (else masked-dense).
  bool UsesBundles(int n_tokens) const {
    return n_tokens == 1 && DecodesBundles(device_ffn_ != nullptr);
  }
  // Whether decode runs on bundles with (or without) a device FFN attached: what the engine
  // asks before it creates one. A trace needs the actual active set, which only masked-dense
  // computes — except where the bundles are a tier's (a RAM tier, or the device FFN's slots):
  // there decode keeps its tier, and the trace records the predicted sets and the tier's
  // per-layer statistics instead (docs/trace.md).
  bool DecodesBundles(bool with_device_ffn) const {
    return !config_.masked_dense && (trace_ == nullptr || tier_ != nullptr || with_device_ffn);
  }

  // FfnHook: predicts layer l+1 (and layer 0 from its own input), and masks.
  void OnFfnInput(int layer, int n, const float* x) override;
  void OnActivations(int layer, int n, float* act) override;

  // One token's FFN of `layer` over the bundles: y (n_embd) = the FFN output.
  void RunBundles(int layer, const float* x, float* y, ThreadPool& pool);
  // RunBundles split for a task graph (engine/decode_graph.h), same results:
  // BeginBundles (serial; under a tier it waits for the layer's reads) starts
  // ffn() with n_parts parts; then ffn()'s phases and Finish; EndBundles
  // (serial) releases the tier's bundles and counts.
  void BeginBundles(int layer, const float* x, float* y, int n_parts);
  // Under a RAM tier, on the decode graph (before BeginBundles): the tier calls its read
  // notify once `layer`'s reads landed (BundleTier::NotifyWhenRead).
  void NotifyWhenBundlesRead(int layer) {
    tier_->NotifyWhenRead(layer, tier_->prepared(layer) ? nullptr : TierMasks(layer));
  }
  sparse::SparseFfn& ffn() { return *ffn_; }
  void EndBundles(int layer);

  // Called once per Eval batch so trace records carry the token's step.
  void BeginBatch(int64_t first_step) { step_ = first_step; }

  const SparseStats& stats() const { return stats_; }
  // The dual thresholds (config().dual_threshold with a device FFN attached), else null.
  const sparse::DualThreshold* dual() const { return dual_.get(); }
  void ResetStats();
  // The RAM tier, or null when bundles are read from the mapped sidecar.
  BundleTier* tier() const { return tier_.get(); }
  // The split FFN (engine/device_ffn.h): decode steps then compute the groups the device
  // holds there and the rest here. Not owned (the engine destroys it before the device);
  // null detaches.
  void AttachDevice(DeviceFfn* device_ffn);
  DeviceFfn* device_ffn() const { return device_ffn_; }
  // The first error of the tier's reads or of the device FFN (sticky); OK without either.
  absl::Status status() const;
  // Flushes and closes the trace (also done by the destructor).
  absl::Status CloseTrace();

 private:
  SparseRuntime() = default;
  void Predict(int layer, int n, const float* x);
  // The masks the RAM tier is given for a decode step of `layer`: without a device FFN the
  // predicted ones; with it, after the device's Prepare, only the groups it does not hold.
  const uint32_t* TierMasks(int layer);
  // Fills predictors_ and perm_: views into the mapped sidecar, or (owned) copies.
  void CopyPerTokenReads(const sparse::Sidecar& sidecar, bool owned);
  // One trace record of a decode step over a tier's bundles: the predicted set and the
  // statistics of the fastest tier (the device FFN's when attached, else the RAM tier's).
  void TraceTierStep(int layer, const uint32_t* masks);
  uint32_t* Masks(int layer, int b) {
    return &masks_[static_cast<size_t>(layer & 1) * mask_slot_ +
                   static_cast<size_t>(b) * n_groups_];
  }

  std::unique_ptr<const sparse::Sidecar> sidecar_;
  SparseConfig config_;
  const cpu::KernelTable* kernels_ = nullptr;
  float sparsity_ = 0.0f;
  FfnActivation act_ = FfnActivation::kSilu;
  float act_threshold_ = 0.0f;          // FATReLU's t
  std::vector<float> thresholds_;       // per layer, at sparsity_
  std::vector<float> logit_threshold_;  // per layer: logit(predictor threshold)
  int n_layer_ = 0, n_embd_ = 0, n_ff_ = 0, gs_ = 0, n_groups_ = 0, max_batch_ = 0;
  // Predicted-active masks, two layer slots × max_batch tokens × n_groups.
  std::vector<uint32_t> masks_;
  size_t mask_slot_ = 0;
  std::vector<float> hidden_, logits_;  // predictor scratch
  // Per layer, what each token reads of the sidecar besides its bundles: the predictor and
  // the permutation. Without a tier they point into the mapped file; under a tier into the
  // owned copies below (read once at load, counted in the budget), so that a sidecar
  // truncated during the session gives the tier's sticky read error, never SIGBUS.
  std::vector<sparse::PredictorView> predictors_;
  std::vector<const int32_t*> perm_;
  std::vector<uint16_t> owned_half_;  // w1 and w2t of every layer
  std::vector<float> owned_float_;    // b1 and b2 of every layer
  std::vector<int32_t> owned_perm_;
  // Per layer, the bundle of each group (pointers into the sidecar).
  std::vector<std::vector<const uint8_t*>> bundles_;
  std::unique_ptr<sparse::SparseFfn> ffn_;
  std::unique_ptr<BundleTier> tier_;
  DeviceFfn* device_ffn_ = nullptr;
  std::vector<const uint8_t*> cpu_bundles_;  // the device's groups nulled (split FFN)
  std::vector<uint32_t> host_masks_;         // what the RAM tier provides under a device FFN
  float* y_ = nullptr;                       // BeginBundles → EndBundles: the FFN output
  std::vector<uint32_t> layer0_masks_;       // the last token's layer-0 groups (the tier's guess)
  bool has_layer0_masks_ = false;
  MemoryBudget* budget_ = nullptr;
  uint64_t reserved_ = 0;
  std::vector<int32_t> groups_;
  std::vector<uint32_t> group_masks_;
  std::vector<uint32_t> kept_;
  int n_active_ = 0;           // BeginBundles → EndBundles: groups computed
  int64_t predicted_now_ = 0;  // and neurons predicted
  SparseStats stats_;
  // Dual thresholds: the controller, and per group whether it was resident when the masks
  // were built; the step of each layer slot (as masks_) for the device log.
  std::unique_ptr<sparse::DualThreshold> dual_;
  std::vector<uint8_t> on_device_;
  sparse::DualMaskStep dual_step_[2];
  // Tracing.
  std::unique_ptr<sparse::TraceWriter> trace_;
  std::vector<uint64_t> pred_bits_, actual_bits_;
  int64_t step_ = 0;
};

// Loads the sidecar for `model` (explicit path, or the default beside the
// model when `path` is empty and that file exists: returns null when there is
// none, or when the environment says KAIROX_SIDECAR_AUTO=0) and creates the
// runtime.
absl::StatusOr<std::unique_ptr<SparseRuntime>> LoadSparseRuntime(
    const Model& model, const std::string& sidecar_path, const SparseConfig& config,
    const cpu::KernelTable& kernels, int n_threads, int max_batch, MemoryBudget* budget);

}  // namespace kx
