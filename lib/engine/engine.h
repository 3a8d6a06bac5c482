// Engine: one loaded model and one sequence (KV cache) evaluated on the CPU.
//
// Usage:
//   kx::EngineOptions opts;  opts.n_threads = 2;  opts.n_ctx = 2048;
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<kx::Engine> engine, kx::Engine::Load(path, opts));
//   std::vector<int32_t> ids = engine->tokenizer().Encode(prompt, true, true);
//   KX_RETURN_IF_ERROR(engine->Eval(ids));            // prefill; logits of the last token
//   std::span<const float> logits = engine->Logits();
// Not thread-safe: one thread drives an Engine at a time (it owns a thread
// pool for its own work).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace kx {

namespace graph {
class TaskGraph;
}  // namespace graph
class Tokenizer;
class GgufFile;
class FfnHook;
class SparseRuntime;
class DeviceFfn;
class MemoryBudget;
class Model;
struct LlamaHParams;

struct EngineOptions {
  int n_threads = 0;  // 0: all cores the process may use
  int n_ctx = 0;      // 0: min(model's trained context, 4096)
  int n_batch = 64;   // tokens per prefill batch

  // KV cache element type. kQ8_0 stores each head's row of K and V as ggml
  // Q8_0 blocks (34 bytes per 32 values, 0.53× the F16 bytes; logits move
  // slightly: tests/engine/test_kv_q8.cc). Needs head_dim a multiple of 32.
  enum class KvType { kF16, kQ8_0 };
  KvType kv_type = KvType::kF16;
  // Sliding-window layers (Gemma 3's local layers) keep only their window plus one batch of
  // positions, as a ring (engine_impl.h kv_slots), instead of n_ctx: the same logits, less
  // memory. A rewind (TruncateKv, a stopped Eval) further back than the rings reach clears
  // the cache instead (n_past() 0). false: n_ctx positions on every layer.
  bool kv_ring = true;
  // F16 keys in blocks of 16 positions (engine_impl.h kv_k_blocked): the same logits as rows,
  // faster decode attention. false (or KAIROX_KV_K_BLOCKED=0) keeps rows, for comparing.
  bool kv_k_blocked = true;

  // Activation sparsity (engine/sparse_runtime.h). With a sidecar, decode
  // computes only the FFN neurons its predictors select.
  std::string sidecar;        // "": <model>.kairox.gguf beside the model, if it exists
  bool sparse = true;         // false: dense even when a sidecar exists (--no-sparse)
  float sparsity = -1.0f;     // < 0: the sidecar's own (--sparsity)
  bool use_predictor = true;  // false: the oracle (threshold only)
  bool masked_dense = false;  // decode masked-dense too (a reference for the sparse kernels)
  std::string trace_path;     // --trace: record predicted/actual neurons per token and layer
  // RAM budget (--ram-budget): a hard limit on the memory the session owns —
  // KV cache, scratch, predictors and sparse scratch, bundle staging and
  // resident bundles (engine/bundle_tier.h). "" means no limit (accounted
  // only). SIZE ("512M", "2G"): the whole; the bundle tier gets what the
  // rest leaves. PCT ("50%"): resident bundles = that share of the
  // sidecar's bundle bytes, plus what the rest needs. With a budget and a
  // sidecar, FFN bundles are read with O_DIRECT into the engine's own slots
  // (never the page cache) and prompts are evaluated token by token through
  // them. Model weights outside the FFN stay mapped and are not counted.
  std::string ram_budget;
  std::string policy = "tam-adaptive";  // --policy: which groups stay resident (policy::MakePolicy)
  bool prefetch = true;                 // --no-prefetch: a layer's reads start when it runs
  bool tier_skip_misses = false;        // --tier-miss skip: compute without non-resident groups
  std::string tier_log;                 // --tier-log: CSV per layer step (λ, hits, reads, stalls)
  bool debug_skip_io_wait = false;  // tests' negative control: compute without waiting for reads
  int debug_io_delay_us = 0;        // tests: the tier's reads start this late (pread backend)

