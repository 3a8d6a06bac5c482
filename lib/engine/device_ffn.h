// The split FFN (KAIROX §5, Fig. 7c–d): per decode step and layer, the predicted-active neuron
// groups whose bundles sit in device slots are computed on the device, the others by the CPU's
// SparseFfn at the same time; the two partial sums have disjoint support and meet in one add.
// Which groups hold device slots changes online: after each layer step the device policy
// (lib/policy: TAM on intensity with adaptive λ by default, static / LRU / LFU / Top-K-like TAM
// variants for comparison) plans loads and evictions, and the loads go out on the background
// stream while the next layers compute.
//
// One layer step, on the streams of lib/device:
//   Begin  the groups the device holds and the predictor marks are listed (their slots pinned);
//          (Prepare, one layer ahead, ran the policy: evictions, loads on the background stream)
//          x, the slot list and the masks go up on the critical stream; the compute stream
//          waits for them, clears the partial sum and runs sparse_up_gate then
//          sparse_down_blocks or sparse_down_rows; the critical stream waits for that and
//          copies the partial sum down. The host's bundle view for the CPU has null for every
//          listed group (SparseFfn skips null bundles), so the CPU computes exactly the rest.
//   (the CPU computes its share meanwhile)
//   End    waits for the partial sum (the device stall), adds it to the CPU's y, unpins, feeds
//          the policy (device wait vs CPU compute: the adaptive λ's bottleneck signal) and
//          applies its plan: evictions at once (the slots' readers finished: End waited for
//          them), loads as bundle copies on the background stream, one copy per bundle so a
//          critical copy queued behind them waits at most one bundle on a shared copy engine.
//          A loading group becomes usable at the first Begin of its layer after the copies'
//          event completed; until then the CPU computes it: a miss never stalls.
//
// The merge direction: the device's partial sum is copied back (n_embd floats) and added on
// the host, because the residual stream lives on the host for every layer whose FFN runs
// here (the attention block of a device layer also ends on the host). On the simulated
// PCIe 4.0 profile that is 1536 · 4 B = 6 KiB ≈ 10.3 µs per layer for Qwen 1.5B, dominated
// by the copy latency, the same as sending the host's half up would cost.
//
// Placement at creation: the policy's Place with the sidecar's calibration frequencies
// (for "static": top-K per layer by frequency, PowerInfer's rule; the greedy top-K is the
// 0/1 knapsack's answer here since every bundle of a layer has the same size), copied up on
// the critical stream and waited for.
//
// Bundle loads copy up from a ring of pinned staging buffers (DeviceFfnOptions::
// staging_bundles): the host copies each bundle in, then queues the copy up, which on CUDA is
// asynchronous only from pinned memory.
//
// Under a RAM budget (three tiers: device slots ← RAM slots ← sidecar file) the CPU's bundles
// come from the RAM tier, which is asked only for the groups the device does not hold
// (HostMasks); device loads then copy from the RAM tier's pointers, which are valid only in
// this step: into the staging ring at once, or (without the ring) straight up, and then End
// waits for those copies before the tier may reuse its buffers.
//
// Usage (engine-internal; sparse_runtime.cc):
//   KX_ASSIGN_OR_RETURN(auto dffn, DeviceFfn::Create(device, sidecar, options));
//   per decode step, layer l:
//     dffn->Begin(l, masks, x, threshold, host_bundles, cpu_bundles);  // cpu_bundles: n_groups
//     ... SparseFfn over cpu_bundles → y ...
//     dffn->End(l, y);
// Not thread-safe: one decode step at a time (the engine's).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/device.h"
#include "kernels/cpu/kernels.h"
#include "model/llama.h"
#include "policy/policy.h"
#include "policy/residency.h"
#include "sparse/sidecar.h"

