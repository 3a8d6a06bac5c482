#include "engine/sparse_runtime.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/env_flag.h"
#include "base/log.h"
#include "base/size_parse.h"
#include "model/model.h"

namespace kx {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

constexpr char kSparseName[] = "predictors + sparse scratch";

}  // namespace

SparseRuntime::~SparseRuntime() {
  if (auto st = CloseTrace(); !st.ok()) Log().warn("trace: {}", std::string(st.message()));
  tier_.reset();
  if (budget_ != nullptr) budget_->Release(kSparseName, reserved_);
}

uint64_t SparseRuntime::OwnedBytes() const {
  // PredictorBytes: the predictors are owned copies under a tier; mapped otherwise (counted
  // all the same: they are resident whenever the session decodes).
  return sidecar_->PredictorBytes() + owned_perm_.size() * sizeof(int32_t) +
         masks_.size() * sizeof(uint32_t) +
         (hidden_.size() + logits_.size()) * sizeof(float) +
         (groups_.size() + group_masks_.size() + kept_.size()) * sizeof(uint32_t) +
         bundles_.size() * static_cast<uint64_t>(n_groups_) * sizeof(void*) +
         (ffn_ != nullptr ? ffn_->ScratchBytes() : 0);
}

absl::Status SparseRuntime::status() const {
  if (tier_ != nullptr && !tier_->status().ok()) return tier_->status();
  return device_ffn_ != nullptr ? device_ffn_->status() : absl::OkStatus();
}

void SparseRuntime::AttachDevice(DeviceFfn* device_ffn) {
  device_ffn_ = device_ffn;
  cpu_bundles_.assign(n_groups_, nullptr);
  host_masks_.assign(n_groups_, 0);
  dual_.reset();
  if (device_ffn_ != nullptr && config_.dual_threshold) {
    dual_ = std::make_unique<sparse::DualThreshold>(n_layer_, config_.dual);
    on_device_.assign(n_groups_, 0);
  }
  if (device_ffn_ != nullptr) device_ffn_->set_transient_host_bundles(tier_ != nullptr);
}

const uint32_t* SparseRuntime::TierMasks(int layer) {
  const uint32_t* masks = Masks(layer, 0);
  if (device_ffn_ == nullptr) return masks;
  // The device's policy step first (one layer ahead, like the tier's reads), then the tier
  // reads only what the device does not hold.
  (void)device_ffn_->Prepare(layer, masks);  // an error is sticky: status() reports it
  device_ffn_->HostMasks(layer, masks, host_masks_.data());
  return host_masks_.data();
}

