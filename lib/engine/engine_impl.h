// Engine internals shared by engine.cc (loading, bookkeeping) and
// forward.cc (the compute). Not a public header.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "base/huge_pages.h"
#include "base/memory_budget.h"
#include "base/thread_pool.h"
#include "engine/device_ffn.h"
#include "engine/device_layers.h"
#include "engine/engine.h"
#include "engine/ffn_hook.h"
#include "engine/sparse_runtime.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"

namespace kx {

// ggml's Q8_0 block (kernels/cpu/internal.h BlockQ8_0): an f16 scale and 32
// int8, the unit of the Q8_0 KV cache.
inline constexpr int kQ8_0BlockElems = 32;
inline constexpr size_t kQ8_0BlockBytes = 34;

// The ops the profile distinguishes, in forward order.
enum class Op : int {
  kEmbed,
  kNorm,
  kQkv,
  kRope,
  kAttention,
  kAttnOut,
  kFfnGateUp,
  kFfnAct,
  kFfnDown,
  kPredict,    // sparse: predictors (and profiling hooks)
  kFfnSparse,  // sparse: the whole FFN over bundles (decode)
  kLmHead,
  kCount,
};

class DecodeGraph;

struct Engine::Impl {
  EngineOptions options;
  std::shared_ptr<const Model> model;  // keeps the mapping every WeightRef points into alive
  LlamaHParams hp;                     // copies of the model's small descriptors, for brevity
  LlamaWeights w;
  const cpu::KernelTable* kernels = nullptr;
  std::unique_ptr<ThreadPool> pool;
  // The session's RAM accounting and limit (EngineOptions::ram_budget);
  // declared before what reserves from it, so it is destroyed after them.
  std::unique_ptr<MemoryBudget> ram;
  // Activation sparsity: the runtime (null: dense) and an optional observer
  // (profiling). The runtime masks batches through the same hook interface.
  std::unique_ptr<SparseRuntime> sparse;
  FfnHook* ffn_hook = nullptr;

  int n_ctx = 0;
  int n_batch = 0;
  int n_past = 0;
  int64_t kv_dim = 0;

  // KV cache, head-major: [layer][KV head][position][head_dim] as bytes, kv_head_bytes per
  // (head, position) and kv_row_bytes = n_head_kv · kv_head_bytes per position of a layer;
  // F16 values or, with KvType::kQ8_0, head_dim values as Q8_0 blocks. Head-major so that
  // the keys one attention task reads (one KV head, a run of positions) are contiguous: with
  // the heads of a position together they were runs of 128 bytes 384 bytes apart (SmolLM2),
  // which the hardware prefetchers follow poorly.
  //
  // A sliding-window layer (Gemma 3's local layers) keeps a ring of kv_slots[l] positions
  // instead of n_ctx (EngineOptions::kv_ring): position p in slot p mod kv_slots[l]. Its
  // window W needs the last W positions, a batch of up to n_batch tokens writes its positions
  // before any of them attends, so the ring holds W + n_batch slots; what it then holds is
  // every position p ≥ kv_end − kv_slots[l] (RewindKv checks a rewind against that).
  EngineOptions::KvType kv_type = EngineOptions::KvType::kF16;
  size_t kv_row_bytes = 0;
  size_t kv_head_bytes = 0;
  std::vector<int> kv_slots;  // per layer: positions its cache holds (n_ctx or the ring)
  // F16 keys stored in blocks of cpu::kAttnKeyBlock positions, dimension-major (kernels.h
  // dot_f16_blocked): decode's q·k then keeps the keys in SIMD lanes, with the same bits; the
  // whole attention pass ran 1.5× faster in L2 and ~10 % faster from memory (bench_attention). A
  // head's run then starts at KvHeadOffset and holds kv_head_slots[l] (kv_slots rounded up to whole
  // blocks) slots, for K and V alike.
  bool kv_k_blocked = false;
  std::vector<int> kv_head_slots;
  std::vector<size_t> kv_layer_off;  // per layer: byte offset of its cache in k_cache/v_cache
  int kv_end = 0;      // one past the highest position written since the cache was last cleared
  HugeBuffer k_cache;  // 2 MiB pages from 8 MiB on: attention streams it (base/huge_pages.h)
  HugeBuffer v_cache;