namespace kx {

struct DeviceFfnOptions {
  // VRAM for bundle slots, all layers together (slots per layer = this ÷ (layers × bundle
  // stride), at most the layer's groups). 0: no slots (every group on the CPU).
  uint64_t slot_bytes = 0;
  std::string policy = "tam-adaptive";
  // Activity is intensity and the τ filter applies to every candidate: a device miss is
  // computed where it lives (policy/policy.h), so only lasting use earns a transfer.
  policy::PolicyOptions policy_options;
  // Bytes of bundle loads one layer step may queue (the policy's window); 0: unlimited.
  uint64_t max_load_bytes_per_step = 0;
  // CSV, one line per layer step: token, layer, λ, resident, needed, on device, loads,
  // evictions, bytes loaded, device wait and CPU compute ns, then the stall tags (gpu_ns,
  // h2d_critical_ns, h2d_background_ns, disk_ns, other_ns) and the device-timed parts
  // (upload_ns, compute_ns, download_ns), then the dual thresholds' columns (theta_g,
  // theta_c, gained, dropped, clamped; empty without --dual-threshold); docs/device.md.
  // "": none.
  std::string log_path;
  // Bundle loads pass through a ring of this many pinned, bundle-sized buffers: the host
  // copies the bundle in (from the mapped sidecar or the RAM tier's buffer) and the copy up
  // reads pinned memory. On CUDA a copy from pageable memory is staged by the driver itself,
  // synchronously for the host; from pinned memory it is asynchronous. Under three tiers the
  // RAM tier's buffer is free as soon as the load is queued, so End no longer waits for the
  // loads. A buffer is reused once the copy that read it completed (an event per buffer): a
  // step that queues more loads than the ring holds waits for the oldest (staging_wait_ns).
  // At most twice the slots per layer are used; a host budget too small for the ring halves
  // it, down to 2 buffers, then loads copy directly (a log line says so). 0: copy directly.
  int staging_bundles = 32;
  // Tests' negative control: reuse a staging buffer without waiting for its copy.
  bool debug_skip_staging_wait = false;
};

// Counters since the last ResetStats.
struct DeviceFfnStats {
  int64_t layer_steps = 0;
  int64_t groups_needed = 0;      // predicted-active groups
  int64_t groups_on_device = 0;   // of those, computed on the device (resident at Begin)
  int64_t neurons_on_device = 0;  // predicted neurons the device computed
  int64_t neurons_needed = 0;     // predicted neurons in all
  int64_t loads = 0;              // bundles copied up (reloads)
  int64_t evictions = 0;
  int64_t bytes_loaded = 0;
  int64_t device_wait_ns = 0;   // End waited for the device's partial sum (GPU compute + copies)
  int64_t cpu_ns = 0;           // Begin → End: the CPU's share (and whatever ran beside it)
  int64_t load_wait_ns = 0;     // three tiers: End waited for loads from the RAM tier's buffers
  int64_t staged_loads = 0;     // bundle loads that went through the pinned staging ring
  int64_t staging_wait_ns = 0;  // the host waited for a staging buffer's copy before reusing it
  // The stall tags (docs/device.md, "Where the time goes"): each layer step's host time,
  // cpu_ns + device_wait_ns + load_wait_ns + disk_ns, charged to exactly one of cpu_ns,
  // gpu_ns, h2d_critical_ns, h2d_background_ns, disk_ns and other_ns (they add up to it).
  // device_wait_ns is split over the device's timed parts from the last one back (the
  // partial sum's download, the kernels, the upload, the upload's wait behind a bundle load);
  // what the parts do not cover is other_ns.
  int64_t gpu_ns = 0;             // End waited for the kernels
  int64_t h2d_critical_ns = 0;    // ... for the critical copies: x etc. up, the partial sum down
  int64_t h2d_background_ns = 0;  // ... for an upload queued behind bundle loads; + load_wait_ns
  int64_t disk_ns = 0;            // three tiers: the RAM tier waited for the sidecar's reads
  int64_t other_ns = 0;           // End's wait beyond the timed parts (wake-up, the merge add)
  // Device-timed durations (timing events), whether or not the host waited for them.
  int64_t upload_ns = 0;           // critical stream: x, slot list, masks (with any queueing)
  int64_t compute_ns = 0;          // compute stream: clear, sparse_up_gate, sparse_down_*
  int64_t download_ns = 0;         // critical stream: partial sum and kept bits
  int64_t timed_steps = 0;         // steps whose parts were timed (device work, events read)
  int64_t load_batches_timed = 0;  // background: batches of bundle loads timed
  int64_t load_ns = 0;             //   their time on the background stream (first copy → last)
  int64_t load_bytes_timed = 0;    //   and bytes
};

// The last step of one layer: what --device-log and a trace's per-layer statistics report.
struct DeviceFfnLayerStep {
  int64_t needed = 0;     // predicted-active groups
  int64_t on_device = 0;  // of those, computed on the device (resident at Begin)
  int64_t loads = 0;      // the plan of the step's Prepare: bundles queued,
  int64_t evictions = 0;  //   groups evicted,
  int64_t bytes = 0;      //   bytes queued
  int64_t wait_ns = 0;    // End waited for the device's partial sum
  int64_t cpu_ns = 0;     // Begin → End: the CPU's share
  // The stall tags and timed parts of this step (DeviceFfnStats; h2d_background_ns includes
  // the step's load wait under three tiers).
  int64_t gpu_ns = 0, h2d_critical_ns = 0, h2d_background_ns = 0, disk_ns = 0, other_ns = 0;
  int64_t upload_ns = 0, compute_ns = 0, download_ns = 0;
};

// One policy step as the split FFN applied it (DeviceFfn::set_record_plans): tests compare
// the sequence with a replay of the same trace (kairox-sim, tests/sim/test_sim_engine.cc).
struct DeviceFfnPlanRecord {
  int64_t token = 0;  // decode steps the DeviceFfn had finished (End of the last layer)
  int layer = 0;
  std::vector<int32_t> load;   // in plan order (the order the slots were taken)
  std::vector<int32_t> evict;  // in plan order
  // Loads of this layer still in flight when the policy planned (their copies' event had not
  // completed): a replay with a link that always lands them in time sees 0 here.
  int loading = 0;
};

class DeviceFfn {
 public:
  // Device memory besides the slots: x, the partial sum, slot and mask lists, coefficients
  // and the down projection's workspace (the largest a step can need).
  static uint64_t ScratchBytes(const sparse::Sidecar& sidecar);
  // The bytes of one slot (a bundle's stride).
  static uint64_t SlotBytes(const sparse::Sidecar& sidecar);

