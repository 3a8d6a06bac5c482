#include "engine/device_ffn.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/size_parse.h"
#include "base/timer.h"
#include "kernels/cuda/sparse_down_blocks.cuh"
#include "kernels/cuda/sparse_down_rows.cuh"
#include "kernels/cuda/sparse_up_gate.cuh"

namespace kx {
namespace {

constexpr char kSlotsName[] = "FFN bundles";
constexpr char kScratchName[] = "FFN scratch";
constexpr char kStagingName[] = "FFN staging (pinned)";

uint64_t AlignUp(uint64_t n) {
  return (n + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

uint64_t WorkspaceBytes(const sparse::Sidecar& s) {
  const sparse::BundleLayout& l = s.layer(0).layout;
  return s.down_layout() == sparse::DownLayout::kBlocks
             ? kx_cuda_sparse_down_blocks_workspace_bytes(l.n_embd, l.n_groups)
             : kx_cuda_sparse_down_rows_workspace_bytes(l.n_embd, l.n_groups, l.group_size);
}

// The staging layout (pinned host memory, and the same order in device scratch): x, partial,
// kept bits, slot list, masks; the device alone has coefficients and workspace.
struct Carve {
  uint64_t x = 0, partial = 0, kept = 0, slots = 0, masks = 0, coef = 0, workspace = 0, total = 0;
};

Carve CarveScratch(const sparse::Sidecar& s) {
  const sparse::BundleLayout& l = s.layer(0).layout;
  Carve c;
  uint64_t at = 0;
  auto take = [&](uint64_t bytes) {
    const uint64_t off = at;
    at += AlignUp(std::max<uint64_t>(bytes, 1));
    return off;
  };
  c.x = take(sizeof(float) * l.n_embd);
  c.partial = take(sizeof(float) * l.n_embd);
  c.kept = take(sizeof(uint32_t) * l.n_groups);  // right after partial: one copy brings both
  c.slots = take(sizeof(int32_t) * l.n_groups);
  c.masks = take(sizeof(uint32_t) * l.n_groups);
  c.coef = take(sizeof(float) * l.n_groups * l.group_size);
  c.workspace = take(WorkspaceBytes(s));
  c.total = at;
  return c;
}

// Pinned staging: x, partial, kept, slots, masks (no coefficients or workspace).
uint64_t StagingBytes(const Carve& c) { return c.coef; }

}  // namespace

uint64_t DeviceFfn::ScratchBytes(const sparse::Sidecar& sidecar) {
  return CarveScratch(sidecar).total;
}

uint64_t DeviceFfn::SlotBytes(const sparse::Sidecar& sidecar) {
  return sidecar.layer(0).layout.bundle_stride;
}

DeviceFfn::DeviceFfn(Device& device, const sparse::Sidecar& sidecar,
                     const cpu::KernelTable& kernels, FfnActivation act, float act_threshold,
                     const DeviceFfnOptions& options)
    : device_(device),
      sidecar_(sidecar),
      gate_kernels_(kernels.For(sidecar.layer(0).layout.gate_type)),
      act_(act),
      act_threshold_(act_threshold),
      options_(options) {}

DeviceFfn::~DeviceFfn() {
  // Nothing queued may outlive the buffers it reads or writes.
  (void)device_.Synchronize();
  if (log_ != nullptr) std::fclose(log_);
}

absl::StatusOr<std::unique_ptr<DeviceFfn>> DeviceFfn::Create(Device& device,
                                                             const sparse::Sidecar& sidecar,
                                                             const cpu::KernelTable& kernels,
                                                             FfnActivation act, float act_threshold,
                                                             const DeviceFfnOptions& options) {
  auto d = std::unique_ptr<DeviceFfn>(
      new DeviceFfn(device, sidecar, kernels, act, act_threshold, options));
  KX_RETURN_IF_ERROR(d->Init());
  return d;
}

absl::Status DeviceFfn::Init() {
  const sparse::BundleLayout& l = sidecar_.layer(0).layout;
  n_layer_ = sidecar_.n_layer();
  n_groups_ = l.n_groups;
  gs_ = l.group_size;
  n_embd_ = l.n_embd;
  stride_ = l.bundle_stride;
  if (gate_kernels_ == nullptr) {
    return absl::UnimplementedError("device FFN: the CPU has no kernels for the gate type");
  }
  act_scratch_.resize(gate_kernels_->act_bytes(n_embd_));
  for (const char* op : {"sparse_up_gate", sidecar_.down_layout() == sparse::DownLayout::kBlocks
                                               ? "sparse_down_blocks"
                                               : "sparse_down_rows"}) {
    if (!device_.Supports(op)) {
      return absl::UnimplementedError(
          absl::StrCat("device ", device_.name(), " has no '", op, "' op for the split FFN"));
    }
  }
  KX_ASSIGN_OR_RETURN(up_gate_op_, device_.FindOp("sparse_up_gate"));
  KX_ASSIGN_OR_RETURN(down_op_, device_.FindOp(sidecar_.down_layout() == sparse::DownLayout::kBlocks
                                                   ? "sparse_down_blocks"
                                                   : "sparse_down_rows"));

  const uint64_t per_layer = static_cast<uint64_t>(n_layer_) * stride_;
  slots_per_layer_ =
      static_cast<int>(std::min<uint64_t>(options_.slot_bytes / per_layer, n_groups_));
  KX_ASSIGN_OR_RETURN(policy_, policy::MakePolicy(options_.policy, options_.policy_options));
  residency_ = std::make_unique<policy::Residency>(n_layer_, n_groups_, slots_per_layer_);

  const Carve c = CarveScratch(sidecar_);
  KX_ASSIGN_OR_RETURN(scratch_, device_.Alloc(kScratchName, c.total));
  if (slots_per_layer_ > 0) {
    KX_ASSIGN_OR_RETURN(
        slots_, device_.Alloc(kSlotsName, static_cast<uint64_t>(slots_per_layer_) * per_layer));
  }
  KX_ASSIGN_OR_RETURN(staging_, device_.AllocPinned(kStagingName, StagingBytes(c)));
  KX_RETURN_IF_ERROR(InitStagingRing());
  uint8_t* d = scratch_.as<uint8_t>();
  d_x_ = reinterpret_cast<float*>(d + c.x);
  d_partial_ = reinterpret_cast<float*>(d + c.partial);
  d_kept_ = reinterpret_cast<uint32_t*>(d + c.kept);
  kept_offset_ = c.kept - c.partial;
  d_slots_ = reinterpret_cast<int32_t*>(d + c.slots);
  d_masks_ = reinterpret_cast<uint32_t*>(d + c.masks);
  d_coef_ = reinterpret_cast<float*>(d + c.coef);
  workspace_bytes_ = WorkspaceBytes(sidecar_);
  d_workspace_ = workspace_bytes_ > 0 ? d + c.workspace : nullptr;
  uint8_t* h = staging_.as<uint8_t>();
  h_x_ = reinterpret_cast<float*>(h + c.x);
  h_partial_ = reinterpret_cast<float*>(h + c.partial);
  h_kept_ = reinterpret_cast<uint32_t*>(h + c.kept);
  h_slots_ = reinterpret_cast<int32_t*>(h + c.slots);
  h_masks_ = reinterpret_cast<uint32_t*>(h + c.masks);
  if (absl::StatusOr<DeviceInfo> info = device_.Info(); info.ok()) {
    upload_hint_bytes_per_s_ = info->h2d_bytes_per_s;
    upload_hint_latency_s_ = info->copy_latency_s;
  }
  KX_ASSIGN_OR_RETURN(started_, device_.CreateTimingEvent());
  KX_ASSIGN_OR_RETURN(uploaded_, device_.CreateTimingEvent());
  KX_ASSIGN_OR_RETURN(computed_, device_.CreateTimingEvent());
  KX_ASSIGN_OR_RETURN(returned_, device_.CreateTimingEvent());
  KX_ASSIGN_OR_RETURN(bg_tail_, device_.CreateEvent());
  layers_.resize(n_layer_);
  for (LayerState& layer : layers_) {
    KX_ASSIGN_OR_RETURN(layer.loaded, device_.CreateTimingEvent());
    KX_ASSIGN_OR_RETURN(layer.load_started, device_.CreateTimingEvent());
  }
  pinned_.reserve(n_groups_);
  intensity_.assign(n_groups_, 0.0f);
  load_src_.assign(n_groups_, nullptr);
  plan_.load.reserve(n_groups_);
  plan_.evict.reserve(n_groups_);
  KX_RETURN_IF_ERROR(InitialPlacement());
  if (!options_.log_path.empty()) {
    log_ = std::fopen(options_.log_path.c_str(), "w");
    if (log_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write the device FFN log '", options_.log_path, "'"));
    }
    std::fprintf(log_,
                 "token,layer,lambda,resident,groups_needed,on_device,loads,evictions,"
                 "bytes_loaded,device_wait_ns,cpu_ns,gpu_ns,h2d_critical_ns,h2d_background_ns,"
                 "disk_ns,other_ns,upload_ns,compute_ns,download_ns,theta_g,theta_c,gained,dropped,"
                 "clamped\n");
  }
  Log().info("device FFN on {}: {} of {} groups per layer in device slots ({}), policy {}",
             device_.name(), slots_per_layer_, n_groups_,
             FormatBytes(static_cast<uint64_t>(slots_per_layer_) * per_layer), policy_->name());
  return absl::OkStatus();
}

absl::Status DeviceFfn::InitialPlacement() {
  policy::PlacementStats ps;
  ps.n_layer = n_layer_;
  ps.n_groups = n_groups_;
  ps.bundle_bytes = stride_;
  ps.frequency = sidecar_.GroupFrequency();
  std::vector<std::pair<int, int>> loads;
  policy_->Place(ps, *residency_, &loads);
  for (const auto& [l, g] : loads) {
    const int slot = residency_->free_slot(l);
    KX_CHECK_MSG(slot >= 0, "device FFN: the initial placement exceeds the slots");
    residency_->BeginLoad(l, g, slot);
    const sparse::Sidecar::Layer& L = sidecar_.layer(l);
    KX_RETURN_IF_ERROR(device_.CopyH2D(StreamKind::kCritical, SlotPtr(l, slot),
                                       L.bundles + stride_ * static_cast<uint64_t>(g), stride_));
  }
  KX_RETURN_IF_ERROR(device_.StreamSynchronize(StreamKind::kCritical));
  for (const auto& [l, g] : loads) residency_->CompleteLoad(l, g);
  return absl::OkStatus();
}

void DeviceFfn::CpuInput(const float* x, float* dst) {
  gate_kernels_->quantize_act(x, n_embd_, act_scratch_.data());
  if (gate_kernels_->act_bytes(n_embd_) == sizeof(float) * static_cast<size_t>(n_embd_)) {
    std::memcpy(dst, act_scratch_.data(), sizeof(float) * n_embd_);  // float types: x itself
    return;
  }
  const auto* blocks = reinterpret_cast<const cpu::BlockQ16A*>(act_scratch_.data());
  for (int64_t b = 0; b < n_embd_ / cpu::kQ16ABlock; ++b) {
    for (int j = 0; j < cpu::kQ16ABlock; ++j) {
      dst[b * cpu::kQ16ABlock + j] = blocks[b].d * static_cast<float>(blocks[b].qs[j]);
    }
  }
}

absl::Status DeviceFfn::WaitForLoads() {
  if (!status_.ok()) return status_;
  absl::Status st = device_.StreamSynchronize(StreamKind::kBackground);
  if (!st.ok()) status_ = st;
  return st;
}

void DeviceFfn::set_record_plans(bool on) {
  record_plans_ = on;
  if (!on) plan_records_.clear();
}

void DeviceFfn::HostMasks(int layer, const uint32_t* masks, uint32_t* out) const {
  for (int g = 0; g < n_groups_; ++g) {
    out[g] = residency_->resident(layer, g) ? 0u : masks[g];
  }
}

absl::Status DeviceFfn::CompleteLoads(int layer) {
  LayerState& L = layers_[layer];
  if (!L.loads_pending) return absl::OkStatus();
  KX_ASSIGN_OR_RETURN(bool done, device_.EventQuery(L.loaded));
  if (!done) return absl::OkStatus();
  for (int s = 0; s < slots_per_layer_; ++s) {
    if (residency_->state(layer, s) == policy::SlotState::kLoading) {
      residency_->CompleteLoad(layer, residency_->group_of(layer, s));
    }
  }
  L.loads_pending = false;
  TimeLoads(layer);
  return absl::OkStatus();
}

absl::Status DeviceFfn::Begin(int layer, const uint32_t* masks, const float* x, float threshold,
                              const uint8_t* const* host_bundles, const uint8_t** cpu_bundles) {
  if (!status_.ok()) return status_;
  absl::Status st = RunBegin(layer, masks, x, threshold, host_bundles, cpu_bundles);
  if (!st.ok()) status_ = st;
  return st;
}

absl::Status DeviceFfn::RunBegin(int layer, const uint32_t* masks, const float* x, float threshold,
                                 const uint8_t* const* host_bundles, const uint8_t** cpu_bundles) {
  KX_CHECK_MSG(active_layer_ < 0, "DeviceFfn::Begin without End");
  begin_ns_ = NowNs();
  active_layer_ = layer;
  LayerState& L = layers_[layer];
  KX_RETURN_IF_ERROR(CompleteLoads(layer));

  if (!L.prepared) KX_RETURN_IF_ERROR(RunPrepare(layer, masks));
  L.prepared = false;

  // The device's share: every predicted group resident now.
  int n = 0;
  int64_t neurons = 0, neurons_all = 0, needed = 0;
  pinned_.clear();
  for (int g = 0; g < n_groups_; ++g) {
    cpu_bundles[g] = host_bundles[g];
    if (masks[g] == 0) continue;
    ++needed;
    neurons_all += __builtin_popcount(masks[g]);
    const int slot = residency_->slot_of(layer, g);
    if (slot < 0) continue;
    residency_->Pin(layer, slot);
    pinned_.push_back(slot);
    h_slots_[n] = slot;
    h_masks_[n] = masks[g];
    neurons += __builtin_popcount(masks[g]);
    cpu_bundles[g] = nullptr;
    ++n;
  }
  n_listed_ = n;
  L.last.needed = needed;
  L.last.on_device = n;
  stats_.layer_steps += 1;
  stats_.groups_needed += needed;
  stats_.groups_on_device += n;
  stats_.neurons_needed += neurons_all;
  stats_.neurons_on_device += neurons;
  if (n == 0) return absl::OkStatus();

  const sparse::BundleLayout& lay = sidecar_.layer(layer).layout;
  uint8_t* arena = SlotPtr(layer, 0);
  CpuInput(x, h_x_);
  // Whether the upload may queue behind bundle loads on a shared copy engine (the wait is
  // split by it in End); a query error only counts as busy.
  absl::StatusOr<bool> bg_idle = device_.EventQuery(bg_tail_);
  bg_busy_ = !bg_idle.ok() || !*bg_idle;
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kCritical, started_));
  KX_RETURN_IF_ERROR(device_.CopyH2D(StreamKind::kCritical, d_x_, h_x_, sizeof(float) * n_embd_));
  KX_RETURN_IF_ERROR(
      device_.CopyH2D(StreamKind::kCritical, d_slots_, h_slots_, sizeof(int32_t) * n));
  KX_RETURN_IF_ERROR(
      device_.CopyH2D(StreamKind::kCritical, d_masks_, h_masks_, sizeof(uint32_t) * n));
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kCritical, uploaded_));
  KX_RETURN_IF_ERROR(device_.StreamWaitEvent(StreamKind::kCompute, uploaded_));
  KX_RETURN_IF_ERROR(device_.Memset(StreamKind::kCompute, d_partial_, 0, sizeof(float) * n_embd_));

  kx_cuda_sparse_up_gate_args ug{};
  ug.struct_size = sizeof(ug);
  ug.arena = arena;
  ug.slot_stride = stride_;
  ug.slots = d_slots_;
  ug.masks = d_masks_;
  ug.n_listed = n;
  ug.n_embd = n_embd_;
  ug.group_size = gs_;
  ug.up_type = static_cast<int32_t>(lay.up_type);
  ug.gate_type = static_cast<int32_t>(lay.gate_type);
  ug.activation = static_cast<int32_t>(act_);
  ug.threshold = threshold;
  ug.act_threshold = act_threshold_;
  ug.x = d_x_;
  ug.coef = d_coef_;
  ug.kept = d_kept_;
  KX_RETURN_IF_ERROR(device_.Launch(StreamKind::kCompute, up_gate_op_, &ug));
  if (lay.down == sparse::DownLayout::kBlocks) {
    kx_cuda_sparse_down_blocks_args db{};
    db.struct_size = sizeof(db);
    db.arena = arena;
    db.slot_stride = stride_;
    db.down_offset = lay.down_offset();
    db.slots = d_slots_;
    db.n_listed = n;
    db.n_embd = n_embd_;
    db.coef = d_coef_;
    db.y = d_partial_;
    db.workspace = d_workspace_;
    db.workspace_bytes = workspace_bytes_;
    KX_RETURN_IF_ERROR(device_.Launch(StreamKind::kCompute, down_op_, &db));
  } else {
    kx_cuda_sparse_down_rows_args dr{};
    dr.struct_size = sizeof(dr);
    dr.arena = arena;
    dr.slot_stride = stride_;
    dr.down_offset = lay.down_offset();
    dr.slots = d_slots_;
    dr.n_listed = n;
    dr.group_size = gs_;
    dr.down_type = static_cast<int32_t>(lay.down_type);
    dr.n_embd = n_embd_;
    dr.coef = d_coef_;
    dr.y = d_partial_;
    dr.workspace = d_workspace_;
    dr.workspace_bytes = workspace_bytes_;
    KX_RETURN_IF_ERROR(device_.Launch(StreamKind::kCompute, down_op_, &dr));
  }
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kCompute, computed_));
  KX_RETURN_IF_ERROR(device_.StreamWaitEvent(StreamKind::kCritical, computed_));
  // The partial sum and the kept bits in one copy (they are adjacent).
  KX_RETURN_IF_ERROR(device_.CopyD2H(StreamKind::kCritical, h_partial_, d_partial_,
                                     kept_offset_ + sizeof(uint32_t) * n));
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kCritical, returned_));

  // Three tiers: this step's loads copy from the host tier's buffers now (see Balance).
  if (transient_host_) {
    int64_t issued = 0;
    bool timed = false;
    for (int s = 0; s < slots_per_layer_; ++s) {
      if (residency_->state(layer, s) != policy::SlotState::kLoading) continue;
      const int g = residency_->group_of(layer, s);
      if (load_src_[g] != nullptr) continue;  // already issued in an earlier step
      // Only a group needed now has a valid pointer from the host tier (others may be stale).
      const uint8_t* src = masks[g] != 0 ? host_bundles[g] : nullptr;
      if (src == nullptr) {
        residency_->CancelLoad(layer, g);
        continue;
      }
      load_src_[g] = src;
      if (!timed) KX_RETURN_IF_ERROR(StartLoadBatch(layer));
      timed = true;
      KX_RETURN_IF_ERROR(LoadBundle(layer, s, src));
      L.load_bytes += static_cast<int64_t>(stride_);
      ++issued;
    }
    if (issued > 0) KX_RETURN_IF_ERROR(EndLoadBatch(layer));
  }
  return absl::OkStatus();
}

