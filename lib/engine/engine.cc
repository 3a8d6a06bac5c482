#include "engine/engine.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/cord.h"
#include "base/env_flag.h"
#include "base/log.h"
#include "base/size_parse.h"
#include "engine/decode_graph.h"
#include "engine/engine_impl.h"
#include "kernels/cpu/layer_ops.h"
#include "policy/policy.h"

namespace kx {
namespace {

constexpr int kDefaultMaxCtx = 4096;
constexpr int kMaxBatch = 512;

int DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Marks Eval's non-finite-logits error (IsNonFiniteLogits).
constexpr char kNonFiniteLogitsPayload[] = "kairox/non-finite-logits";

// The first of `rows` rows of `width` floats holding NaN or inf, or -1.
int FirstNonFiniteRow(const float* v, int rows, size_t width) {
  for (int r = 0; r < rows; ++r) {
    const float* row = v + static_cast<size_t>(r) * width;
    float acc = 0.0f;
    for (size_t i = 0; i < width; ++i) acc += row[i] * 0.0f;  // NaN iff one is NaN or inf
    if (acc != 0.0f) return r;
  }
  return -1;
}

// Of the rows a forward pass just produced logits for, the first that is not
// finite, or -1: the logits themselves, and on the CPU head the normalized
// hidden states they came from (`xn`), since the LM head's matmul quantizes
// its input and can turn a NaN there into finite garbage. ~vocab + n_embd
// floats per kept row, next to the megabytes of weights a token reads.
int FirstBadLogitRow(const Engine::Impl& m, const float* logits, int rows, const float* xn) {
  const int bad_logit = FirstNonFiniteRow(logits, rows, m.hp.n_vocab);
  const bool cpu_head = m.device == nullptr || !m.device->head();
  const int bad_xn = cpu_head ? FirstNonFiniteRow(xn, rows, m.hp.n_embd) : -1;
  if (bad_logit < 0) return bad_xn;
  return bad_xn < 0 ? bad_logit : std::min(bad_logit, bad_xn);
}

absl::Status NonFiniteLogitsError(int pos) {
  absl::Status st = absl::DataLossError(absl::StrCat(
      "the model produced non-finite logits (NaN or inf) for the token at position ", pos,
      ": its weights hold NaN/inf values (e.g. output_norm.weight) or its arithmetic "
      "overflowed; refusing to sample from them"));
  st.SetPayload(kNonFiniteLogitsPayload, absl::Cord("1"));
  return st;
}

}  // namespace

const char* OpName(Op op) {
  switch (op) {
    case Op::kEmbed:
      return "embed";
    case Op::kNorm:
      return "norm";
    case Op::kQkv:
      return "qkv";
    case Op::kRope:
      return "rope+kv";
    case Op::kAttention:
      return "attention";
    case Op::kAttnOut:
      return "attn_out";
    case Op::kFfnGateUp:
      return "ffn_gate_up";
    case Op::kFfnAct:
      return "ffn_act";
    case Op::kFfnDown:
      return "ffn_down";
    case Op::kPredict:
      return "predict";
    case Op::kFfnSparse:
      return "ffn_sparse";
    case Op::kLmHead:
      return "lm_head";
    case Op::kCount:
      break;
  }
  return "?";
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::string& model_path,
                                                     const EngineOptions& options) {
  KX_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(model_path));
  return Create(std::move(model), options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model,
                                                       const EngineOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("Engine::Create: no model");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->model = std::move(model);
  impl->hp = impl->model->hparams();
  impl->w = impl->model->weights();
  const LlamaHParams& hp = impl->hp;

  if (options.n_ctx < 0) return absl::InvalidArgumentError("context size must be >= 0");
  if (options.n_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context size ", options.n_ctx, " exceeds the model's trained context ", hp.n_ctx_train));
  }
  impl->n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min(hp.n_ctx_train, kDefaultMaxCtx);
  if (options.n_batch < 0 || options.n_batch > kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrCat("batch size must be in 1..", kMaxBatch));
  }
  impl->n_batch = std::min(options.n_batch > 0 ? options.n_batch : 64, impl->n_ctx);
  const int n_threads = options.n_threads > 0 ? options.n_threads : DefaultThreads();
  SizeSpec ram_spec;
  const bool has_budget = !options.ram_budget.empty();
  if (has_budget) {
    auto spec = ParseSize(options.ram_budget);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ram-budget: ", std::string(spec.status().message())));
    }
    ram_spec = *spec;
  }
  if (has_budget) {  // a bad --policy is an error even when there is no sidecar to stream
    if (auto p = policy::MakePolicy(options.policy, policy::PolicyOptions{}); !p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--policy: ", std::string(p.status().message())));
    }
  }
  impl->ram = std::make_unique<MemoryBudget>(
      has_budget && !ram_spec.is_percent ? ram_spec.bytes : MemoryBudget::kUnlimited);
  impl->pool = std::make_unique<ThreadPool>(n_threads);
  impl->kernels = &cpu::Kernels();
  impl->kv_dim = hp.kv_dim();

  impl->kv_type = options.kv_type;
  if (options.kv_type == EngineOptions::KvType::kQ8_0) {
    if (hp.head_dim % kQ8_0BlockElems != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV cache type q8_0 needs head_dim a multiple of ", kQ8_0BlockElems,
                       "; this model's head_dim is ", hp.head_dim, " (use the f16 KV cache)"));
    }
    impl->kv_row_bytes = static_cast<size_t>(impl->kv_dim / kQ8_0BlockElems) * kQ8_0BlockBytes;
  } else {
    impl->kv_row_bytes = static_cast<size_t>(impl->kv_dim) * sizeof(uint16_t);
  }
  impl->kv_head_bytes = impl->kv_row_bytes / hp.n_head_kv;
  // F16 keys in blocks for the decode attention's dot products (engine_impl.h kv_k_blocked);
  // KAIROX_KV_K_BLOCKED=0 keeps them in rows (the same logits; for comparing the two).
  impl->kv_k_blocked = options.kv_k_blocked && options.kv_type == EngineOptions::KvType::kF16 &&
                       hp.head_dim % cpu::kAttnKeyBlock == 0 &&
                       EnvFlag("KAIROX_KV_K_BLOCKED") != false;
  // Per layer: n_ctx positions, or a ring of window + n_batch on a sliding-window layer
  // (engine_impl.h kv_slots) where that is fewer.
  size_t kv_bytes = 0;
  impl->kv_slots.resize(hp.n_layer);
  impl->kv_head_slots.resize(hp.n_layer);
  impl->kv_layer_off.resize(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    int slots = impl->n_ctx;
    if (options.kv_ring && hp.IsLocalLayer(l)) {
      slots = static_cast<int>(
          std::min<int64_t>(impl->n_ctx, int64_t{hp.sliding_window} + int64_t{impl->n_batch}));
    }
    impl->kv_slots[l] = slots;
    // Whole key blocks per head: the blocked layout's last block is never cut.
    const int head_slots = impl->kv_k_blocked ? (slots + static_cast<int>(cpu::kAttnKeyBlock) - 1) /
                                                    static_cast<int>(cpu::kAttnKeyBlock) *
                                                    static_cast<int>(cpu::kAttnKeyBlock)
                                              : slots;
    impl->kv_head_slots[l] = head_slots;
    impl->kv_layer_off[l] = kv_bytes;
    kv_bytes += static_cast<size_t>(head_slots) * impl->kv_row_bytes;
  }
  if (absl::Status st = impl->ram->Reserve("KV cache", 2 * HugeBuffer::FootprintBytes(kv_bytes));
      !st.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(std::string(st.message()), "; the KV cache for n_ctx ", impl->n_ctx,
                     " alone needs that: a smaller context (-c) or --kv-type q8_0 shrinks it"));
  }
  impl->k_cache = HugeBuffer(kv_bytes);
  impl->v_cache = HugeBuffer(kv_bytes);
  if (impl->k_cache.size() != kv_bytes || impl->v_cache.size() != kv_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the KV cache (2 × ", kv_bytes, " bytes)"));
  }

  const size_t B = impl->n_batch;
  const size_t d = hp.n_embd, ff = hp.n_ff, kvd = impl->kv_dim, qd = hp.q_dim();
  impl->x.resize(B * d);
  impl->xn.resize(B * d);
  impl->q.resize(B * qd);
  impl->k.resize(B * kvd);
  impl->v.resize(B * kvd);
  impl->attn.resize(B * qd);
  impl->ffo.resize(B * d);
  impl->gate.resize(B * ff);
  impl->up.resize(B * ff);
  {
    const int g = hp.n_head / hp.n_head_kv;
    impl->scores_per_thread =
        static_cast<size_t>(cpu::AttnScratchFloats(impl->n_ctx, g, hp.head_dim));
    impl->scores.resize(static_cast<size_t>(n_threads) * impl->scores_per_thread);
    impl->attn_parts.resize(static_cast<size_t>(hp.n_head_kv) * cpu::AttnChunks(impl->n_ctx) *
                            cpu::AttnPartFloats(g, hp.head_dim));
  }
  impl->rope_cos.resize(B * hp.n_rot / 2);
  impl->rope_sin.resize(B * hp.n_rot / 2);
  impl->inv_freq = cpu::RopeInvFreq(hp.rope_freq_base, hp.n_rot);
  if (!hp.layer_is_local.empty()) {
    impl->inv_freq_local = cpu::RopeInvFreq(hp.rope_freq_base_local, hp.n_rot);
    impl->rope_cos_local.resize(B * hp.n_rot / 2);
    impl->rope_sin_local.resize(B * hp.n_rot / 2);
  }
  // Activation scratch: the largest prepared input (n_ff wide) for each of
  // up to two distinct weight types in one op group, for every batch row.
  size_t act_row = 0;
  for (GgmlType t : {impl->w.tok_embd.type, impl->w.output.type, impl->w.layers[0].wq.type,
                     impl->w.layers[0].ffn_down.type}) {
    const cpu::TypeKernels* tk = impl->kernels->For(t);
    const int64_t widest = std::max<int64_t>({hp.n_ff, hp.n_embd, hp.q_dim()});
    act_row = std::max(act_row, tk->act_bytes(widest));
  }
  for (const auto& L : impl->w.layers) {
    for (const WeightRef* wr : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      act_row = std::max(act_row, impl->kernels->For(wr->type)->act_bytes(wr->n_in));
    }
  }
  impl->act.resize(2 * B * act_row + 64);
  impl->logits.resize(hp.n_vocab);
  // What every session holds before any sidecar data: a budget below it is refused naming that
  // minimum and its parts (docs/tiers.md), not only the entry that happened to overflow.
  const auto too_small = [&](const absl::Status& st) {
    const uint64_t scratch = impl->ScratchBytes(), tables = impl->model->TableBytes();
    return absl::ResourceExhaustedError(absl::StrCat(
        "RAM budget ", FormatBytes(impl->ram->limit()),
        " is too small: this session needs at least ", FormatBytes(2 * kv_bytes + scratch + tables),
        " before any sidecar data (KV cache ", FormatBytes(2 * kv_bytes), " for n_ctx ",
        impl->n_ctx, ", scratch ", FormatBytes(scratch), ", model tables ", FormatBytes(tables),
        "); raise --ram-budget, or shrink the KV cache with -c or --kv-type q8_0 (", st.message(),
        ")"));
  };
  if (absl::Status st = impl->ram->Reserve("scratch", impl->ScratchBytes()); !st.ok()) {
    return too_small(st);
  }
  // The model's tokenizer and GGUF index stay on the heap as long as the model does; no
  // session runs without them, so each session's budget holds them (docs/tiers.md).
  if (absl::Status st = impl->ram->Reserve("model tables", impl->model->TableBytes()); !st.ok()) {
    return too_small(st);
  }

  if (options.sparse) {
    SparseConfig sc;
    sc.sparsity = options.sparsity;
    sc.use_predictor = options.use_predictor;
    sc.masked_dense = options.masked_dense;
    sc.trace_path = options.trace_path;
    sc.tiered = has_budget;
    sc.resident_share = ram_spec.is_percent ? ram_spec.percent / 100.0 : -1.0;
    sc.tier.policy = options.policy;
    sc.tier.prefetch = options.prefetch;
    sc.tier.miss = options.tier_skip_misses ? TierMiss::kSkip : TierMiss::kRead;
    sc.tier.debug_skip_wait = options.debug_skip_io_wait;
    sc.tier.debug_read_delay_us = options.debug_io_delay_us;
    sc.tier.log_path = options.tier_log;
    sc.dual_threshold = options.dual_threshold;
    sc.dual.step_logit = options.dual_step_logit;
    sc.dual.device_wait_share = options.dual_device_wait_share;
    KX_ASSIGN_OR_RETURN(impl->sparse,
                        LoadSparseRuntime(*impl->model, options.sidecar, sc, *impl->kernels,
                                          n_threads, impl->n_batch, impl->ram.get()));
  } else if (!options.sidecar.empty() || !options.trace_path.empty()) {
    Log().warn("sparsity is off: the sidecar and the trace are not used");
  }
  if (has_budget && impl->sparse == nullptr) {
    // A percentage is a share of the sidecar's bundles: without them it would limit nothing,
    // and a user who asked for a limit would silently get none. A size still bounds the KV
    // cache and scratch, so it only warns.
    if (ram_spec.is_percent) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ram-budget ", options.ram_budget,
          " is a share of the sidecar's FFN bundles, and this session runs without a sidecar",
          options.sparse ? " (none beside the model; build one with kairox-prepare)"
                         : " (sparsity is off)",
          "; give a size such as 512M to bound the KV cache and scratch"));
    }
    Log().warn(
        "--ram-budget without a sidecar: the budget bounds the KV cache and scratch, but "
        "there are no bundles to stream (run kairox-prepare)");
  }
  KX_RETURN_IF_ERROR(OpenDeviceLayers(*impl));
  KX_RETURN_IF_ERROR(OpenDeviceFfn(*impl));
  if (options.dual_threshold && impl->device_ffn == nullptr) {
    Log().warn(
        "--dual-threshold: no split FFN (it needs a device, a sidecar and device slots "
        "for FFN bundles); masks use the single threshold");
  }
  // A percentage budget is the share of bundles plus what the rest needs:
  // the limit becomes exactly what is held now.
  if (has_budget && ram_spec.is_percent) KX_RETURN_IF_ERROR(impl->ram->SetLimit(impl->ram->used()));
  if (has_budget) Log().info("RAM budget: {}", impl->ram->Report());

  Log().info(
      "session on {}: {} layers, n_embd {}, n_ff {}, vocab {}, n_ctx {}, {} threads, kernels {}",
      impl->model->path(), hp.n_layer, hp.n_embd, hp.n_ff, hp.n_vocab, impl->n_ctx, n_threads,
      IsaName(impl->kernels->isa));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const std::shared_ptr<const Model>& Engine::model() const { return impl_->model; }