  // Reserves scratch and slots from the device's VRAM budget ("FFN scratch", "FFN bundles")
  // and pinned staging from its host budget, checks the device has the sparse ops, and
  // uploads the initial placement. `device` and `sidecar` must outlive the DeviceFfn.
  // `kernels`: the CPU's kernel table; the device is given x in the 16-bit form the CPU's
  // gate kernels see (see Begin), so both sides make the same keep decisions.
  static absl::StatusOr<std::unique_ptr<DeviceFfn>> Create(Device& device,
                                                           const sparse::Sidecar& sidecar,
                                                           const cpu::KernelTable& kernels,
                                                           FfnActivation act, float act_threshold,
                                                           const DeviceFfnOptions& options);
  ~DeviceFfn();

  // The policy's step for `layer` as soon as its predicted groups are known (one layer
  // ahead: adjacent prediction), so its loads overlap the layers before it: plans with the
  // groups' intensities and the last step's feedback, evicts, queues loads on the background
  // stream. Begin does it when the layer was not prepared.
  absl::Status Prepare(int layer, const uint32_t* masks);
  // Starts the device's share of `layer`'s FFN for one token. masks[g]: the predicted neurons
  // of group g (n_groups entries). x: the FFN input (n_embd floats, host). host_bundles[g]:
  // where group g's bundle is on the host (null where it is not available: a skipped tier
  // miss). Writes cpu_bundles[g] = host_bundles[g], or null for each group the device
  // computes. x and masks may change after Begin returns (they are copied).
  // The device gets x as the CPU's gate kernels see it — quantized to the kernel table's
  // 16-bit activation blocks (BlockQ16A) and expanded back to floats — not x itself, so the
  // two sides' gate values differ only by the rounding of their sums and a group's result
  // does not depend on where it is computed beyond that. Even that much moves the CATS cut
  // |act(gate·x)| > t for neurons at the threshold, and the flips grow through the layers:
  // on SmolLM2 at sparsity 0.3 the CPU alone with 1 vs 2 threads (sums in another order)
  // gave a paragraph perplexity of 29.48 vs 28.77; the split FFN at 100 % gave 29.34.
  absl::Status Begin(int layer, const uint32_t* masks, const float* x, float threshold,
                     const uint8_t* const* host_bundles, const uint8_t** cpu_bundles);
  // Waits for the device's share, y[e] += its partial sum (n_embd floats), then balances.
  absl::Status End(int layer, float* y);
  // Three tiers: the groups the host tier must provide for `layer` — masks with every group
  // resident on the device cleared (loading ones are kept: the CPU computes them unless they
  // land first). Call after Prepare(layer): residency then only grows until the layer's
  // Begin, so a group left out here is on the device by then.
  void HostMasks(int layer, const uint32_t* masks, uint32_t* out) const;
  // Three tiers: device loads copy from the host tier's buffers, which are valid only until
  // the tier releases the layer; without the staging ring End then waits for them.
  void set_transient_host_bundles(bool transient) { transient_host_ = transient; }
  // Three tiers: the RAM tier's wait for reads in this layer step (before Begin), so the
  // step's stall tags and log line include the disk. Call between Begin's previous End and
  // the next End.
  void NoteDiskWait(int64_t ns) { pending_disk_ns_ = ns; }
  // The decode graph (engine/decode_graph.h) waits for the step's device work through
  // externals, not in End. Between Begin and End: the step's events in stream order — x etc.
  // uploaded (critical), kernels done (compute), partial sum downloaded (critical) — or false
  // when the device has nothing to do in this step (no event recorded for it).
  bool StepEvents(const Event** uploaded, const Event** computed, const Event** returned) const {
    if (active_layer_ < 0 || n_listed_ == 0) return false;
    *uploaded = &uploaded_;
    *computed = &computed_;
    *returned = &returned_;
    return true;
  }
  // The decode graph, three tiers without the staging ring: between Begin and End, the event
  // after this step's bundle loads from the RAM tier's buffers (End waits for them before the
  // tier may reuse the buffers), or null when the step issued none or staged them.
  const Event* StepLoadEvent() const {
    if (active_layer_ < 0 || !LoadsReadHostTier()) return nullptr;
    const LayerState& L = layers_[active_layer_];
    return L.loads_pending ? &L.loaded : nullptr;
  }
  // The decode graph: the CPU's share of this step ended at `ns` (NowNs), before End. End
  // then counts the device wait from there (the graph's stall for the device's externals and
  // End's own), so the stall tags mean what they mean on the pool path.
  void NoteCpuDone(int64_t ns) { cpu_done_ns_ = ns; }
  // The dual thresholds (sparse/dual_threshold.h) of the coming End's step, for its log line.
  void NoteDual(float theta_g, float theta_c, int gained, int dropped, bool clamped) {
    pending_dual_ = {true, theta_g, theta_c, gained, dropped, clamped};
  }

