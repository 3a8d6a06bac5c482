// One decode token (batch of 1) as a task graph (graph/task_graph.h), built
// once per engine from the model's plan and re-run every token on the
// engine's thread pool (graph/cpu_executor.h). EngineOptions::Executor::kGraph
// selects it; Engine::Impl::ForwardBatch calls Run for single tokens.
//
// The plan, per layer (P = the pool's threads; each P-part node's part i
// computes what thread i of the pool path's pool.Run computes, through the
// same functions, forward_ops.h — so logits are bit-identical):
//   attn_in.l (1)  previous layer's FFN end + residual, attn norm, qkv input prepared
//   qkv.l (P)      Q/K/V rows
//   rope.l (1)     biases, q/k norms, RoPE, KV cache store
//   attn.l (P)     attention heads
//   wo_in.l (1)    attention output prepared
//   wo.l (P)       attn_out rows
//   ffn_in.l (1)   residual, FFN norm, predictor (sparse: SparseRuntime::OnFfnInput,
//                  which under a RAM tier also starts the next layer's reads), then
//                  dense: gate/up input prepared; bundles: SparseRuntime::BeginBundles
//   under a RAM tier, ffn_in.l instead ends by asking the tier to notify when layer l's
//   reads landed (BundleTier::NotifyWhenRead; they were started in ffn_in.l-1), and
//   disk.l (external, tag disk; signalled from the I/O completion) → sffn_in.l (1:
//   BeginBundles, whose Acquire then finds the bytes there) run before the FFN's parts, so
//   the executor charges the wait for the reads to the disk tag
//   dense:   gate_up.l (P) → act.l (1: activation, down input) → down.l (P); without an
//            FfnHook (no sparse runtime) gate_up.l's parts also take the activation and down's
//            input of their own elements (RunGateUpActRange) and there is no act.l
//   bundles: sffn.l (P: SparseFfn phase 0) → sffn_mid.l (1) → sffn_down.l (P: phase 1)
//   split FFN (a device FFN beside the bundles): ffn_in.l's BeginBundles starts the
//   device's share; three externals dev_up.l → dev_gpu.l → dev_down.l (tags H2D critical,
//   GPU, H2D critical) depend on the node running BeginBundles and are signalled by a DeviceWatch
//   thread when the step's upload, kernel and download events complete; sffn_down.l → sffn_done.l
//   (1: the CPU share's end time) and the next layer's attn_in (End: merge) waits for both
//   sffn_done.l and dev_down.l. So the CPU's share of layer l runs beside the device's share
//   and the background loads Prepare(l+1) queued in ffn_in.l, and a stall for the device is
//   charged to the part it waited for (DecodeGraphStats). Under three tiers (a RAM tier too)
//   the step's bundle loads copy from the tier's buffers, issued by Begin; a fourth external
//   dev_load.l (tag H2D background), signalled when they landed, also precedes the merge.
// Device layers (DeviceLayers: -ngl, the attention block of the first layers and the head
// on the device): a device layer's attn_in.l ends the previous layer's FFN and enqueues the
// attention block (upload of x, kernels, download into x: BeginAttentionBlock); three
// externals dattn_up.l → dattn_gpu.l → dattn_down.l (tags H2D critical, GPU, H2D critical)
// follow it, signalled by the DeviceWatch thread as the step's events complete, and
// ffn_in.l waits for attn_in.l and dattn_down.l (EndStep: the status, then the FFN's norm).
// The CPU's qkv … wo nodes of that layer do not exist. So the pool threads sleep while the
// device works (the RAM tier's reads and the split FFN's background loads go on) and the
// stall is charged to the part of the step it waited for.
// then out (1: last FFN end, output norm, head input) → head (P: lm head rows); with the
// head on the device, out enqueues it (BeginHead) → dhead_up → dhead_gpu → dhead_down →
// head_done (1: EndStep). The softcap runs on the caller after the graph.
// With P >= 2 the matvec nodes (qkv, wo, gate_up, down, head) steal: each part owns a
// contiguous range of the node's rows in units of ~kStealUnitBytes of weights, takes them from
// its front, then takes units from the back of the other parts' ranges (graph/part_ranges.h),
// so a thread on a slower core does not hold the other at the join; a row is still computed
// by one kernel call, the same bits whichever thread computes it (docs/dag.md).
// Every node depends on the one before (a chain: each op reads what the previous one
// wrote); the next layer's predictor runs inside ffn_in (decode_graph.cc says why it is not a
// node of its own). Under a tier the predictor also starts reads (BundleTier::Prepare), which
// must not race with the FFN's Acquire/Release: the chain orders them.