absl::StatusOr<std::unique_ptr<SparseRuntime>> SparseRuntime::Create(
    const Model& model, std::unique_ptr<const sparse::Sidecar> sidecar, const SparseConfig& config,
    const cpu::KernelTable& kernels, int n_threads, int max_batch, MemoryBudget* budget) {
  if (sidecar == nullptr) return absl::InvalidArgumentError("SparseRuntime: no sidecar");
  std::unique_ptr<SparseRuntime> r(new SparseRuntime());
  const LlamaHParams& hp = model.hparams();
  r->config_ = config;
  r->kernels_ = &kernels;
  r->n_layer_ = hp.n_layer;
  r->n_embd_ = hp.n_embd;
  r->n_ff_ = hp.n_ff;
  r->gs_ = sidecar->group_size();
  r->n_groups_ = hp.n_ff / r->gs_;
  r->max_batch_ = max_batch;
  r->act_ = hp.ffn_act;
  r->act_threshold_ = hp.ffn_act_threshold;
  r->sparsity_ = config.sparsity < 0.0f ? sidecar->sparsity() : config.sparsity;
  KX_ASSIGN_OR_RETURN(r->thresholds_, sidecar->ThresholdsFor(r->sparsity_));
  bool exact_level = false;
  for (float v : sidecar->sparsity_levels()) exact_level |= std::fabs(v - r->sparsity_) < 1e-6f;
  if (!exact_level && sidecar->activation_rule() != "cats") {
    // ReLU family: the rule fixes the thresholds; the sparsity is the model's.
    Log().warn("sparsity {:.2f} does not apply to this {} model: its sparsity is the natural "
               "{:.3f} (thresholds fixed by the activation)",
               r->sparsity_, sidecar->activation_rule(), sidecar->sparsity());
    r->sparsity_ = sidecar->sparsity();
  } else if (!exact_level) {
    Log().warn("sparsity {:.2f} is not one of the sidecar's calibrated levels; using the nearest",
               r->sparsity_);
  }
  int max_rank = 0;
  r->logit_threshold_.resize(hp.n_layer);
  r->bundles_.resize(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    const sparse::Sidecar::Layer& L = sidecar->layer(l);
    if (L.has_predictor) {
      max_rank = std::max(max_rank, L.predictor.rank);
      r->logit_threshold_[l] = sparse::ThresholdLogit(L.predictor.threshold);
    }
    r->bundles_[l].resize(r->n_groups_);
    for (int g = 0; g < r->n_groups_; ++g) {
      r->bundles_[l][g] = L.bundles + L.layout.bundle_stride * static_cast<uint64_t>(g);
    }
  }
  r->CopyPerTokenReads(*sidecar, /*owned=*/config.tiered);
  r->mask_slot_ = static_cast<size_t>(max_batch) * r->n_groups_;
  r->masks_.assign(2 * r->mask_slot_, 0);
  r->hidden_.resize(std::max(max_rank, 1));
  r->logits_.resize(hp.n_ff);
  r->ffn_ = std::make_unique<sparse::SparseFfn>(kernels, hp.n_embd, hp.n_ff, n_threads);
  r->groups_.resize(r->n_groups_);
  r->group_masks_.resize(r->n_groups_);
  r->kept_.resize(r->n_groups_);
  r->layer0_masks_.assign(r->n_groups_, 0);
  r->stats_.n_ff = hp.n_ff;
  r->sidecar_ = std::move(sidecar);
  if (budget != nullptr) {
    const uint64_t owned = r->OwnedBytes();
    KX_RETURN_IF_ERROR(budget->Reserve(kSparseName, owned));
    r->budget_ = budget;
    r->reserved_ = owned;
  }
  if (config.tiered) {
    if (budget == nullptr) return absl::InvalidArgumentError("SparseRuntime: a tier needs a budget");
    TierOptions tier = config.tier;
    const uint64_t fixed = BundleTier::FixedBytes(*r->sidecar_);
    if (config.resident_share >= 0.0) {
      tier.resident_bytes = static_cast<uint64_t>(
          config.resident_share * static_cast<double>(r->sidecar_->BundleBytes()));
    } else {
      const uint64_t left = budget->limit() - budget->used();
      if (left < fixed) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "RAM budget ", FormatBytes(budget->limit()), " is too small: this session needs at least ",
            FormatBytes(budget->used() + fixed), " before any resident bundle (",
            budget->Report(), "; bundle staging ", FormatBytes(fixed),
            "); a smaller context (-c) shrinks the KV cache"));
      }
      tier.resident_bytes = left - fixed;
    }
    KX_ASSIGN_OR_RETURN(r->tier_, BundleTier::Create(*r->sidecar_, tier, budget));
  }

  if (!config.trace_path.empty()) {
    sparse::TraceHeader h;
    h.n_ff.assign(hp.n_layer, static_cast<uint32_t>(hp.n_ff));
    h.group_size = static_cast<uint32_t>(r->gs_);
    h.sparsity = r->sparsity_;
    h.metadata_json = absl::StrCat("{\"model\":\"", model.path(), "\",\"sidecar\":\"",
                                   r->sidecar_->path(), "\",\"predictor\":",
                                   config.use_predictor ? "true" : "false", "}");
    KX_ASSIGN_OR_RETURN(r->trace_, sparse::TraceWriter::Create(config.trace_path, h));
    const size_t words = (hp.n_ff + 63) / 64;
    r->pred_bits_.resize(words);
    r->actual_bits_.resize(words);
  }
  return r;
}