  // Waits until every bundle load queued so far has landed; they become resident at their
  // layer's next Prepare or Begin. Tests: a residency timing that does not depend on how
  // the copies were scheduled.
  absl::Status WaitForLoads();
  // Diagnostics (tests): waits for every queued load, then reads back each slot that holds or
  // is loading a group and compares it with that group's bundle in the mapped sidecar.
  // Returns how many slots differ; FailedPrecondition when the sidecar's bundles are not
  // mapped (under a RAM budget they are read from the file instead).
  absl::StatusOr<int64_t> CountStaleSlots() const;
  // From now on, keeps every plan the policy returns (allocates per step: tests and
  // diagnostics only); false stops and clears.
  void set_record_plans(bool on);
  const std::vector<DeviceFfnPlanRecord>& plan_records() const { return plan_records_; }

  // Neurons the device kept (above the threshold) in the last End.
  int64_t last_kept() const { return last_kept_; }
  int slots_per_layer() const { return slots_per_layer_; }
  // Pinned staging buffers in the ring (0: loads copy from their source directly).
  int staging_bundles() const { return ring_n_; }
  const policy::Policy& policy() const { return *policy_; }
  const policy::Residency& residency() const { return *residency_; }
  const DeviceFfnStats& stats() const { return stats_; }
  // The last step of `layer` (all zero before its first).
  const DeviceFfnLayerStep& last_step(int layer) const { return layers_[layer].last; }
  void ResetStats() { stats_ = DeviceFfnStats{}; }
  // The first device error (sticky).
  const absl::Status& status() const { return status_; }