const Tokenizer& Engine::tokenizer() const { return impl_->model->tokenizer(); }
const GgufFile& Engine::gguf() const { return impl_->model->gguf(); }
const LlamaHParams& Engine::hparams() const { return impl_->hp; }
int Engine::n_vocab() const { return impl_->hp.n_vocab; }
int Engine::n_ctx() const { return impl_->n_ctx; }
int Engine::n_threads() const { return impl_->pool->size(); }
int Engine::n_past() const { return impl_->n_past; }

absl::Status Engine::Eval(std::span<const int32_t> tokens, bool all_logits) {
  Impl& m = *impl_;
  if (tokens.empty()) return absl::InvalidArgumentError("Eval: no tokens");
  if (static_cast<int64_t>(m.n_past) + static_cast<int64_t>(tokens.size()) > m.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat(
        "context is full: ", m.n_past, " + ", tokens.size(), " tokens exceed n_ctx = ", m.n_ctx,
        " (the model was trained for ", m.hp.n_ctx_train, "; raise -c or truncate the prompt)"));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= m.hp.n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", t, " is outside the vocabulary (0..", m.hp.n_vocab - 1, ")"));
    }
  }
  const int n = static_cast<int>(tokens.size());
  const size_t vocab = m.hp.n_vocab;
  m.n_logit_rows = all_logits ? n : 1;
  m.logits.resize(static_cast<size_t>(m.n_logit_rows) * vocab);

  ThreadPool::HotScope hot(*m.pool);
  const int n_past_before = m.n_past;
  // Every return but the last undoes the evaluation: the KV cache back to n_past_before (the
  // entries written since are past n_past and get overwritten; where a ring no longer holds
  // what n_past_before needs, RewindKv clears it) and no logits.
  struct Undo {
    Engine::Impl& m;
    int n_past;
    bool armed = true;
    ~Undo() {
      if (!armed) return;
      m.RewindKv(n_past);
      m.n_logit_rows = 0;
    }
  } undo{m, n_past_before};
  m.aborted = false;
  m.eval_total = n;
  for (int start = 0; start < n; start += m.n_batch) {
    const int count = std::min(m.n_batch, n - start);
    const bool last = start + count == n;
    float* dst = nullptr;
    int first_logit = count;
    if (all_logits) {
      dst = m.logits.data() + static_cast<size_t>(start) * vocab;
      first_logit = 0;
    } else if (last) {
      dst = m.logits.data();
      first_logit = count - 1;
    }
    if (m.sparse != nullptr && m.sparse->tier() != nullptr) {
      // Under a RAM budget the FFN runs only from bundles, which the sparse
      // kernels read one token at a time (the batched path would read the
      // model's dense FFN through the page cache).
      for (int i = 0; i < count; ++i) {
        m.eval_done = start + i;
        m.eval_batch = 1;
        if (m.Aborting(0)) break;
        const bool want = dst != nullptr && i >= first_logit;
        m.sparse->BeginBatch(m.n_past);
        float* row = want ? dst + static_cast<size_t>(i - first_logit) * vocab : nullptr;
        m.ForwardBatch(tokens.data() + start + i, 1, want ? 0 : 1, row);
        m.n_past += 1;
        if (m.aborted) break;
        // A device fault before the logits, as below: they may show it.
        if (absl::Status st = DeviceStatus(m); !st.ok()) return st;
        if (want && FirstBadLogitRow(m, row, 1, m.xn.data()) >= 0) {
          return NonFiniteLogitsError(n_past_before + start + i);
        }
      }
      if (m.aborted) break;
      if (absl::Status st = m.sparse->status(); !st.ok()) {
        return absl::DataLossError(
            absl::StrCat("reading FFN bundles: ", std::string(st.message())));
      }
      continue;
    }
    if (m.sparse != nullptr) m.sparse->BeginBatch(m.n_past);
    m.eval_done = start;
    m.eval_batch = count;
    if (m.Aborting(0)) break;
    m.ForwardBatch(tokens.data() + start, count, first_logit, dst);
    if (m.aborted) break;  // between two layers: the batch is dropped below
    // Before the logits: they may show it.
    if (absl::Status st = DeviceStatus(m); !st.ok()) return st;
    if (dst != nullptr) {
      const size_t d = static_cast<size_t>(m.hp.n_embd);
      const int bad = FirstBadLogitRow(m, dst, count - first_logit, m.xn.data() + first_logit * d);
      if (bad >= 0) {
        return NonFiniteLogitsError(n_past_before + start + first_logit + bad);
      }
    }
    m.n_past += count;
  }
  if (m.aborted) {
    return absl::CancelledError(absl::StrCat("evaluation stopped by its abort check after ",
                                             m.eval_done, " of ", n, " tokens"));
  }
  if (m.sparse != nullptr) {
    // Bytes read in place (mapped) or by the tier come from a file verified
    // at open; a write to it since means this evaluation may have used others.
    if (absl::Status st = m.sparse->sidecar().CheckUnchanged(); !st.ok()) return st;
  }
  undo.armed = false;
  m.profiled_tokens += n;
  return absl::OkStatus();
}