absl::Status DeviceFfn::Prepare(int layer, const uint32_t* masks) {
  if (!status_.ok()) return status_;
  absl::Status st = RunPrepare(layer, masks);
  if (!st.ok()) status_ = st;
  return st;
}

absl::Status DeviceFfn::RunPrepare(int layer, const uint32_t* masks) {
  LayerState& L = layers_[layer];
  if (L.prepared) return absl::OkStatus();
  KX_RETURN_IF_ERROR(CompleteLoads(layer));
  // The policy's step (KAIROX's balance): this step's predicted intensities, the last step's
  // feedback. Evictions first: no device work reads this layer's slots now (End waited for
  // the last step's), and a loading group is never evicted (policy contract).
  for (int g = 0; g < n_groups_; ++g) {
    intensity_[g] = static_cast<float>(__builtin_popcount(masks[g])) / static_cast<float>(gs_);
  }
  KX_RETURN_IF_ERROR(Balance(layer));
  L.prepared = true;
  return absl::OkStatus();
}

absl::Status DeviceFfn::Balance(int layer) {
  LayerState& L = layers_[layer];
  policy::Window window;
  window.bytes = options_.max_load_bytes_per_step;
  policy_->PlanLayer(layer, intensity_.data(), L.feedback, window, *residency_, &plan_);
  if (record_plans_) {
    plan_records_.push_back(
        {tokens_, layer, plan_.load, plan_.evict, residency_->loading_count(layer)});
  }
  for (int32_t g : plan_.evict) {
    const int slot = residency_->slot_of(layer, g);
    residency_->Evict(layer, g);
    // sim: reading an evicted slot shows as NaN (cuda: nothing).
    KX_RETURN_IF_ERROR(device_.Poison(
        slots_,
        (static_cast<uint64_t>(layer) * slots_per_layer_ + static_cast<uint64_t>(slot)) * stride_,
        stride_));
  }
  const sparse::Sidecar::Layer& SL = sidecar_.layer(layer);
  if (!plan_.load.empty() && !transient_host_) KX_RETURN_IF_ERROR(StartLoadBatch(layer));
  for (int32_t g : plan_.load) {
    const int slot = residency_->free_slot(layer);
    KX_CHECK_MSG(slot >= 0, "device FFN: the policy's plan exceeds the slots");
    residency_->BeginLoad(layer, g, slot);
    if (transient_host_) {
      load_src_[g] = nullptr;  // issued in RunBegin from the host tier's buffer
      continue;
    }
    // One copy per bundle: a critical copy behind them waits at most one bundle.
    KX_RETURN_IF_ERROR(LoadBundle(layer, slot, SL.bundles + stride_ * static_cast<uint64_t>(g)));
    L.load_bytes += static_cast<int64_t>(stride_);
  }
  if (!plan_.load.empty() && !transient_host_) KX_RETURN_IF_ERROR(EndLoadBatch(layer));
  DeviceFfnLayerStep& last = L.last;
  last.loads = static_cast<int64_t>(plan_.load.size());
  last.evictions = static_cast<int64_t>(plan_.evict.size());
  last.bytes = last.loads * static_cast<int64_t>(stride_);
  stats_.loads += last.loads;
  stats_.evictions += last.evictions;
  stats_.bytes_loaded += last.bytes;
  return absl::OkStatus();
}