  // Scratch for one batch of up to n_batch tokens (row b at b·width).
  std::vector<float> x, xn, q, k, v, attn, ffo, gate, up;  // q, attn: q_dim wide
  std::vector<uint8_t> act;   // prepared activations, one region per weight type
  std::vector<float> scores;  // per thread: attention scratch (cpu::AttnScratchFloats)
  size_t scores_per_thread = 0;
  std::vector<float> attn_parts;          // one token's attention chunks (forward_ops.h AttnPlan)
  std::vector<float> rope_cos, rope_sin;  // [b][n_rot/2] for the batch's positions
  std::vector<float> inv_freq;            // [n_rot/2]
  // Local (sliding-window) layers' RoPE when their base differs (Gemma 3);
  // empty when the model has no local layers.
  std::vector<float> rope_cos_local, rope_sin_local, inv_freq_local;

  // The device's share of the model (EngineOptions::device; null: CPU only).
  std::unique_ptr<DeviceLayers> device;
  // The split FFN on that device (EngineOptions::vram_ffn), attached to `sparse`. Declared
  // after `device`: destroyed first, while its device still exists.
  std::unique_ptr<DeviceFfn> device_ffn;

  // EngineOptions::Executor::kGraph: the decode token's task graph, built on
  // the first token that uses it (engine/decode_graph.h).
  std::unique_ptr<DecodeGraph> decode_graph;

  // Logits of the last Eval: n_logit_rows × n_vocab.
  std::vector<float> logits;
  int n_logit_rows = 0;

  // Engine::SetAbortCheck, and where the current Eval stands for its progress:
  // eval_done tokens finished, eval_batch in the running batch, of eval_total.
  Engine::AbortCheck abort_fn = nullptr;
  void* abort_ctx = nullptr;
  bool aborted = false;  // latched when abort_fn asked to stop; Eval rolls back
  int eval_done = 0, eval_batch = 0, eval_total = 1;
  // Polls abort_fn at `layer` of the running batch (0: before it); true once
  // it asked to stop.
  bool Aborting(int layer);

  std::array<int64_t, static_cast<int>(Op::kCount)> op_ns{};
  std::array<int64_t, static_cast<int>(Op::kCount)> op_calls{};
  int64_t profiled_tokens = 0;
  mutable OpProfile profile_view;

  // Evaluates tokens [0, n) at positions n_past.. (n <= n_batch). When
  // logits_dst is not null, writes the logits of tokens [first_logit, n)
  // there, row by row.
  void ForwardBatch(const int32_t* tokens, int n, int first_logit, float* logits_dst);
  // Bytes of the scratch vectors above (KV cache not included).
  uint64_t ScratchBytes() const;
  // Sets n_past to n (≤ n_past) when every ring still holds the positions a token at n
  // attends to; otherwise to 0 (the cache cleared: the caller evaluates again from the
  // start). Returns the new n_past.
  int RewindKv(int n);
  // Keys of positions (pos − window, pos] the query at pos sees in `layer` (window: n_ctx on
  // a global layer).
  int Window(int layer) const { return hp.IsLocalLayer(layer) ? hp.sliding_window : n_ctx; }
};

// Byte offset of (layer, KV head, position) in k_cache / v_cache: the head-major layout, a
// ring on sliding-window layers (the comment on kv_slots).
// (Of a V row, or a K row when !kv_k_blocked.)
inline size_t KvOffset(const Engine::Impl& m, int layer, int head, int pos) {
  const size_t slots = static_cast<size_t>(m.kv_slots[layer]);
  const size_t head_slots = static_cast<size_t>(m.kv_head_slots[layer]);
  return m.kv_layer_off[layer] +
         (static_cast<size_t>(head) * head_slots + static_cast<size_t>(pos) % slots) *
             m.kv_head_bytes;
}
// Byte offset of (layer, KV head)'s run: slot 0.
inline size_t KvHeadOffset(const Engine::Impl& m, int layer, int head) {
  return KvOffset(m, layer, head, 0);
}

const char* OpName(Op op);

// engine_device.cc: EngineOptions::device → m.device (the attention layers and the head on
// the device), or none.
absl::Status OpenDeviceLayers(Engine::Impl& m);
// EngineOptions::vram_ffn → m.device_ffn, the split FFN in what the device has left, or none.
absl::Status OpenDeviceFfn(Engine::Impl& m);
// The first device error of the attention layers or the split FFN (sticky), or OK.
absl::Status DeviceStatus(const Engine::Impl& m);

}  // namespace kx