bool IsNonFiniteLogits(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kNonFiniteLogitsPayload).has_value();
}

void Engine::SetAbortCheck(AbortCheck fn, void* ctx) {
  impl_->abort_fn = fn;
  impl_->abort_ctx = ctx;
}

bool Engine::Impl::Aborting(int layer) {
  if (aborted) return true;
  if (abort_fn == nullptr) return false;
  const double done = eval_done + static_cast<double>(eval_batch) * layer / hp.n_layer;
  aborted = abort_fn(abort_ctx, static_cast<float>(done / eval_total));
  return aborted;
}

std::span<const float> Engine::Logits(int i) const {
  const Impl& m = *impl_;
  if (i < 0) i = m.n_logit_rows - 1;
  if (i < 0 || i >= m.n_logit_rows) return {};
  return {m.logits.data() + static_cast<size_t>(i) * m.hp.n_vocab,
          static_cast<size_t>(m.hp.n_vocab)};
}

void Engine::TruncateKv(int n) { impl_->RewindKv(std::clamp(n, 0, impl_->n_past)); }

int Engine::Impl::RewindKv(int n) {
  // A ring of S slots holds every position p ≥ kv_end − S; a token at n attends to
  // (n − window, n): those from max(0, n + 1 − window) must be held. The positions it writes
  // from n on then overwrite only older ones (S ≥ window + n_batch).
  bool held = true;
  for (int l = 0; l < hp.n_layer && held; ++l) {
    if (kv_slots[l] >= n_ctx) continue;
    const int first = std::max(0, n + 1 - Window(l));
    held = first >= kv_end - kv_slots[l];
  }
  if (!held || n == 0) {
    n = 0;
    kv_end = 0;
  }
  n_past = n;
  return n;
}