 private:
  DeviceFfn(Device& device, const sparse::Sidecar& sidecar, const cpu::KernelTable& kernels,
            FfnActivation act, float act_threshold, const DeviceFfnOptions& options);
  absl::Status Init();
  absl::Status InitialPlacement();
  absl::Status RunPrepare(int layer, const uint32_t* masks);
  absl::Status RunBegin(int layer, const uint32_t* masks, const float* x, float threshold,
                        const uint8_t* const* host_bundles, const uint8_t** cpu_bundles);
  absl::Status RunEnd(int layer, float* y);
  absl::Status Balance(int layer);
  // The staging ring (DeviceFfnOptions::staging_bundles), as large as the host budget allows.
  absl::Status InitStagingRing();
  // Queues one bundle load on the background stream: through the staging ring, or directly.
  absl::Status LoadBundle(int layer, int slot, const uint8_t* src);
  // Three tiers without the ring: loads read the RAM tier's buffers until they land, so End
  // (or the decode graph's dev_load external) waits for them.
  bool LoadsReadHostTier() const { return transient_host_ && ring_n_ == 0; }
  // x as the CPU's gate kernels see it (Begin), into dst (n_embd floats).
  void CpuInput(const float* x, float* dst);
  // Moves the layer's loads whose copies landed to resident.
  absl::Status CompleteLoads(int layer);
  uint8_t* SlotPtr(int layer, int slot) const {
    return slots_.as<uint8_t>() +
           (static_cast<uint64_t>(layer) * slots_per_layer_ + static_cast<uint64_t>(slot)) *
               stride_;
  }
  void LogStep(int layer);
  // Bundle loads of `layer` on the background stream, between the two: timing events.
  absl::Status StartLoadBatch(int layer);
  absl::Status EndLoadBatch(int layer);
  // Reads the step's timing events (after End waited for them) and splits the wait.
  void AttributeWait(DeviceFfnLayerStep& step);
  // Adds the layer's last timed batch of bundle loads to the stats (its events completed).
  void TimeLoads(int layer);

  struct LayerState {
    Event loaded;        // recorded on the background stream after the layer's loads
    Event load_started;  // ... before them (timing: the batch's time)
    bool loads_pending = false;
    bool loads_timed = false;   // load_started/loaded hold a batch not yet added to the stats
    int64_t load_bytes = 0;     // that batch's bytes
    bool prepared = false;      // Prepare ran for the coming step
    policy::Feedback feedback;  // of the last completed step
    DeviceFfnLayerStep last;    // for the log and the trace
  };

