#include "engine/decode_graph.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/timer.h"
#include "kernels/cpu/kernels.h"

namespace kx {
namespace {

// The nodes of a layer are named "<what>.<layer>"; TaskGraph keeps the names.
std::string Name(const char* what, int l) { return absl::StrCat(what, ".", l); }

// Weights per stealable unit of a matvec node (docs/dag.md): large, so that an owner's claim
// (one uncontended compare-and-swap) and a kernel call's set-up (its activations' preparation,
// 35 super-blocks for Qwen 1.5B's FFN down) are small against the unit's stream (~20 us at
// 13 GB/s), and small enough against the joins' measured imbalance (gate_up's parts ended
// ~74 us apart, ~1 MB of weights; the head's ~540 us) to even it out.
constexpr int64_t kStealUnitBytes = 256 << 10;
// Rows per unit are a multiple of kRowAlign (forward_ops.h), as in the static split; the
// fused gate_up's units are whole 32-element blocks of n_ff (cpu::kQ16ABlock, a multiple of it).

// Bytes per row of a plan's jobs, on average (Q/K/V may mix weight types).
int64_t RowBytes(const LinearPlan& p) {
  int64_t bytes = 0;
  for (int j = 0; j < p.n_jobs; ++j) {
    bytes += p.jobs[j].w->n_out * static_cast<int64_t>(p.jobs[j].w->row_bytes);
  }
  return p.total_rows > 0 ? bytes / p.total_rows : 1;
}

}  // namespace

DecodeGraph::DecodeGraph(Engine::Impl& m) : m_(m), exec_(*m.pool) {}

DecodeGraph::~DecodeGraph() {
  // The engine destroys its graph before its sparse runtime, so the tier is still there.
  // A replacement graph may already have set its own notify.
  if (tier_ != nullptr && tier_->read_notify_ctx() == this) {
    tier_->SetReadNotify(nullptr, nullptr);
    tier_->SetLogTokenStalls(false);
  }
}

absl::StatusOr<std::unique_ptr<DecodeGraph>> DecodeGraph::Create(Engine::Impl& m) {
  std::unique_ptr<DecodeGraph> g(new DecodeGraph(m));
  KX_RETURN_IF_ERROR(g->Build());
  return g;
}

namespace {
// Whether the engine's decode FFN is split with the device (see the plan in the header).
bool SplitFfn(const Engine::Impl& m, bool bundles) {
  return bundles && m.device_ffn != nullptr && m.sparse->device_ffn() == m.device_ffn.get() &&
         m.device != nullptr;
}
}  // namespace

bool DecodeGraph::Current() const {
  const bool bundles = m_.sparse != nullptr && m_.sparse->UsesBundles(1);
  return bundles_ == bundles && split_ == SplitFfn(m_, bundles);
}

absl::Status DecodeGraph::Build() {
  Engine::Impl& m = m_;
  const LlamaHParams& hp = m.hp;
  const int d = hp.n_embd, ff = hp.n_ff, qd = hp.q_dim(), kvd = static_cast<int>(m.kv_dim);
  bundles_ = m.sparse != nullptr && m.sparse->UsesBundles(1);
  split_ = SplitFfn(m, bundles_);
  if (bundles_ && m.sparse->tier() != nullptr && m.options.graph_tier_externals) {
    tier_ = m.sparse->tier();
    tier_->SetReadNotify(&OnBundlesRead, this);
    tier_->SetLogTokenStalls(true);
  }
  device_steps_ = m.device != nullptr && (m.device->n_layers() > 0 || m.device->head());
  if (split_ || device_steps_) {
    watch_ = std::make_unique<DeviceWatch>(m.device->device());
    watch_->set_debug_signal_early(m.options.debug_graph_signal_early);
  }
  n_parts_ = m.pool->size();
  const int P = n_parts_;
  steal_unit_bytes_ =
      m.options.debug_steal_unit_bytes > 0 ? m.options.debug_steal_unit_bytes : kStealUnitBytes;
  // FfnActStage's hook is the sparse runtime (masked-dense masks the activations there).
  // Its parts prepare down's input while other parts still read gate/up's, so down's goes to
  // the act scratch's second token row, which a batch size of 1 does not have.
  fused_act_ = !bundles_ && m.sparse == nullptr && m.n_batch >= 2;

  layers_.resize(hp.n_layer);  // never resized again: nodes hold Layer pointers
  int prev = g_.Add(EmbedNode, this, 1, "embed");
  // More predecessors for the next node (the device's last externals, the disk external).
  int join = -1, join2 = -1;
  auto chain = [&](graph::TaskFn fn, void* ctx, int parts, const std::string& name) {
    const int id = g_.Add(fn, ctx, parts, name.c_str());
    g_.Depend(prev, id);
    if (join >= 0) g_.Depend(join, id);
    if (join2 >= 0) g_.Depend(join2, id);
    join = join2 = -1;
    prev = id;
  };
  auto external = [&](int after, const char* what, int l, int tag) {
    const int id = g_.AddExternal(l >= 0 ? Name(what, l).c_str() : what);
    g_.SetTag(id, tag);
    g_.Depend(after, id);
    return id;
  };
  for (int l = 0; l < hp.n_layer; ++l) {
    Layer& L = layers_[l];
    const LlamaLayerWeights& W = m.w.layers[l];
    L.self = this;
    L.l = l;
    const LinearJob qkv[] = {
        {&W.wq, m.q.data(), qd}, {&W.wk, m.k.data(), kvd}, {&W.wv, m.v.data(), kvd}};
    PlanLinear(m, 1, qkv, 3, &L.qkv);
    const LinearJob wo[] = {{&W.wo, m.ffo.data(), d}};
    PlanLinear(m, 1, wo, 1, &L.wo);
    const LinearJob gate_up[] = {{&W.ffn_gate, m.gate.data(), ff}, {&W.ffn_up, m.up.data(), ff}};
    PlanLinear(m, 1, gate_up, 2, &L.gate_up);
    const LinearJob down[] = {{&W.ffn_down, m.ffo.data(), d}};
    PlanLinear(m, 1, down, 1, &L.down, fused_act_ ? 1 : 0);
    PlanSteal(L.qkv.total_rows, RowBytes(L.qkv), kRowAlign, &L.qkv_s);
    PlanSteal(L.wo.total_rows, RowBytes(L.wo), kRowAlign, &L.wo_s);
    if (fused_act_) {
      // A unit is n_ff elements: a row of gate and one of up each.
      PlanSteal(ff, 2 * RowBytes(L.gate_up), cpu::kQ16ABlock, &L.gate_up_s);
    } else {
      PlanSteal(L.gate_up.total_rows, RowBytes(L.gate_up), kRowAlign, &L.gate_up_s);
    }
    PlanSteal(L.down.total_rows, RowBytes(L.down), kRowAlign, &L.down_s);

    chain(AttnInNode, &L, 1, Name("attn_in", l));
    if (m.device != nullptr && m.device->OnDevice(l)) {
      // The attention block on the device; ffn_in.l (the next node) waits for its download.
      // Ids are consecutive: BeginDeviceStep relies on it.
      L.dattn_up = external(prev, "dattn_up", l, DecodeGraphStats::kH2dCritical);
      const int gpu = external(L.dattn_up, "dattn_gpu", l, DecodeGraphStats::kGpu);
      join = external(gpu, "dattn_down", l, DecodeGraphStats::kH2dCritical);
      KX_CHECK(gpu == L.dattn_up + 1 && join == L.dattn_up + 2);
    } else {
      chain(QkvNode, &L, P, Name("qkv", l));
      chain(RopeNode, &L, 1, Name("rope", l));
      chain(AttnNode, &L, P, Name("attn", l));
      chain(WoInNode, &L, 1, Name("wo_in", l));
      chain(WoNode, &L, P, Name("wo", l));
    }
    chain(FfnInNode, &L, 1, Name("ffn_in", l));
    if (bundles_ && tier_ != nullptr) {
      // The FFN starts once the layer's reads landed (the external) and ffn_in.l ran.
      L.disk = external(prev, "disk", l, DecodeGraphStats::kDisk);
      join = L.disk;
      chain(SparseBeginNode, &L, 1, Name("sffn_in", l));
    }
    const int ffn_begin = prev;  // the node that runs BeginBundles (the device's Begin)
    if (bundles_) {
      // The next layer's predictor runs in ffn_in, before the FFN's parts.
      // As its own node beside them it was slower (SmolLM2, 2 threads: tg
      // 0.96-0.97x; the thread running it leaves the others an uneven share
      // of the fused kernel's chunks), so there is no such node.
      L.ffn_parts = P;
      chain(SparsePhase0Node, &L, L.ffn_parts, Name("sffn", l));
      chain(SparseMidNode, &L, 1, Name("sffn_mid", l));
      chain(SparsePhase1Node, &L, L.ffn_parts, Name("sffn_down", l));
      if (split_) {
        // Nothing of the CPU's share waits for the device; the merge (the next node) waits
        // for both. Ids are consecutive: WatchDevice relies on it.
        chain(SparseDoneNode, &L, 1, Name("sffn_done", l));
        L.dev_up = external(ffn_begin, "dev_up", l, DecodeGraphStats::kH2dCritical);
        const int gpu = external(L.dev_up, "dev_gpu", l, DecodeGraphStats::kGpu);
        join = external(gpu, "dev_down", l, DecodeGraphStats::kH2dCritical);
        KX_CHECK(gpu == L.dev_up + 1 && join == L.dev_up + 2);
        if (tier_ != nullptr && m_.device_ffn->staging_bundles() == 0) {
          // Three tiers without the staging ring: the step's bundle loads copy from the RAM
          // tier's buffers, so End (the merge) waits for them before the tier may reuse them.
          // Through the ring (DeviceFfn) they are copied out at once: nothing to wait for.
          L.dev_load = external(ffn_begin, "dev_load", l, DecodeGraphStats::kH2dBackground);
          join2 = L.dev_load;
        }
      }
    } else if (fused_act_) {
      KX_CHECK(L.gate_up.n_jobs == 2 && L.gate_up.total_rows == 2 * static_cast<int64_t>(ff) &&
               L.down.n_in == ff);
      L.gate_up_stamps.assign(static_cast<size_t>(P), PartStamp{});
      chain(GateUpActNode, &L, P, Name("gate_up", l));
      chain(DownNode, &L, P, Name("down", l));
    } else {
      chain(GateUpNode, &L, P, Name("gate_up", l));
      chain(ActNode, &L, 1, Name("act", l));
      chain(DownNode, &L, P, Name("down", l));
    }
  }
  const LinearJob head[] = {{&m.w.output, nullptr, hp.n_vocab}};  // dst: set per token
  PlanLinear(m, 1, head, 1, &head_);
  PlanSteal(head_.total_rows, RowBytes(head_), kRowAlign, &head_s_);
  chain(OutNode, this, 1, "out");
  if (m.device != nullptr && m.device->head()) {
    dhead_up_ = external(prev, "dhead_up", -1, DecodeGraphStats::kH2dCritical);
    const int gpu = external(dhead_up_, "dhead_gpu", -1, DecodeGraphStats::kGpu);
    join = external(gpu, "dhead_down", -1, DecodeGraphStats::kH2dCritical);
    KX_CHECK(gpu == dhead_up_ + 1 && join == dhead_up_ + 2);
    chain(HeadDoneNode, this, 1, "head_done");
  } else {
    chain(HeadNode, this, P, "head");
  }
  return g_.Finalize();
}

void DecodeGraph::PlanSteal(int64_t n, int64_t row_bytes, int64_t align, Stealable* s) const {
  s->ranges.Init(n_parts_);
  s->n = n;
  const int64_t rows = std::max<int64_t>(1, steal_unit_bytes_ / std::max<int64_t>(1, row_bytes));
  s->unit = (rows + align - 1) / align * align;
}

void DecodeGraph::ArmSteal() {
  if (n_parts_ == 1) return;  // RunStealing does not take units
  for (Layer& L : layers_) {
    for (Stealable* s : {&L.qkv_s, &L.wo_s, &L.gate_up_s, &L.down_s}) s->ranges.Arm(s->n_units());
  }
  head_s_.ranges.Arm(head_s_.n_units());
}

int64_t DecodeGraph::stolen_units() const {
  int64_t n = head_s_.ranges.stolen();
  for (const Layer& L : layers_) {
    n += L.qkv_s.ranges.stolen() + L.wo_s.ranges.stolen() + L.gate_up_s.ranges.stolen() +
         L.down_s.ranges.stolen();
  }
  return n;
}

template <class Fn>
void DecodeGraph::RunStealing(Stealable& s, int part, int n_parts, Fn&& fn) const {
  if (n_parts == 1) {
    fn(int64_t{0}, s.n);
    return;
  }
  int64_t u;
  const int delay_us = part == 0 ? m_.options.debug_steal_delay_us : 0;
  while (s.ranges.TakeOwn(part, &u)) {
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    fn(u * s.unit, std::min(s.n, (u + 1) * s.unit));
  }
  while (s.ranges.Steal(part, &u)) fn(u * s.unit, std::min(s.n, (u + 1) * s.unit));
}

void DecodeGraph::RunLinearStealing(const LinearPlan& p, Stealable& s, int part,
                                    int n_parts) const {
  RunStealing(s, part, n_parts, [&](int64_t begin, int64_t end) { RunLinearRows(p, begin, end); });
}

void DecodeGraph::Run(int32_t token, float* logits_dst) {
  token_ = token;
  logits_ = logits_dst;
  // Before Reset: its release (and the pool's start) publishes the ranges to the parts.
  ArmSteal();
  g_.Reset();
  mark_ns_ = NowNs();
  stats_ = exec_.Run(g_);
  // Every external was signalled (Run returned), but the watcher may still be inside its
  // last Signal call: the next Reset must not overlap it. (A disk external's Signal returned
  // before its layer's Acquire did: Acquire waits for the event whose callback signals.)
  if (watch_ != nullptr) watch_->Drain();
  if (has_externals()) {
    stall_.runs += 1;
    stall_.wall_ns += stats_.wall_ns;
    stall_.external_wait_ns += stats_.external_wait_ns;
    const std::vector<int64_t>& by_tag = exec_.external_wait_by_tag();
    for (size_t t = 0; t < by_tag.size() && t < DecodeGraphStats::kTags; ++t) {
      stall_.wait_ns[t] += by_tag[t];
    }
    if (tier_ != nullptr) {
      int64_t token[BundleTier::kTokenStallColumns] = {stats_.wall_ns - stats_.external_wait_ns};
      for (int t = 0; t < DecodeGraphStats::kTags; ++t) {
        token[1 + t] = static_cast<size_t>(t) < by_tag.size() ? by_tag[t] : 0;
      }
      tier_->LogTokenStalls(token);
    }
  }
  if (logits_ != nullptr) {
    Mark(Op::kLmHead, 0);  // the head's parts, since the out node
    SoftcapStage(m_, logits_, 1);
    Mark(Op::kLmHead, 0);
  }
}

void DecodeGraph::Mark(Op op, int calls) {
  const int64_t now = NowNs();
  const int i = static_cast<int>(op);
  m_.op_ns[i] += now - mark_ns_;
  m_.op_calls[i] += calls;
  mark_ns_ = now;
}

void DecodeGraph::MarkAt(Op op, int64_t until, int calls) {
  const int i = static_cast<int>(op);
  const int64_t t = std::max(until, mark_ns_);
  m_.op_ns[i] += t - mark_ns_;
  m_.op_calls[i] += calls;
  mark_ns_ = t;
}

void DecodeGraph::FfnEnd(int l) {
  Engine::Impl& m = m_;
  if (bundles_) {
    Mark(Op::kFfnSparse, 0);  // phase 1's parts
    const Event *up, *gpu, *down;
    if (split_ && m.device_ffn->StepEvents(&up, &gpu, &down)) {
      // dev_down.l completed, so the download must have: if not, an external was signalled
      // too early (End's own wait still keeps the result right).
      absl::StatusOr<bool> done = m.device->device().EventQuery(*down);
      if (done.ok() && !*done) ++stall_.early_signals;
    }
    m.sparse->ffn().Finish();
    m.sparse->EndBundles(l);
    Mark(Op::kFfnSparse, 0);
  } else if (fused_act_) {
    // gate_up.l ended with its last part; of its time, the longest part's activation counts
    // as ffn_act (what it added to the node), the rest as the rows; since then, the down rows.
    int64_t end = 0, act = 0;
    for (const PartStamp& st : layers_[l].gate_up_stamps) {
      end = std::max(end, st.end_ns);
      act = std::max(act, st.act_ns);
    }
    MarkAt(Op::kFfnGateUp, end - act, 0);
    MarkAt(Op::kFfnAct, end, 1);
    Mark(Op::kFfnDown);
  } else {
    Mark(Op::kFfnDown, 0);  // the down rows
  }
  FfnResidualStage(m, l, 1);
  Mark(Op::kNorm);
}

// ---- Nodes, in plan order. One-part nodes run alone (the chain), so they
// may touch the engine's serial state; P-part nodes only run their part.

void DecodeGraph::EmbedNode(void* ctx, int, int) {
  auto* self = static_cast<DecodeGraph*>(ctx);
  EmbedStage(self->m_, &self->token_, 1);
  self->Mark(Op::kEmbed);
}

void DecodeGraph::AttnInNode(void* ctx, int, int) {
  Layer& L = *static_cast<Layer*>(ctx);
  DecodeGraph& s = *L.self;
  if (L.l > 0) s.FfnEnd(L.l - 1);
  if (L.dattn_up >= 0) {
    s.BeginDeviceStep(L.dattn_up, L.l);
    return;
  }
  AttnNormStage(s.m_, L.l, 1);
  s.Mark(Op::kNorm);
  PrepareLinear(L.qkv, s.m_.xn.data(), s.m_.hp.n_embd);
  s.Mark(Op::kQkv);
}

void DecodeGraph::QkvNode(void* ctx, int part, int n_parts) {
  Layer& L = *static_cast<Layer*>(ctx);
  L.self->RunLinearStealing(L.qkv, L.qkv_s, part, n_parts);
}

void DecodeGraph::RopeNode(void* ctx, int, int) {
  Layer& L = *static_cast<Layer*>(ctx);
  DecodeGraph& s = *L.self;
  QkvBiasStage(s.m_, L.l, 1);
  s.Mark(Op::kQkv, 0);  // the rows and biases
  if (s.m_.hp.qk_norm) {
    QkNormStage(s.m_, L.l, 1);
    s.Mark(Op::kNorm);
  }
  RopeStage(s.m_, L.l, 1);
  PlanAttention(s.m_, L.l, 1, &L.attn);
  s.Mark(Op::kRope);
}

void DecodeGraph::AttnNode(void* ctx, int part, int n_parts) {
  RunAttentionPart(static_cast<Layer*>(ctx)->attn, part, n_parts);
}

void DecodeGraph::WoInNode(void* ctx, int, int) {
  Layer& L = *static_cast<Layer*>(ctx);
  DecodeGraph& s = *L.self;
  FinishAttention(L.attn);
  s.Mark(Op::kAttention);
  PrepareLinear(L.wo, s.m_.attn.data(), s.m_.hp.q_dim());
  s.Mark(Op::kAttnOut);
}

void DecodeGraph::WoNode(void* ctx, int part, int n_parts) {
  Layer& L = *static_cast<Layer*>(ctx);
  L.self->RunLinearStealing(L.wo, L.wo_s, part, n_parts);
}

void DecodeGraph::FfnInNode(void* ctx, int, int) {
  Layer& L = *static_cast<Layer*>(ctx);
  DecodeGraph& s = *L.self;
  Engine::Impl& m = s.m_;
  if (L.dattn_up >= 0) {
    s.EndDeviceStep(Op::kAttention);  // the device added the residual
  } else {
    AttnResidualStage(m, L.l, 1);
    s.Mark(Op::kAttnOut, 0);  // the rows and the residual
  }
  FfnNormStage(m, L.l, 1);
  s.Mark(Op::kNorm);
  if (m.sparse != nullptr) {
    m.sparse->OnFfnInput(L.l, 1, m.xn.data());
    s.Mark(Op::kPredict);
  }
  if (L.disk >= 0) {
    // Layer l's reads were started in ffn_in.l-1 (or just now): disk.l is signalled when
    // they land, and sffn_in.l begins the FFN.
    m.sparse->NotifyWhenBundlesRead(L.l);
    s.Mark(Op::kFfnSparse);
  } else if (s.bundles_) {
    s.BeginFfn(L);
  } else {
    PrepareLinear(L.gate_up, m.xn.data(), m.hp.n_embd);
    s.Mark(Op::kFfnGateUp);
  }
}

void DecodeGraph::GateUpNode(void* ctx, int part, int n_parts) {
  Layer& L = *static_cast<Layer*>(ctx);
  L.self->RunLinearStealing(L.gate_up, L.gate_up_s, part, n_parts);
}

void DecodeGraph::GateUpActNode(void* ctx, int part, int n_parts) {
  Layer& L = *static_cast<Layer*>(ctx);
  DecodeGraph& s = *L.self;
  // Units are n_ff elements: gate's and up's rows, their activation and down's input for them.
  int64_t act_ns = 0;
  s.RunStealing(L.gate_up_s, part, n_parts, [&](int64_t begin, int64_t end) {
    act_ns += RunGateUpActRange(s.m_, L.gate_up, L.down, begin, end);
  });
  L.gate_up_stamps[static_cast<size_t>(part)] = PartStamp{act_ns, NowNs()};
}

void DecodeGraph::ActNode(void* ctx, int, int) {
  Layer& L = *static_cast<Layer*>(ctx);
  DecodeGraph& s = *L.self;
  Engine::Impl& m = s.m_;
  s.Mark(Op::kFfnGateUp, 0);               // the rows
  FfnActStage(m, 1, m.sparse.get(), L.l);  // the sparse runtime masks (masked-dense)
  s.Mark(Op::kFfnAct);
  PrepareLinear(L.down, m.gate.data(), m.hp.n_ff);
  s.Mark(Op::kFfnDown);
}

void DecodeGraph::DownNode(void* ctx, int part, int n_parts) {
  Layer& L = *static_cast<Layer*>(ctx);
  L.self->RunLinearStealing(L.down, L.down_s, part, n_parts);
}

void DecodeGraph::BeginFfn(const Layer& L) {
  Engine::Impl& m = m_;
  m.sparse->BeginBundles(L.l, m.xn.data(), m.ffo.data(), L.ffn_parts);
  if (L.dev_up >= 0) WatchDevice(L);
  Mark(Op::kFfnSparse);  // under a tier this includes the wait for the reads (disk.l)
}

void DecodeGraph::SparseBeginNode(void* ctx, int, int) {
  const Layer& L = *static_cast<Layer*>(ctx);
  L.self->BeginFfn(L);
}

void DecodeGraph::OnBundlesRead(void* ctx, int layer) {
  auto* self = static_cast<DecodeGraph*>(ctx);
  self->g_.Signal(self->layers_[layer].disk);
}

void DecodeGraph::SparsePhase0Node(void* ctx, int part, int n_parts) {
  static_cast<Layer*>(ctx)->self->m_.sparse->ffn().RunPart(0, part, n_parts);
}

void DecodeGraph::SparseMidNode(void* ctx, int, int) {
  DecodeGraph& s = *static_cast<Layer*>(ctx)->self;
  s.m_.sparse->ffn().Between();
}

void DecodeGraph::SparsePhase1Node(void* ctx, int part, int n_parts) {
  static_cast<Layer*>(ctx)->self->m_.sparse->ffn().RunPart(1, part, n_parts);
}

void DecodeGraph::SparseDoneNode(void* ctx, int, int) {
  DecodeGraph& s = *static_cast<Layer*>(ctx)->self;
  s.m_.device_ffn->NoteCpuDone(NowNs());
}

void DecodeGraph::WatchDevice(const Layer& L) {
  const Event *up, *gpu, *down;
  if (m_.device_ffn->StepEvents(&up, &gpu, &down)) {
    watch_->Watch({{up, &g_, L.dev_up}, {gpu, &g_, L.dev_up + 1}, {down, &g_, L.dev_up + 2}});
  } else {
    for (int i = 0; i < 3; ++i) g_.Signal(L.dev_up + i);
  }
  if (L.dev_load >= 0) {
    // Queued after the step's download: a stall past it is charged to the loads.
    if (const Event* loaded = m_.device_ffn->StepLoadEvent(); loaded != nullptr) {
      watch_->Watch({{loaded, &g_, L.dev_load}});
    } else {
      g_.Signal(L.dev_load);
    }
  }
}

void DecodeGraph::BeginDeviceStep(int first, int layer) {
  DeviceLayers& dl = *m_.device;
  // An error is kept by DeviceLayers (sticky); the graph still runs to its end, since its
  // externals are signalled either way, and Eval returns the error.
  if (layer >= 0) {
    (void)dl.BeginAttentionBlock(layer, m_.x.data(), m_.n_past);
  } else {
    (void)dl.BeginHead(m_.x.data(), logits_);
  }
  const Event *up, *gpu, *down;
  if (dl.StepEvents(&up, &gpu, &down)) {
    watch_->Watch({{up, &g_, first}, {gpu, &g_, first + 1}, {down, &g_, first + 2}});
  } else {
    for (int i = 0; i < 3; ++i) g_.Signal(first + i);
  }
  Mark(layer >= 0 ? Op::kAttention : Op::kLmHead, 0);
}

void DecodeGraph::EndDeviceStep(Op op) {
  DeviceLayers& dl = *m_.device;
  const Event *up, *gpu, *down;
  if (dl.StepEvents(&up, &gpu, &down)) {
    // The download's external was signalled, so the download must have landed: if not, it
    // was signalled too early (EndStep's own wait still keeps x right).
    absl::StatusOr<bool> done = dl.device().EventQuery(*down);
    if (done.ok() && !*done) ++stall_.early_signals;
  }
  (void)dl.EndStep();
  Mark(op);
}

void DecodeGraph::OutNode(void* ctx, int, int) {
  auto* self = static_cast<DecodeGraph*>(ctx);
  self->FfnEnd(self->m_.hp.n_layer - 1);
  if (self->dhead_up_ >= 0) {
    if (self->logits_ != nullptr) {
      self->BeginDeviceStep(self->dhead_up_, -1);
    } else {
      for (int i = 0; i < 3; ++i) self->g_.Signal(self->dhead_up_ + i);
    }
    return;
  }
  if (self->logits_ == nullptr) return;
  OutNormStage(self->m_, 0, 1);
  self->Mark(Op::kNorm);
  self->head_.jobs[0].dst = self->logits_;
  PrepareLinear(self->head_, self->m_.xn.data(), self->m_.hp.n_embd);
  self->Mark(Op::kLmHead);
}

void DecodeGraph::HeadNode(void* ctx, int part, int n_parts) {
  auto* self = static_cast<DecodeGraph*>(ctx);
  if (self->logits_ == nullptr) return;
  self->RunLinearStealing(self->head_, self->head_s_, part, n_parts);
}

void DecodeGraph::HeadDoneNode(void* ctx, int, int) {
  auto* self = static_cast<DecodeGraph*>(ctx);
  if (self->logits_ != nullptr) self->EndDeviceStep(Op::kLmHead);
}

const DecodeGraphStats* Engine::decode_graph_stats() const {
  const DecodeGraph* g = impl_->decode_graph.get();
  return g != nullptr && g->has_externals() ? &g->stall_stats() : nullptr;
}

const graph::TaskGraph* Engine::decode_task_graph() const {
  return impl_->decode_graph != nullptr ? &impl_->decode_graph->graph() : nullptr;
}

int64_t Engine::DecodeGraphStolenUnits() const {
  return impl_->decode_graph != nullptr ? impl_->decode_graph->stolen_units() : 0;
}

int64_t Engine::DecodeGraphParts() const {
  return impl_->decode_graph != nullptr ? impl_->decode_graph->graph().total_parts() : 0;
}

}  // namespace kx