uint64_t Engine::WeightBytesPerToken() const { return impl_->model->WeightBytesPerToken(); }

uint64_t Engine::KvBytesPerToken() const {
  const Impl& m = *impl_;
  uint64_t rows = 0;
  for (int l = 0; l < m.hp.n_layer; ++l) rows += std::min(m.n_past, m.Window(l));
  return 2ull * static_cast<uint64_t>(m.kv_row_bytes) * rows;
}

uint64_t Engine::KvCacheBytes() const { return impl_->k_cache.size() + impl_->v_cache.size(); }

double Engine::FlopsPerToken() const { return impl_->model->FlopsPerToken(); }

const OpProfile& Engine::profile() const {
  const Impl& m = *impl_;
  m.profile_view.entries.clear();
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    m.profile_view.entries.push_back({OpName(static_cast<Op>(i)), m.op_ns[i], m.op_calls[i]});
  }
  m.profile_view.tokens = m.profiled_tokens;
  return m.profile_view;
}

void Engine::SetFfnHook(FfnHook* hook) { impl_->ffn_hook = hook; }

SparseRuntime* Engine::sparse() const { return impl_->sparse.get(); }
const MemoryBudget& Engine::ram_budget() const { return *impl_->ram; }

int Engine::n_device_layers() const { return impl_->device ? impl_->device->n_layers() : 0; }
bool Engine::device_head() const { return impl_->device && impl_->device->head(); }
const DeviceFfn* Engine::device_ffn() const { return impl_->device_ffn.get(); }
const MemoryBudget* Engine::vram_budget() const {
  return impl_->device ? &impl_->device->device().vram() : nullptr;
}
std::string Engine::device_name() const {
  return impl_->device ? impl_->device->device().name() : "cpu";
}

uint64_t Engine::Impl::ScratchBytes() const {
  uint64_t n = 0;
  for (const std::vector<float>* v :
       {&x, &xn, &q, &k, &v, &attn, &ffo, &gate, &up, &scores, &attn_parts, &rope_cos, &rope_sin,
        &inv_freq, &rope_cos_local, &rope_sin_local, &inv_freq_local, &logits}) {
    n += v->capacity() * sizeof(float);
  }
  return n + act.capacity();
}

void Engine::ResetProfile() {
  impl_->op_ns.fill(0);
  impl_->op_calls.fill(0);
  impl_->profiled_tokens = 0;
  if (impl_->sparse != nullptr) impl_->sparse->ResetStats();
  if (impl_->decode_graph != nullptr) impl_->decode_graph->ResetStallStats();
}

}  // namespace kx