void SparseRuntime::ResetStats() {
  if (tier_ != nullptr) tier_->ResetStats();
  if (device_ffn_ != nullptr) device_ffn_->ResetStats();
  if (dual_ != nullptr) dual_->ResetStats();
  const int64_t n_ff = stats_.n_ff;
  stats_ = SparseStats{};
  stats_.n_ff = n_ff;
}

absl::Status SparseRuntime::CloseTrace() {
  if (trace_ == nullptr) return absl::OkStatus();
  absl::Status st = trace_->Close();
  trace_.reset();
  return st;
}

void SparseRuntime::CopyPerTokenReads(const sparse::Sidecar& sidecar, bool owned) {
  const int n_layer = sidecar.n_layer();
  predictors_.resize(n_layer);
  perm_.resize(n_layer);
  size_t n_half = 0, n_float = 0;
  for (int l = 0; l < n_layer; ++l) {
    const sparse::Sidecar::Layer& L = sidecar.layer(l);
    predictors_[l] = L.predictor;
    perm_[l] = L.perm;
    if (L.has_predictor) {
      const sparse::PredictorView& p = L.predictor;
      n_half += static_cast<size_t>(p.rank) * (p.n_in + p.n_out);
      n_float += static_cast<size_t>(p.rank) + p.n_out;
    }
  }
  if (!owned) return;
  // Sized once, so the views below stay valid.
  owned_half_.resize(n_half);
  owned_float_.resize(n_float);
  owned_perm_.resize(static_cast<size_t>(n_layer) * n_ff_);
  uint16_t* half = owned_half_.data();
  float* fl = owned_float_.data();
  auto take = [](auto*& dst, const auto* src, size_t n) {
    std::copy_n(src, n, dst);
    const auto* view = dst;
    dst += n;
    return view;
  };
  for (int l = 0; l < n_layer; ++l) {
    const sparse::Sidecar::Layer& L = sidecar.layer(l);
    int32_t* perm = owned_perm_.data() + static_cast<size_t>(l) * n_ff_;
    std::copy_n(L.perm, n_ff_, perm);
    perm_[l] = perm;
    if (!L.has_predictor) continue;
    const sparse::PredictorView& src = L.predictor;
    sparse::PredictorView& p = predictors_[l];
    const size_t r = static_cast<size_t>(src.rank);
    p.w1 = take(half, src.w1, r * src.n_in);
    p.b1 = take(fl, src.b1, r);
    if (src.w2t != nullptr) {
      p.w2t = take(half, src.w2t, r * src.n_out);
    } else {
      p.w2 = take(half, src.w2, r * src.n_out);
    }
    p.b2 = take(fl, src.b2, static_cast<size_t>(src.n_out));
  }
}