//
// Profiling: the one-part nodes of the chain take timestamps and attribute
// the time since the previous one's end to the P-part op in between (so
// OpProfile keeps working; a P-part op's time includes its dispatch). Costs a
// few NowNs per node.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/device_watch.h"
#include "engine/engine_impl.h"
#include "engine/forward_ops.h"
#include "graph/cpu_executor.h"
#include "graph/part_ranges.h"
#include "graph/task_graph.h"

namespace kx {

class DecodeGraph {
 public:
  // Builds the plan for m's model, options and sparse runtime (null: dense).
  static absl::StatusOr<std::unique_ptr<DecodeGraph>> Create(Engine::Impl& m);
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  // Whether the plan still fits the engine (the sparse runtime may stop
  // using bundles, e.g. when its trace fails); if not, build a new one.
  bool Current() const;
  // Units the stealable nodes' parts took from other parts' ranges, over every run so far.
  int64_t stolen_units() const;

  // Evaluates `token` at position m.n_past (does not advance it); writes the
  // logits (n_vocab) to logits_dst unless it is null. Needs the pool hot.
  void Run(int32_t token, float* logits_dst);

  const graph::TaskGraph& graph() const { return g_; }
  // The last Run's executor counters (graph/cpu_executor.h).
  const graph::RunStats& last_stats() const { return stats_; }
  // Stalls summed over runs, by tag (engine.h); kept when the plan has externals.
  const DecodeGraphStats& stall_stats() const { return stall_; }
  void ResetStallStats() { stall_ = DecodeGraphStats{}; }
  // Whether the plan has the split FFN's device externals.
  bool split() const { return split_; }
  // Whether the plan has externals (device or disk): stall_stats() is kept.
  bool has_externals() const { return split_ || device_steps_ || tier_ != nullptr; }
  ~DecodeGraph();

 private:
  // What one part of a fused gate_up.l took: its activation's ns and its end (for the profile).
  struct alignas(64) PartStamp {
    int64_t act_ns = 0;
    int64_t end_ns = 0;
  };
  // A P-part matvec node's work in stealable units (graph/part_ranges.h): rows of its plan
  // (the fused gate_up: n_ff elements, each a row of gate and one of up).
  struct Stealable {
    graph::PartRanges ranges;
    int64_t n = 0;     // rows (elements) in all
    int64_t unit = 1;  // rows (elements) per unit: a multiple of the node's alignment
    int64_t n_units() const { return (n + unit - 1) / unit; }
  };
  struct Layer {
    DecodeGraph* self = nullptr;
    int l = 0;
    LinearPlan qkv, wo, gate_up, down;
    Stealable qkv_s, wo_s, gate_up_s, down_s;
    AttnPlan attn;
    int ffn_parts = 1;  // bundles: parts of the sparse FFN's nodes
    int dev_up = -1;    // split FFN: the first of the externals dev_up, dev_gpu, dev_down
    int disk = -1;      // RAM tier: the external its reads' landing signals
    int dev_load = -1;  // three tiers: the external the step's bundle loads signal
    int dattn_up = -1;  // device layer: the first of the externals dattn_up, _gpu, _down
    std::vector<PartStamp> gate_up_stamps;  // fused_act_: one per part of gate_up.l
  };

  explicit DecodeGraph(Engine::Impl& m);
  absl::Status Build();

  // Units for n rows (elements) of row_bytes bytes each, in multiples of align rows.
  void PlanSteal(int64_t n, int64_t row_bytes, int64_t align, Stealable* s) const;
  // Part `part` of a stealable node: fn(begin, end) for each unit of rows it takes (its own,
  // then stolen ones); with one part, fn(0, n) once.
  template <class Fn>
  void RunStealing(Stealable& s, int part, int n_parts, Fn&& fn) const;
  // Arms every stealable node's ranges for the next run.
  void ArmSteal();
  // A linear node's part: RunLinearRows over the units it takes.
  void RunLinearStealing(const LinearPlan& p, Stealable& s, int part, int n_parts) const;