  // How one decode token (a batch of 1) is dispatched: kPool runs each op as
  // one ThreadPool::Run with serial code between them; kGraph runs the
  // token's task graph (engine/decode_graph.h, lib/graph) on the same pool.
  // Same logits bit for bit; on 2 threads the graph measured 0.99–1.03× the
  // pool's tg (docs/dag.md). Batches (prefill) always use the pool.
  // KAIROX_EXEC=pool|graph overrides.
  enum class Executor { kPool, kGraph };
  Executor executor = Executor::kGraph;
  // With the split FFN (vram_ffn) or device layers (n_gpu_layers: attention blocks, the
  // head), whether decode runs on the graph too (with executor kGraph): device externals
  // signalled by the device's events (engine/decode_graph.h; docs/dag.md has the
  // measurements behind the default); false: the pool path. KAIROX_EXEC overrides.
  bool graph_with_device = true;
  // Under a RAM budget, whether the decode graph waits for each layer's bundle reads through
  // a disk external signalled by the I/O completion (the stall is then charged to the disk
  // tag; docs/dag.md), and under three tiers for the step's bundle loads through an H2D
  // background external; false: inside the FFN's prologue node (BundleTier::Acquire blocks)
  // and inside End, as before. Same logits either way (docs/dag.md has the measurements).
  bool graph_tier_externals = true;
  // Tests' negative control: the decode graph signals its device externals without waiting
  // for the device's events (DecodeGraphStats::early_signals then counts the steps).
  bool debug_graph_signal_early = false;
  // Tests: the decode graph's stealable matvec units (docs/dag.md) are this many bytes of
  // weights instead of the default (0), and part 0 of each such node sleeps this long before
  // each unit of its own range, so that the other parts steal from it.
  int64_t debug_steal_unit_bytes = 0;
  int debug_steal_delay_us = 0;

  // The device (lib/device; engine/device_layers.h). With "sim" or "cuda" the non-FFN part of
  // the first layers — norms, Q/K/V/O, RoPE, attention with that layer's KV cache — and the
  // LM head (placed first, when it fits) run on the device; the FFN stays on the CPU. Layers
  // go on the device in order while they fit the VRAM budget and n_gpu_layers allows.
  // "auto": cuda when a usable GPU is found, else cpu (one log line says which and why).
  std::string device = "auto";  // --device cpu|cuda|sim|auto
  std::string vram_budget;      // --vram-budget SIZE|PCT of the device; "": all of it
  int n_gpu_layers = -1;        // -ngl: at most this many layers; -1 = all that fit; 0 = none
  std::string device_profile;   // sim: a profile of lib/device/profiles.json ("": the default)
  uint64_t device_seed = 1;     // sim: the seed of the copies' jitter
  // The split FFN (engine/device_ffn.h; needs a device and a sidecar): device slots for FFN
  // bundles. "": the VRAM the attention layers and the head leave (PowerInfer's rule); a
  // size ("2G"); a share of the sidecar's bundles ("30%"); "0": the FFN stays on the CPU.
  std::string vram_ffn;
  std::string device_policy = "tam-adaptive";  // which groups hold device slots
  std::string device_log;                      // CSV per layer step of the device FFN ("": none)
  // Pinned bundle-sized buffers the split FFN's bundle loads pass through (DeviceFfnOptions::
  // staging_bundles, counted against the RAM budget); -1: the default; 0: loads copy from the
  // mapped sidecar or the RAM tier directly.
  int device_staging_bundles = -1;
  // The split FFN's load-aware dual thresholds (sparse/dual_threshold.h, docs/device.md):
  // θ_g on device-resident groups, θ_c elsewhere, under the single threshold's error bound.
  bool dual_threshold = false;
  float dual_step_logit = 0.25f;         // tests: 0 keeps θ_g = θ_c = θ
  double dual_device_wait_share = 0.05;  // tests: huge makes the CPU the bottleneck always
  // Tests' negative control (sim): skip the N-th event wait (0-based); -1 = none.
  int64_t debug_skip_event_wait = -1;
  // Tests' negative control: the split FFN reuses a staging buffer without waiting for the
  // copy that read it.
  bool debug_skip_staging_wait = false;
  // Tests: the device layers' N-th step (0-based over attention blocks and heads, in call
  // order) launches its attention (or head) kernel with an output outside device memory, so
  // the sim device faults on its stream as a GPU would (sticky); -1 = none.
  int64_t debug_device_layer_fault = -1;
};

// Wall time per op kind, accumulated since the last ResetProfile().
struct OpProfile {
  struct Entry {
    const char* name;
    int64_t ns;
    int64_t calls;
  };
  std::vector<Entry> entries;
  int64_t tokens = 0;
};

// True for Eval's error when the model produced NaN or inf logits (the C
// ABI reports it as KX_STATUS_INVALID_MODEL).
bool IsNonFiniteLogits(const absl::Status& status);

// The decode graph's stall accounting with the split FFN's device or a RAM tier
// (engine/decode_graph.h), summed over its runs since the last ResetProfile. The graph's
// device externals and the tier's per-layer read externals (kDisk) are tagged;
// wait_ns[tag] is the wall time every pool thread waited with only a signal of that tag
// able to make progress (graph/cpu_executor.h), external_wait_ns their sum plus any untagged
// stall. cpu is the rest of the runs' wall time: compute (and dispatch) on the CPU.
struct DecodeGraphStats {
  enum Tag : int { kGpu = 0, kH2dCritical = 1, kH2dBackground = 2, kDisk = 3, kTags = 4 };
  int64_t runs = 0;
  int64_t wall_ns = 0;
  int64_t external_wait_ns = 0;
  int64_t wait_ns[kTags] = {0, 0, 0, 0};
  // Layer steps whose download event was still pending when the graph ended the layer:
  // an external signalled before its event completed (a bug; 0 unless a test forces it).
  int64_t early_signals = 0;
};