void SparseRuntime::Predict(int layer, int n, const float* x) {
  const sparse::Sidecar::Layer& L = sidecar_->layer(layer);
  for (int b = 0; b < n; ++b) {
    uint32_t* masks = Masks(layer, b);
    if (!config_.use_predictor || !L.has_predictor) {
      const uint32_t all = gs_ == 32 ? 0xffffffffu : ((1u << gs_) - 1);
      for (int g = 0; g < n_groups_; ++g) masks[g] = all;
      continue;
    }
    sparse::RunPredictor(predictors_[layer], *kernels_, x + static_cast<size_t>(b) * n_embd_,
                         hidden_.data(), logits_.data());
    const float thr = logit_threshold_[layer];
    if (dual_ != nullptr && n == 1 && UsesBundles(1)) {
      // A decode step of the split FFN: θ_g where the group is resident now, θ_c elsewhere.
      for (int g = 0; g < n_groups_; ++g) {
        on_device_[g] = device_ffn_->residency().resident(layer, g) ? 1 : 0;
      }
      const sparse::DualMaskStep st = sparse::BuildDualMasks(
          logits_.data(), n_groups_, gs_, thr, dual_->logit_g(layer, thr),
          dual_->logit_c(layer, thr), on_device_.data(), masks, config_.dual.debug_no_clamp);
      dual_->Record(layer, st, thr);
      dual_step_[layer & 1] = st;
      continue;
    }
    for (int g = 0; g < n_groups_; ++g) {
      const float* lg = &logits_[static_cast<size_t>(g) * gs_];
      uint32_t m = 0;
      for (int j = 0; j < gs_; ++j) m |= static_cast<uint32_t>(lg[j] >= thr) << j;
      masks[g] = m;
    }
  }
}

void SparseRuntime::OnFfnInput(int layer, int n, const float* x) {
  if (layer == 0) Predict(0, n, x);
  if (layer + 1 < n_layer_) Predict(layer + 1, n, x);
  // The tier starts layer l+1's reads now, so they overlap layer l's FFN and
  // layer l+1's attention (adjacent prediction is what buys the time).
  if (device_ffn_ != nullptr && tier_ == nullptr && UsesBundles(n)) {
    // The device's loads for layer l+1 overlap layer l (adjacent prediction).
    if (layer == 0) (void)device_ffn_->Prepare(0, Masks(0, 0));
    if (layer + 1 < n_layer_) (void)device_ffn_->Prepare(layer + 1, Masks(layer + 1, 0));
  }
  if (tier_ != nullptr && tier_->prefetch() && UsesBundles(n)) {
    if (layer == 0) {
      tier_->Prepare(0, TierMasks(0));
      std::copy_n(Masks(0, 0), n_groups_, layer0_masks_.begin());
      has_layer0_masks_ = true;
    }
    if (layer + 1 < n_layer_) tier_->Prepare(layer + 1, TierMasks(layer + 1));
    // Layer 0 of the next token is predicted only from its own input: guess
    // it from this token's, and start its reads during the last layer.
    if (layer + 1 == n_layer_ && has_layer0_masks_ && tier_->speculate_layer0()) {
      tier_->Speculate(0, layer0_masks_.data());
    }
  }
}

void SparseRuntime::OnActivations(int layer, int n, float* act) {
  const int32_t* perm = perm_[layer];
  const float t = thresholds_[layer];
  for (int b = 0; b < n; ++b) {
    const uint32_t* masks = Masks(layer, b);
    float* a = act + static_cast<size_t>(b) * n_ff_;
    if (trace_ != nullptr) {
      std::fill(pred_bits_.begin(), pred_bits_.end(), 0);
      std::fill(actual_bits_.begin(), actual_bits_.end(), 0);
    }
    int64_t predicted = 0, kept = 0, actual = 0, missed = 0;
    for (int i = 0; i < n_ff_; ++i) {
      const int neuron = perm[i];
      const bool pred = (masks[i / gs_] >> (i % gs_)) & 1u;
      const bool above = std::fabs(a[neuron]) > t;
      predicted += pred;
      actual += above;
      missed += above && !pred;
      if (pred && above) {
        ++kept;
      } else {
        a[neuron] = 0.0f;
      }
      if (trace_ != nullptr) {
        pred_bits_[i >> 6] |= static_cast<uint64_t>(pred) << (i & 63);
        actual_bits_[i >> 6] |= static_cast<uint64_t>(above) << (i & 63);
      }
    }
    stats_.layer_tokens += 1;
    stats_.predicted += predicted;
    stats_.kept += kept;
    stats_.actual += actual;
    stats_.missed += missed;
    if (trace_ != nullptr) {
      if (auto st = trace_->AddLayer(step_ + b, layer, pred_bits_.data(), actual_bits_.data(),
                                     nullptr);
          !st.ok()) {
        Log().warn("trace: {}; tracing stops", std::string(st.message()));
        trace_.reset();
      }
    }
  }
}