  // Adds time since the last mark to op (with `calls` more calls) and moves the mark.
  void Mark(Op op, int calls = 1);
  // The same up to `until` instead of now (clamped to the last mark).
  void MarkAt(Op op, int64_t until, int calls);
  // The end of layer l's FFN (one-part nodes after it): sparse finish, residual.
  void FfnEnd(int l);
  // Split FFN, after Begin: hands the step's events to the watcher (or, with no device work
  // in the step, signals the layer's externals at once).
  void WatchDevice(const Layer& L);
  // BeginBundles, then the device's externals (in ffn_in.l, or sffn_in.l under a tier).
  void BeginFfn(const Layer& L);
  // The tier's read notify (BundleTier::ReadNotify): signals disk.layer.
  static void OnBundlesRead(void* ctx, int layer);
  // Device layers: enqueues layer's attention block (layer >= 0) or the head (-1) and hands
  // its events to the watcher for the externals first, first + 1, first + 2 (or, when the
  // step enqueued nothing — a device error —, signals them at once).
  void BeginDeviceStep(int first, int layer);
  // In the node after the externals: waits for the step (its status is kept by DeviceLayers
  // and returned by Eval) and counts an early signal; charges the time since the last mark.
  void EndDeviceStep(Op op);

  // Node functions (graph::TaskFn); ctx is a Layer* except for the whole-token nodes.
  static void EmbedNode(void* ctx, int part, int n_parts);
  static void AttnInNode(void* ctx, int part, int n_parts);
  static void QkvNode(void* ctx, int part, int n_parts);
  static void RopeNode(void* ctx, int part, int n_parts);
  static void AttnNode(void* ctx, int part, int n_parts);
  static void WoInNode(void* ctx, int part, int n_parts);
  static void WoNode(void* ctx, int part, int n_parts);
  static void FfnInNode(void* ctx, int part, int n_parts);
  static void GateUpNode(void* ctx, int part, int n_parts);
  static void GateUpActNode(void* ctx, int part, int n_parts);
  static void ActNode(void* ctx, int part, int n_parts);
  static void DownNode(void* ctx, int part, int n_parts);
  static void SparseBeginNode(void* ctx, int part, int n_parts);
  static void SparsePhase0Node(void* ctx, int part, int n_parts);
  static void SparseMidNode(void* ctx, int part, int n_parts);
  static void SparsePhase1Node(void* ctx, int part, int n_parts);
  static void SparseDoneNode(void* ctx, int part, int n_parts);
  static void OutNode(void* ctx, int part, int n_parts);
  static void HeadNode(void* ctx, int part, int n_parts);
  static void HeadDoneNode(void* ctx, int part, int n_parts);

  Engine::Impl& m_;
  bool bundles_ = false;                // the FFN runs on the sparse runtime's bundles
  bool fused_act_ = false;              // dense, no FfnHook: gate_up.l's parts do act.l's work
  bool split_ = false;                  // ... split with the device (DeviceFfn): device externals
  bool device_steps_ = false;           // device layers or the head: device externals
  int dhead_up_ = -1;                   // the head on the device: its first external
  std::unique_ptr<DeviceWatch> watch_;  // split_ or device_steps_: signals the externals
  BundleTier* tier_ = nullptr;          // the RAM tier whose reads are disk externals
  DecodeGraphStats stall_;
  int n_parts_ = 1;
  graph::TaskGraph g_;
  graph::CpuExecutor exec_;
  std::vector<Layer> layers_;
  LinearPlan head_;
  Stealable head_s_;
  int64_t steal_unit_bytes_ = 0;  // weights per stealable unit
  graph::RunStats stats_;
  // Per token, written before the run (or by serial nodes, ordered by the graph).
  int32_t token_ = 0;
  float* logits_ = nullptr;
  int64_t mark_ns_ = 0;
};

}  // namespace kx