class Engine {
 public:
  // Loads the model at `model_path` and creates a session on it.
  static absl::StatusOr<std::unique_ptr<Engine>> Load(const std::string& model_path,
                                                      const EngineOptions& options);
  // A session on an already loaded model (shared, not copied).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const EngineOptions& options);
  ~Engine();

  const std::shared_ptr<const Model>& model() const;
  const Tokenizer& tokenizer() const;
  const GgufFile& gguf() const;
  const LlamaHParams& hparams() const;
  int n_vocab() const;
  int n_ctx() const;
  int n_threads() const;
  // Tokens in the KV cache.
  int n_past() const;

  // Appends `tokens` at position n_past() and evaluates them. With
  // `all_logits`, logits of every token are kept (Logits(i)); otherwise
  // only the last token's. Fails (changing nothing) if the context would
  // overflow or a token id is out of range; Cancelled when the abort check
  // stops it (n_past() as before the call, no logits; 0 when sliding-window
  // rings no longer reach back there: TruncateKv). DataLoss, likewise
  // rolled back, when a kept logit row holds NaN or inf (damaged weights:
  // IsNonFiniteLogits says which) or when the sidecar was written to since
  // it was opened.
  absl::Status Eval(std::span<const int32_t> tokens, bool all_logits = false);

  // Polled by Eval on the evaluating thread before each batch and between
  // layers, with the share of Eval's tokens done in [0, 1); returning true
  // stops the evaluation. A one-token batch on the task graph, and every
  // token under a RAM tier (whose next layer's reads are already in flight),
  // is polled once, before it. Null `fn`: never stopped. `ctx` must stay
  // valid while it is set.
  using AbortCheck = bool (*)(void* ctx, float progress);
  void SetAbortCheck(AbortCheck fn, void* ctx);

  // Logits of token i of the last Eval (i = -1: the last one).
  std::span<const float> Logits(int i = -1) const;

  // Drops KV entries at positions >= n (0 clears). With sliding-window rings
  // (EngineOptions::kv_ring) a rewind past what they still hold clears the cache: n_past()
  // then reads 0, below n, and the caller evaluates its tokens again.
  void TruncateKv(int n);

  // Bytes of weights one decode step reads (for bandwidth ceilings).
  uint64_t WeightBytesPerToken() const;
  // Bytes of KV cache one decode step reads at the current depth (a sliding-window layer
  // reads its window at most).
  uint64_t KvBytesPerToken() const;
  // Bytes the KV cache holds (K and V, every layer), as reserved from the RAM budget.
  uint64_t KvCacheBytes() const;
  // Floating point operations of one token through the model at depth 0.
  double FlopsPerToken() const;
  // Task parts one decode token runs on the task graph (EngineOptions::executor
  // kGraph; engine/decode_graph.h), 0 until a token used it.
  int64_t DecodeGraphParts() const;
  // Units of matvec rows the decode graph's parts stole from each other's ranges since it
  // was built (docs/dag.md; 0 with one thread or before a token used it).
  int64_t DecodeGraphStolenUnits() const;
  // The decode graph's stalls with the split FFN or a RAM tier (null while no decode graph
  // with device or disk externals ran since the engine was made). Valid until the next Eval.
  const DecodeGraphStats* decode_graph_stats() const;
  // The decode graph's plan (tests inspect its dependencies), or null before a token used it.
  const graph::TaskGraph* decode_task_graph() const;

  const OpProfile& profile() const;
  void ResetProfile();

  // Observes (and may mask) every layer's FFN in the dense path; not owned,
  // null removes it. Used by kairox-prepare to profile activations.
  void SetFfnHook(FfnHook* hook);
  // The sparse runtime, or null when the engine runs dense.
  SparseRuntime* sparse() const;
  // What the session's memory is accounted against (EngineOptions::ram_budget).
  const MemoryBudget& ram_budget() const;
  // Layers whose non-FFN part runs on the device, and whether the LM head does (0 and false
  // without a device). The device's VRAM accounting, or null without a device.
  int n_device_layers() const;
  bool device_head() const;
  // The split FFN's device, or null (engine/device_ffn.h).
  const DeviceFfn* device_ffn() const;
  const MemoryBudget* vram_budget() const;
  // "cpu", or the device's name ("sim:rtx4090-pcie4", "cuda:0 NVIDIA H100 …").
  std::string device_name() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kx