void SparseRuntime::RunBundles(int layer, const float* x, float* y, ThreadPool& pool) {
  BeginBundles(layer, x, y, pool.size());
  for (int phase = 0; phase < 2; ++phase) {
    if (ffn_->HasPhase(phase)) pool.Run([&](int ith, int nth) { ffn_->RunPart(phase, ith, nth); });
    if (phase == 0) ffn_->Between();
  }
  ffn_->Finish();
  EndBundles(layer);
}

void SparseRuntime::BeginBundles(int layer, const float* x, float* y, int n_parts) {
  const sparse::Sidecar::Layer& L = sidecar_->layer(layer);
  const uint32_t* masks = Masks(layer, 0);
  const uint8_t* const* bundles =
      tier_ != nullptr ? tier_->Acquire(layer, TierMasks(layer)) : bundles_[layer].data();
  int64_t predicted = 0;
  if (device_ffn_ != nullptr) {
    if (tier_ != nullptr) device_ffn_->NoteDiskWait(tier_->acquire_wait_ns(layer));
    // The split FFN: the device starts on the groups it holds; the CPU computes the rest.
    // After a device error (sticky, reported by status()) the CPU computes everything.
    if (device_ffn_->Begin(layer, masks, x, thresholds_[layer], bundles, cpu_bundles_.data())
            .ok()) {
      for (int g = 0; g < n_groups_; ++g) {
        if (masks[g] != 0 && bundles[g] != nullptr && cpu_bundles_[g] == nullptr) {
          predicted += __builtin_popcount(masks[g]);  // computed on the device
        }
      }
      bundles = cpu_bundles_.data();
    }
  }
  y_ = y;
  int n_active = 0;
  for (int g = 0; g < n_groups_; ++g) {
    if (masks[g] == 0 || bundles[g] == nullptr) continue;  // null: a miss the tier skipped
    groups_[n_active] = g;
    group_masks_[n_active] = masks[g];
    predicted += __builtin_popcount(masks[g]);
    ++n_active;
  }
  sparse::SparseFfnArgs args;
  args.layout = &L.layout;
  args.bundles = bundles;
  args.groups = groups_.data();
  args.n_groups = n_active;
  args.masks = group_masks_.data();
  args.x = x;
  args.act = act_;
  args.act_threshold = act_threshold_;
  args.threshold = thresholds_[layer];
  args.y = y;
  args.kept = kept_.data();
  ffn_->Begin(args, n_parts);
  n_active_ = n_active;
  predicted_now_ = predicted;
}

void SparseRuntime::EndBundles(int layer) {
  // The device's partial sum joins the CPU's before the tier may reuse what it read.
  if (device_ffn_ != nullptr) {
    if (dual_ != nullptr) {
      const float thr = logit_threshold_[layer];
      const sparse::DualMaskStep& d = dual_step_[layer & 1];
      device_ffn_->NoteDual(sparse::ThresholdProbability(dual_->logit_g(layer, thr)),
                            sparse::ThresholdProbability(dual_->logit_c(layer, thr)), d.gained,
                            d.dropped, d.clamped);
    }
    (void)device_ffn_->End(layer, y_);
    // The greedy's step for this layer's next masks: which side finished last.
    if (dual_ != nullptr) {
      const DeviceFfnLayerStep& d = device_ffn_->last_step(layer);
      dual_->Feedback(layer,
                      sparse::ClassifySplit(d.wait_ns, d.cpu_ns, config_.dual.device_wait_share));
    }
  }
  if (tier_ != nullptr) tier_->Release(layer);
  int64_t kept = device_ffn_ != nullptr ? device_ffn_->last_kept() : 0;
  for (int i = 0; i < n_active_; ++i) kept += __builtin_popcount(kept_[i]);
  if (trace_ != nullptr && (tier_ != nullptr || device_ffn_ != nullptr)) {
    TraceTierStep(layer, Masks(layer, 0));
  }
  stats_.layer_tokens += 1;
  stats_.predicted += predicted_now_;
  stats_.kept += kept;
}