absl::Status DeviceFfn::End(int layer, float* y) {
  if (!status_.ok()) {
    active_layer_ = -1;
    return status_;
  }
  absl::Status st = RunEnd(layer, y);
  if (!st.ok()) status_ = st;
  return st;
}

absl::Status DeviceFfn::RunEnd(int layer, float* y) {
  KX_CHECK_MSG(active_layer_ == layer, "DeviceFfn::End for another layer than Begin");
  active_layer_ = -1;
  LayerState& L = layers_[layer];
  const bool on_graph = cpu_done_ns_ > 0;  // the decode graph noted the CPU's end
  const int64_t t0 = on_graph ? cpu_done_ns_ : NowNs();
  cpu_done_ns_ = 0;
  L.last.cpu_ns = t0 - begin_ns_;
  int64_t kept = 0;
  if (n_listed_ > 0) {
    KX_RETURN_IF_ERROR(device_.EventSynchronize(returned_));
    for (int64_t e = 0; e < n_embd_; ++e) y[e] += h_partial_[e];
    for (int i = 0; i < n_listed_; ++i) kept += __builtin_popcount(h_kept_[i]);
  }
  last_kept_ = kept;
  for (int slot : pinned_) residency_->Unpin(layer, slot);
  pinned_.clear();
  const int64_t t1 = NowNs();
  L.last.wait_ns = t1 - t0;
  int64_t graph_load_wait = 0;
  if (on_graph && LoadsReadHostTier() && L.loads_pending) {
    // Three tiers on the decode graph: the merge ran after the loads' external (dev_load.l),
    // so the host's wait for the loads is inside the wait above. Its part after the download
    // (device clock) is the loads' (all of it when the step had no device work), as End's own
    // wait for them is on the pool path.
    KX_RETURN_IF_ERROR(device_.EventSynchronize(L.loaded));
    int64_t after = L.last.wait_ns;
    if (n_listed_ > 0) {
      absl::StatusOr<double> s = device_.EventElapsedSeconds(returned_, L.loaded);
      after = s.ok() ? static_cast<int64_t>(*s * 1e9) : 0;
    }
    graph_load_wait = std::clamp<int64_t>(after, 0, L.last.wait_ns);
    L.last.wait_ns -= graph_load_wait;
  }
  AttributeWait(L.last);
  L.last.disk_ns = pending_disk_ns_;
  pending_disk_ns_ = 0;
  if (LoadsReadHostTier() && L.loads_pending) {
    // The host tier may reuse the buffers these loads read once the layer is released.
    KX_RETURN_IF_ERROR(device_.EventSynchronize(L.loaded));
    const int64_t load_wait = NowNs() - t1 + graph_load_wait;
    stats_.load_wait_ns += load_wait;
    // The host waited for bundle loads: the background tag.
    L.last.h2d_background_ns += load_wait;
    KX_RETURN_IF_ERROR(CompleteLoads(layer));
  }
  stats_.device_wait_ns += L.last.wait_ns;
  stats_.cpu_ns += L.last.cpu_ns;
  stats_.gpu_ns += L.last.gpu_ns;
  stats_.h2d_critical_ns += L.last.h2d_critical_ns;
  stats_.h2d_background_ns += L.last.h2d_background_ns;
  stats_.disk_ns += L.last.disk_ns;
  stats_.other_ns += L.last.other_ns;
  stats_.upload_ns += L.last.upload_ns;
  stats_.compute_ns += L.last.compute_ns;
  stats_.download_ns += L.last.download_ns;
  // The adaptive λ's signal: waiting on the device (its compute and the copies the step
  // needs, which reloads delay) against the CPU's share.
  L.feedback.io_wait_s = static_cast<double>(L.last.wait_ns) * 1e-9;
  L.feedback.cpu_s = static_cast<double>(L.last.cpu_ns) * 1e-9;
  if (log_ != nullptr) LogStep(layer);
  pending_dual_.set = false;
  if (layer == n_layer_ - 1) ++tokens_;
  return absl::OkStatus();
}