  Device& device_;
  const sparse::Sidecar& sidecar_;
  const cpu::TypeKernels* gate_kernels_ = nullptr;  // the CPU's, for x's 16-bit form
  std::vector<uint8_t> act_scratch_;                // its prepared activations
  FfnActivation act_;
  float act_threshold_;
  DeviceFfnOptions options_;
  std::unique_ptr<policy::Policy> policy_;
  std::unique_ptr<policy::Residency> residency_;
  int n_layer_ = 0, n_groups_ = 0, gs_ = 0, slots_per_layer_ = 0;
  int64_t n_embd_ = 0;
  uint64_t stride_ = 0;
  bool transient_host_ = false;

  DeviceBuffer slots_;              // n_layer × K bundles
  DeviceBuffer scratch_;            // x, partial, slot list, masks, coef, workspace
  DeviceBuffer staging_;            // pinned: x, slot list, masks (up), partial (down)
  DeviceBuffer ring_;               // pinned: ring_n_ bundles that loads copy up from
  std::vector<Event> ring_events_;  // per ring buffer: after the copy that last read it
  std::vector<uint8_t> ring_used_;  // per ring buffer: a copy read it (its event was recorded)
  int ring_n_ = 0, ring_next_ = 0;
  float* d_x_ = nullptr;
  float* d_partial_ = nullptr;
  uint32_t* d_kept_ = nullptr;
  uint64_t kept_offset_ = 0;  // bytes from partial to kept (both in scratch and in staging)
  int32_t* d_slots_ = nullptr;
  uint32_t* d_masks_ = nullptr;
  float* d_coef_ = nullptr;
  void* d_workspace_ = nullptr;
  uint64_t workspace_bytes_ = 0;
  float* h_x_ = nullptr;
  float* h_partial_ = nullptr;
  uint32_t* h_kept_ = nullptr;
  int32_t* h_slots_ = nullptr;
  uint32_t* h_masks_ = nullptr;
  Event uploaded_, computed_, returned_;  // timing events, with started_: the step's parts
  Event started_;                         // critical stream, before the uploads
  Event bg_tail_;                         // background stream, after the latest bundle loads
  bool bg_busy_ = false;  // bundle loads were in flight at Begin (the upload may queue)
  // The upload's time with no bundle load in flight: running mean and mean deviation over
  // such steps; before any, the device's hints (DeviceInfo) model it.
  static constexpr int kUploadCopies = 3;  // x, slot list, masks
  uint64_t UploadBytes(int n_listed) const {
    return sizeof(float) * static_cast<uint64_t>(n_embd_) +
           (sizeof(int32_t) + sizeof(uint32_t)) * static_cast<uint64_t>(n_listed);
  }
  double upload_base_s_ = 0, upload_dev_s_ = 0;
  int64_t upload_samples_ = 0;
  double upload_hint_bytes_per_s_ = 0, upload_hint_latency_s_ = 0;
  int64_t pending_disk_ns_ = 0;
  int64_t cpu_done_ns_ = 0;  // NoteCpuDone's, for the next End (0: End's own start)
  struct PendingDual {
    bool set = false;
    float theta_g = 0, theta_c = 0;
    int gained = 0, dropped = 0;
    bool clamped = false;
  };
  PendingDual pending_dual_;
  OpRef up_gate_op_, down_op_;

  std::vector<LayerState> layers_;
  // The step in flight (Begin → End).
  int active_layer_ = -1;
  int n_listed_ = 0;
  std::vector<int32_t> pinned_;  // slots pinned while the device reads them
  std::vector<float> intensity_;
  std::vector<const uint8_t*> load_src_;  // per group: where a load of this step copies from
  policy::Plan plan_;
  int64_t begin_ns_ = 0;
  int64_t last_kept_ = 0;
  DeviceFfnStats stats_;
  absl::Status status_;
  std::FILE* log_ = nullptr;
  int64_t tokens_ = 0;  // decode steps finished (End of the last layer)
  bool record_plans_ = false;
  std::vector<DeviceFfnPlanRecord> plan_records_;
};

}  // namespace kx