void SparseRuntime::TraceTierStep(int layer, const uint32_t* masks) {
  std::fill(pred_bits_.begin(), pred_bits_.end(), 0);
  for (int i = 0; i < n_ff_; ++i) {
    const uint64_t bit = (masks[i / gs_] >> (i % gs_)) & 1u;
    pred_bits_[i >> 6] |= bit << (i & 63);
  }
  sparse::LayerStats st;
  st.present = sparse::LayerStats::kResidentGroups | sparse::LayerStats::kReads |
               sparse::LayerStats::kBytesRead | sparse::LayerStats::kStallNs |
               sparse::LayerStats::kLambda;
  if (device_ffn_ != nullptr) {
    // The fast tier is the device's slots: loads are bundle copies up, the stall is End's
    // wait for the device's partial sum.
    const DeviceFfnLayerStep& d = device_ffn_->last_step(layer);
    st.resident_groups = static_cast<uint64_t>(device_ffn_->residency().resident_count(layer));
    st.reads = static_cast<uint64_t>(d.loads);
    st.bytes_read = static_cast<uint64_t>(d.bytes);
    st.stall_ns = static_cast<uint64_t>(d.wait_ns);
    st.lambda = device_ffn_->policy().lambda(layer);
  } else {
    const BundleTier::LayerStep& t = tier_->last_step(layer);
    st.resident_groups = static_cast<uint64_t>(t.resident_groups);
    st.reads = static_cast<uint64_t>(t.read_ops);
    st.bytes_read = static_cast<uint64_t>(t.bytes_read);
    st.stall_ns = static_cast<uint64_t>(t.io_wait_ns);
    st.lambda = t.lambda;
  }
  if (auto s = trace_->AddLayer(step_, layer, pred_bits_.data(), nullptr, &st); !s.ok()) {
    Log().warn("trace: {}; tracing stops", std::string(s.message()));
    trace_.reset();
  }
}

absl::StatusOr<std::unique_ptr<SparseRuntime>> LoadSparseRuntime(
    const Model& model, const std::string& sidecar_path, const SparseConfig& config,
    const cpu::KernelTable& kernels, int n_threads, int max_batch, MemoryBudget* budget) {
  std::string path = sidecar_path;
  if (path.empty()) {
    // KAIROX_SIDECAR_AUTO=0: never pick up a sidecar nobody named (the test
    // suite sets it, so a user's own sidecar cannot change dense goldens).
    if (EnvFlag("KAIROX_SIDECAR_AUTO") == false) return std::unique_ptr<SparseRuntime>();
    path = sparse::DefaultSidecarPath(model.path());
    if (!FileExists(path)) return std::unique_ptr<SparseRuntime>();
  }
  KX_ASSIGN_OR_RETURN(std::unique_ptr<const sparse::Sidecar> sidecar,
                      sparse::Sidecar::Open(path, model));
  Log().info("sidecar {}: sparsity {:.2f}, group size {}, down {}, predictors {:.1f} MiB, "
             "bundles {:.1f} MiB",
             path, config.sparsity < 0 ? sidecar->sparsity() : config.sparsity,
             sidecar->group_size(), sparse::DownLayoutName(sidecar->down_layout()),
             sidecar->PredictorBytes() / 1048576.0,
             sidecar->BundleBytes() / 1048576.0);
  return SparseRuntime::Create(model, std::move(sidecar), config, kernels, n_threads, max_batch,
                               budget);
}

}  // namespace kx