void DeviceFfn::LogStep(int layer) {
  const DeviceFfnLayerStep& L = layers_[layer].last;
  std::fprintf(log_,
               "%lld,%d,%.5f,%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,"
               "%lld,%lld,",
               static_cast<long long>(tokens_), layer, policy_->lambda(layer),
               residency_->resident_count(layer), static_cast<long long>(L.needed),
               static_cast<long long>(L.on_device), static_cast<long long>(L.loads),
               static_cast<long long>(L.evictions), static_cast<long long>(L.bytes),
               static_cast<long long>(L.wait_ns), static_cast<long long>(L.cpu_ns),
               static_cast<long long>(L.gpu_ns), static_cast<long long>(L.h2d_critical_ns),
               static_cast<long long>(L.h2d_background_ns), static_cast<long long>(L.disk_ns),
               static_cast<long long>(L.other_ns), static_cast<long long>(L.upload_ns),
               static_cast<long long>(L.compute_ns), static_cast<long long>(L.download_ns));
  if (pending_dual_.set) {
    std::fprintf(log_, "%.5f,%.5f,%d,%d,%d\n", pending_dual_.theta_g, pending_dual_.theta_c,
                 pending_dual_.gained, pending_dual_.dropped, pending_dual_.clamped ? 1 : 0);
  } else {
    std::fputs(",,,,\n", log_);
  }
}

}  // namespace kx
