// The dense forward pass of the llama family on the CPU, one batch of tokens
// at a time. Linear ops that share an input (Q/K/V, gate/up) are one group:
// the input is prepared (quantized) once and one parallel dispatch covers all
// their rows. Attention is parallel over (token, head) pairs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/decode_graph.h"
#include "engine/engine_impl.h"
#include "engine/forward_ops.h"
#include "kernels/cpu/layer_ops.h"
#include "kernels/cpu/quantize.h"
#include "model/llama_ffn_activation.h"

namespace kx {
namespace {

// The F16 KV cache's rows, stored as bytes (engine_impl.h: the same buffer
// holds Q8_0 blocks with KvType::kQ8_0); offsets are always even.
uint16_t* KvF16(uint8_t* p) { return reinterpret_cast<uint16_t*>(p); }

void AddBias(float* dst, const WeightRef& bias, int n) {
  const auto* b = reinterpret_cast<const float*>(bias.data);
  for (int i = 0; i < n; ++i) dst[i] += b[i];
}

const float* F32(const WeightRef& w) { return reinterpret_cast<const float*>(w.data); }

// gate[i] = act(gate[i]) · up[i] over n elements: the gated FFN's activation
// (every variant is defined in model/llama_ffn_activation.h).
void GatedActivation(const LlamaHParams& hp, float* gate, const float* up, int64_t n) {
  GatedFfnActivation(hp.ffn_act, hp.ffn_act_threshold, gate, up, n);
}

// gate[i] = act(gate[i]) alone (what FfnHook sees), the same arithmetic as
// GatedActivation before its multiplication by up (so a hook that masks
// nothing changes no bit); dReLU reads up for its zeros.
void Activation(const LlamaHParams& hp, float* gate, const float* up, int64_t n) {
  FfnActivationOnly(hp.ffn_act, hp.ffn_act_threshold, gate, up, n);
}

// cos/sin of position·inv_freq for every position of the batch: [b][half].
void RopeTables(const std::vector<float>& inv_freq, int n_past, int n, float* cos_dst,
                float* sin_dst) {
  cpu::RopeTables(inv_freq.data(), static_cast<int>(inv_freq.size()), n_past, n, cos_dst, sin_dst);
}

// Runs every job of the group on the rows of `src` (n_tokens rows of
// `src_ld` floats; all jobs share n_in). Activations are prepared once per
// distinct weight type.
void LinearGroup(Engine::Impl& m, const float* src, int64_t src_ld, int n_tokens,
                 const LinearJob* jobs, int n_jobs) {
  LinearPlan plan;
  PlanLinear(m, n_tokens, jobs, n_jobs, &plan);
  if (n_tokens > 1 && m.pool->size() > 1) {
    // A batch's activations are quantized by every thread, a token each in
    // turn (serial, the other threads would wait); a token's bytes do not
    // depend on who writes them.
    m.pool->Run([&](int ith, int nth) {
      for (int t = 0; t < plan.n_types; ++t) {
        for (int b = ith; b < n_tokens; b += nth) {
          plan.tks[t]->quantize_act(src + b * src_ld, plan.n_in,
                                    plan.acts[t] + plan.strides[t] * b);
        }
      }
    });
  } else {
    PrepareLinear(plan, src, src_ld);
  }
  // A static split. Row chunks the threads claim in turn (tried: 8 per thread) kept a worker
  // that lost its core from holding back half the rows, but on a quiet machine they cost Gemma 3
  // 270M's pp512 5–15 % on AVX-512 (1080 → 925–1030 t/s, 2 threads, by chunk size),
  // docs/performance.md.
  m.pool->Run([&](int ith, int nth) { RunLinearPart(plan, ith, nth); });
}

// Whether one token (decode) runs on the task graph: EngineOptions::executor,
// overridden by KAIROX_EXEC=pool|graph (read once per process). With work on the device
// (the split FFN, device layers, the head) also EngineOptions::graph_with_device
// (KAIROX_EXEC=graph overrides it).
bool UseGraph(const EngineOptions& options, bool device_work) {
  static const int env = [] {
    const char* v = std::getenv("KAIROX_EXEC");
    if (v == nullptr) return -1;
    if (std::strcmp(v, "pool") == 0) return static_cast<int>(EngineOptions::Executor::kPool);
    if (std::strcmp(v, "graph") == 0) return static_cast<int>(EngineOptions::Executor::kGraph);
    Log().warn("KAIROX_EXEC={} is neither pool nor graph: ignored", v);
    return -1;
  }();
  const auto e = env >= 0 ? static_cast<EngineOptions::Executor>(env) : options.executor;
  if (e != EngineOptions::Executor::kGraph) return false;
  return !device_work || env >= 0 || options.graph_with_device;
}

}  // namespace

void PlanLinear(Engine::Impl& m, int n_tokens, const LinearJob* jobs, int n_jobs, LinearPlan* plan,
                int first_act_row) {
  KX_CHECK(n_jobs > 0 && n_jobs <= kMaxLinearJobs);
  LinearPlan& p = *plan;
  p.n_jobs = n_jobs;
  p.n_tokens = n_tokens;
  p.n_in = jobs[0].w->n_in;
  p.n_types = 0;
  p.total_rows = 0;
  const size_t region = m.act.size() / kMaxLinearTypes;
  for (int j = 0; j < n_jobs; ++j) {
    p.jobs[j] = jobs[j];
    KX_CHECK(jobs[j].w->n_in == p.n_in);
    int t = 0;
    while (t < p.n_types && p.types[t] != jobs[j].w->type) ++t;
    if (t == p.n_types) {
      KX_CHECK(p.n_types < kMaxLinearTypes);
      p.types[t] = jobs[j].w->type;
      p.tks[t] = m.kernels->For(p.types[t]);
      p.strides[t] = p.tks[t]->act_bytes(p.n_in);
      p.acts[t] = m.act.data() + region * t + p.strides[t] * first_act_row;
      KX_CHECK(p.strides[t] * (first_act_row + n_tokens) <= region);
      ++p.n_types;
    }
    p.job_type[j] = t;
    p.total_rows += jobs[j].w->n_out;
  }
}

void PrepareLinear(const LinearPlan& p, const float* src, int64_t src_ld) {
  for (int t = 0; t < p.n_types; ++t) {
    for (int b = 0; b < p.n_tokens; ++b) {
      p.tks[t]->quantize_act(src + b * src_ld, p.n_in, p.acts[t] + p.strides[t] * b);
    }
  }
}

void PrepareLinearRange(const LinearPlan& p, const float* src, int64_t begin, int64_t end) {
  KX_CHECK(p.n_tokens == 1 && begin % cpu::kQ16ABlock == 0 &&
           (end % cpu::kQ16ABlock == 0 || end == p.n_in) && 0 <= begin && end <= p.n_in);
  for (int t = 0; t < p.n_types; ++t) {
    p.tks[t]->quantize_act(src + begin, end - begin, p.acts[t] + p.tks[t]->act_bytes(begin));
  }
}

void RunLinearPart(const LinearPlan& p, int ith, int nth) {
  int64_t begin, end;
  ThreadPool::Split(p.total_rows, ith, nth, kRowAlign, &begin, &end);
  RunLinearRows(p, begin, end);
}

void RunLinearRows(const LinearPlan& p, int64_t begin, int64_t end) {
  int64_t base = 0;
  for (int j = 0; j < p.n_jobs && begin < end; ++j) {
    const WeightRef& w = *p.jobs[j].w;
    const int64_t lo = std::max(begin, base), hi = std::min(end, base + w.n_out);
    if (lo < hi) {
      const int64_t r0 = lo - base, rows = hi - lo;
      const int t = p.job_type[j];
      if (p.n_tokens == 1) {
        p.tks[t]->matvec(w.row(r0), w.row_bytes, p.n_in, rows, p.acts[t], p.jobs[j].dst + r0);
      } else {
        p.tks[t]->matmul(w.row(r0), w.row_bytes, p.n_in, rows, p.acts[t], p.strides[t], p.n_tokens,
                         p.jobs[j].dst + r0, p.jobs[j].ldd);
      }
    }
    base += w.n_out;
  }
}

int64_t RunGateUpActRange(Engine::Impl& m, const LinearPlan& gate_up, const LinearPlan& down,
                          int64_t begin, int64_t end) {
  const int64_t ff = m.hp.n_ff;
  if (begin >= end) return 0;
  RunLinearRows(gate_up, begin, end);            // gate
  RunLinearRows(gate_up, ff + begin, ff + end);  // up
  const int64_t start = NowNs();
  GatedActivation(m.hp, &m.gate[begin], &m.up[begin], end - begin);
  PrepareLinearRange(down, m.gate.data(), begin, end);
  return NowNs() - start;
}

void PlanAttention(Engine::Impl& m, int layer, int n, AttnPlan* plan) {
  plan->m = &m;
  plan->layer = layer;
  plan->n = n;
  plan->n_past = m.n_past;
  plan->window = m.Window(layer);
  plan->n_chunks = 0;
  if (n == 1) {
    const int first_key = std::max(0, m.n_past + 1 - plan->window);
    plan->n_chunks = cpu::AttnChunks(m.n_past + 1 - first_key);
  }
}

namespace {

// The keys a query at pos sees in KV head kvh's run of the layer: [first, pos], which wraps
// at the end of a sliding-window layer's ring (engine_impl.h kv_slots).
cpu::KvRun KeyRun(const Engine::Impl& m, const AttnPlan& a, int pos, int kvh) {
  const int first = std::max(0, pos + 1 - a.window);
  const int slots = m.kv_slots[a.layer];
  const size_t k0 = KvOffset(m, a.layer, kvh, first), base = KvOffset(m, a.layer, kvh, 0);
  cpu::KvRun run;
  run.k0 = m.k_cache.data() + k0;
  run.v0 = m.v_cache.data() + k0;
  run.row_stride_bytes = m.kv_head_bytes;
  run.n_keys = pos + 1 - first;
  run.n_contig = slots - first % slots;
  run.k_wrap = m.k_cache.data() + base;
  run.v_wrap = m.v_cache.data() + base;
  if (m.kv_k_blocked) {
    run.k_blocks = run.k_wrap;
    run.k_slot0 = first % slots;
  }
  return run;
}

}  // namespace

void RunAttentionPart(const AttnPlan& a, int ith, int nth) {
  Engine::Impl& m = *a.m;
  const LlamaHParams& hp = m.hp;
  const int hd = hp.head_dim, qd = hp.q_dim();
  const int g = hp.n_head / hp.n_head_kv;
  const bool kv_q8 = m.kv_type == EngineOptions::KvType::kQ8_0;
  float* scratch = &m.scores[static_cast<size_t>(ith) * m.scores_per_thread];
  if (a.n_chunks > 0) {
    // One token: a task per (KV head, chunk), thread ith taking a contiguous range of them, so
    // its keys are one stream through memory (a head's chunks are consecutive in the cache)
    // that the prefetchers follow from one chunk into the next.
    const int n_tasks = hp.n_head_kv * a.n_chunks;
    for (int u = n_tasks * ith / nth; u < n_tasks * (ith + 1) / nth; ++u) {
      const int kvh = u / a.n_chunks, c = u % a.n_chunks;
      cpu::AttendChunk(*m.kernels, kv_q8, &m.q[kvh * g * hd], g, KeyRun(m, a, a.n_past, kvh), c, hd,
                       hp.attn_scale, scratch, &m.attn_parts[u * cpu::AttnPartFloats(g, hd)]);
    }
    return;
  }
  for (int u = ith; u < a.n * hp.n_head_kv; u += nth) {  // a batch: a task per (token, KV head)
    const int b = u / hp.n_head_kv, kvh = u % hp.n_head_kv;
    cpu::AttendGroup(*m.kernels, kv_q8, &m.q[b * qd + kvh * g * hd], g,
                     KeyRun(m, a, a.n_past + b, kvh), hd, hp.attn_scale, scratch,
                     &m.attn[b * qd + kvh * g * hd]);
  }
}

void FinishAttention(const AttnPlan& a) {
  if (a.n_chunks == 0) return;
  Engine::Impl& m = *a.m;
  const int hd = m.hp.head_dim, g = m.hp.n_head / m.hp.n_head_kv;
  for (int kvh = 0; kvh < m.hp.n_head_kv; ++kvh) {
    cpu::MergeChunks(&m.attn_parts[kvh * a.n_chunks * cpu::AttnPartFloats(g, hd)], a.n_chunks, g,
                     hd, &m.attn[kvh * g * hd]);
  }
}

void EmbedStage(Engine::Impl& m, const int32_t* tokens, int n) {
  const int d = m.hp.n_embd;
  const cpu::TypeKernels* tk = m.kernels->For(m.w.tok_embd.type);
  for (int b = 0; b < n; ++b) tk->dequantize(m.w.tok_embd.row(tokens[b]), &m.x[b * d], d);
  if (m.hp.embd_scale != 1.0f) {
    for (int i = 0; i < n * d; ++i) m.x[i] *= m.hp.embd_scale;
  }
  RopeTables(m.inv_freq, m.n_past, n, m.rope_cos.data(), m.rope_sin.data());
  if (!m.inv_freq_local.empty()) {
    RopeTables(m.inv_freq_local, m.n_past, n, m.rope_cos_local.data(), m.rope_sin_local.data());
  }
}

void AttnNormStage(Engine::Impl& m, int layer, int n) {
  const int d = m.hp.n_embd;
  const float* norm = F32(m.w.layers[layer].attn_norm);
  for (int b = 0; b < n; ++b) cpu::RmsNorm(&m.x[b * d], norm, &m.xn[b * d], d, m.hp.rms_eps);
}

void QkvBiasStage(Engine::Impl& m, int layer, int n) {
  if (!m.hp.qkv_bias) return;
  const LlamaLayerWeights& L = m.w.layers[layer];
  const int qd = m.hp.q_dim(), kvd = static_cast<int>(m.kv_dim);
  for (int b = 0; b < n; ++b) {
    AddBias(&m.q[b * qd], L.bq, qd);
    AddBias(&m.k[b * kvd], L.bk, kvd);
    AddBias(&m.v[b * kvd], L.bv, kvd);
  }
}

void QkNormStage(Engine::Impl& m, int layer, int n) {
  const LlamaHParams& hp = m.hp;
  if (!hp.qk_norm) return;
  const LlamaLayerWeights& L = m.w.layers[layer];
  const int qd = hp.q_dim(), kvd = static_cast<int>(m.kv_dim), hd = hp.head_dim;
  for (int b = 0; b < n; ++b) {
    for (int h = 0; h < hp.n_head; ++h) {
      float* qh = &m.q[b * qd + h * hd];
      cpu::RmsNorm(qh, F32(L.attn_q_norm), qh, hd, hp.rms_eps);
    }
    for (int h = 0; h < hp.n_head_kv; ++h) {
      float* kh = &m.k[b * kvd + h * hd];
      cpu::RmsNorm(kh, F32(L.attn_k_norm), kh, hd, hp.rms_eps);
    }
  }
}

void RopeStage(Engine::Impl& m, int layer, int n) {
  const LlamaHParams& hp = m.hp;
  const int qd = hp.q_dim(), kvd = static_cast<int>(m.kv_dim), hd = hp.head_dim;
  const int half_rot = hp.n_rot / 2;
  const bool local = hp.IsLocalLayer(layer);
  const bool kv_q8 = m.kv_type == EngineOptions::KvType::kQ8_0;
  uint8_t* kc = m.k_cache.data();
  uint8_t* vc = m.v_cache.data();
  const std::vector<float>& cos_table = local ? m.rope_cos_local : m.rope_cos;
  const std::vector<float>& sin_table = local ? m.rope_sin_local : m.rope_sin;
  for (int b = 0; b < n; ++b) {
    const float* ct = &cos_table[b * half_rot];
    const float* st = &sin_table[b * half_rot];
    for (int h = 0; h < hp.n_head; ++h) {
      cpu::RopeHead(&m.q[b * qd + h * hd], ct, st, hp.n_rot, hp.rope_style == RopeStyle::kNeox);
    }
    for (int h = 0; h < hp.n_head_kv; ++h) {
      cpu::RopeHead(&m.k[b * kvd + h * hd], ct, st, hp.n_rot, hp.rope_style == RopeStyle::kNeox);
    }
    for (int h = 0; h < hp.n_head_kv; ++h) {  // head-major: head h's run, row pos
      const size_t at = KvOffset(m, layer, h, m.n_past + b);
      const float* kh = &m.k[b * kvd + h * hd];
      const float* vh = &m.v[b * kvd + h * hd];
      if (kv_q8) {
        // Quantize-on-write; heads are whole blocks (head_dim % 32 == 0, checked at load).
        const absl::Status ks = cpu::QuantizeRow(GgmlType::kQ8_0, kh, hd, kc + at);
        const absl::Status vs = cpu::QuantizeRow(GgmlType::kQ8_0, vh, hd, vc + at);
        KX_CHECK_MSG(ks.ok() && vs.ok(), "Q8_0 KV quantization failed");
      } else if (m.kv_k_blocked) {
        uint16_t key[cpu::kAttnMaxHeadDim];
        m.kernels->vec.f32_to_f16(kh, key, hd);
        cpu::StoreKeyBlocked(key, hd, KvF16(kc + KvHeadOffset(m, layer, h)),
                             (m.n_past + b) % m.kv_slots[layer]);
        m.kernels->vec.f32_to_f16(vh, KvF16(vc + at), hd);
      } else {
        m.kernels->vec.f32_to_f16(kh, KvF16(kc + at), hd);
        m.kernels->vec.f32_to_f16(vh, KvF16(vc + at), hd);
      }
    }
  }
}

// ffo holds the attention output: post norm (Gemma), then the residual.
void AttnResidualStage(Engine::Impl& m, int layer, int n) {
  const int d = m.hp.n_embd;
  if (m.hp.post_norms) {
    const float* post = F32(m.w.layers[layer].post_attention_norm);
    for (int b = 0; b < n; ++b) cpu::RmsNorm(&m.ffo[b * d], post, &m.ffo[b * d], d, m.hp.rms_eps);
  }
  for (int i = 0; i < n * d; ++i) m.x[i] += m.ffo[i];
}

void FfnNormStage(Engine::Impl& m, int layer, int n) {
  const int d = m.hp.n_embd;
  const float* norm = F32(m.w.layers[layer].ffn_norm);
  for (int b = 0; b < n; ++b) cpu::RmsNorm(&m.x[b * d], norm, &m.xn[b * d], d, m.hp.rms_eps);
}

void FfnActStage(Engine::Impl& m, int n, FfnHook* hook, int layer) {
  const int64_t count = static_cast<int64_t>(n) * m.hp.n_ff;
  if (hook != nullptr) {
    Activation(m.hp, m.gate.data(), m.up.data(), count);
    hook->OnActivations(layer, n, m.gate.data());
    for (int64_t i = 0; i < count; ++i) m.gate[i] *= m.up[i];
  } else if (n > 1) {
    // Element-wise, so split across the pool (ffn_act was ~5 % of a 1-thread
    // prefill on Qwen 1.5B after kquant_gemm.h, all of it serial).
    constexpr int64_t kAlign = 64;
    m.pool->Run([&](int ith, int nth) {
      int64_t begin, end;
      ThreadPool::Split(count, ith, nth, kAlign, &begin, &end);
      if (begin < end) GatedActivation(m.hp, &m.gate[begin], &m.up[begin], end - begin);
    });
  } else {
    GatedActivation(m.hp, m.gate.data(), m.up.data(), count);
  }
}

// ffo holds the FFN output: post-FFN norm (Gemma), then the residual.
void FfnResidualStage(Engine::Impl& m, int layer, int n) {
  const int d = m.hp.n_embd;
  if (m.hp.post_norms) {
    const float* post = F32(m.w.layers[layer].post_ffw_norm);
    for (int b = 0; b < n; ++b) cpu::RmsNorm(&m.ffo[b * d], post, &m.ffo[b * d], d, m.hp.rms_eps);
  }
  for (int i = 0; i < n * d; ++i) m.x[i] += m.ffo[i];
}

void OutNormStage(Engine::Impl& m, int first, int n) {
  const int d = m.hp.n_embd;
  const float* norm = F32(m.w.output_norm);
  for (int b = first; b < n; ++b) cpu::RmsNorm(&m.x[b * d], norm, &m.xn[b * d], d, m.hp.rms_eps);
}

void SoftcapStage(Engine::Impl& m, float* logits, int rows) {
  if (m.hp.final_logit_softcap <= 0.0f) return;
  const float cap = m.hp.final_logit_softcap;
  const int64_t count = static_cast<int64_t>(rows) * m.hp.n_vocab;
  for (int64_t i = 0; i < count; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

// Layer l's attention block on the CPU for the batch: norm, Q/K/V (+ biases, QK-norm), RoPE
// and the KV cache, attention, the O projection and the residual add.
static void AttentionBlockCpu(Engine::Impl& m, int l, int n) {
  const LlamaLayerWeights& L = m.w.layers[l];
  const int d = m.hp.n_embd, kvd = static_cast<int>(m.kv_dim), qd = m.hp.q_dim();
  {
    OpTimer timer(m, Op::kNorm);
    AttnNormStage(m, l, n);
  }
  {
    OpTimer timer(m, Op::kQkv);
    const LinearJob jobs[] = {
        {&L.wq, m.q.data(), qd}, {&L.wk, m.k.data(), kvd}, {&L.wv, m.v.data(), kvd}};
    LinearGroup(m, m.xn.data(), d, n, jobs, 3);
    QkvBiasStage(m, l, n);
  }
  if (m.hp.qk_norm) {
    OpTimer timer(m, Op::kNorm);
    QkNormStage(m, l, n);
  }
  {
    OpTimer timer(m, Op::kRope);
    RopeStage(m, l, n);
  }
  {
    OpTimer timer(m, Op::kAttention);
    AttnPlan plan;
    PlanAttention(m, l, n, &plan);
    m.pool->Run([&](int ith, int nth) { RunAttentionPart(plan, ith, nth); });
    FinishAttention(plan);
  }
  {
    OpTimer timer(m, Op::kAttnOut);
    const LinearJob jobs[] = {{&L.wo, m.ffo.data(), d}};
    LinearGroup(m, m.attn.data(), qd, n, jobs, 1);
    AttnResidualStage(m, l, n);
  }
}

void Engine::Impl::ForwardBatch(const int32_t* tokens, int n, int first_logit, float* logits_dst) {
  kv_end = std::max(kv_end, n_past + n);  // RopeStage writes positions up to n_past + n − 1
  // One token (decode) on the task graph, unless a profiling hook watches
  // the FFN (kairox-prepare), which only the pool path calls. The device's work (device
  // layers, the head, the split FFN) is externals there (engine/decode_graph.h).
  const bool device_work =
      device != nullptr && (device->n_layers() > 0 || device->head() || device_ffn != nullptr);
  if (n == 1 && ffn_hook == nullptr && UseGraph(options, device_work)) {
    if (decode_graph == nullptr || !decode_graph->Current()) {
      auto g = DecodeGraph::Create(*this);
      KX_CHECK_MSG(g.ok(), std::string(g.status().message()).c_str());
      decode_graph = std::move(*g);
    }
    decode_graph->Run(tokens[0], first_logit < n ? logits_dst : nullptr);
    return;
  }
  const int d = hp.n_embd, ff = hp.n_ff;

  {
    OpTimer timer(*this, Op::kEmbed);
    EmbedStage(*this, tokens, n);
  }

  for (int l = 0; l < hp.n_layer; ++l) {
    // The caller's abort check between layers (Engine::SetAbortCheck; Eval drops the batch).
    // Not under a RAM tier, whose next layer's reads are already in flight.
    if (l > 0 && (sparse == nullptr || sparse->tier() == nullptr) && Aborting(l)) return;
    const LlamaLayerWeights& L = w.layers[l];
    if (device != nullptr && device->OnDevice(l)) {
      // The layer's attention block on the device, token by token (each token's attention
      // reads the keys the previous ones wrote); a device error is kept by DeviceLayers and
      // returned by Eval.
      OpTimer timer(*this, Op::kAttention);
      for (int b = 0; b < n; ++b) {
        if (!device->AttentionBlock(l, &x[static_cast<size_t>(b) * d], n_past + b).ok()) return;
      }
    } else {
      AttentionBlockCpu(*this, l, n);
    }
    {
      OpTimer timer(*this, Op::kNorm);
      FfnNormStage(*this, l, n);
    }
    // Activation sparsity: a profiling hook, else the sparse runtime, sees
    // the FFN input (predicting the next layer) and may mask activations.
    FfnHook* hook = ffn_hook != nullptr ? ffn_hook : sparse.get();
    if (hook != nullptr) {
      OpTimer timer(*this, Op::kPredict);
      hook->OnFfnInput(l, n, xn.data());
    }
    if (ffn_hook == nullptr && sparse != nullptr && sparse->UsesBundles(n)) {
      OpTimer timer(*this, Op::kFfnSparse);
      sparse->RunBundles(l, xn.data(), ffo.data(), *pool);
    } else {
      {
        OpTimer timer(*this, Op::kFfnGateUp);
        const LinearJob jobs[] = {{&L.ffn_gate, gate.data(), ff}, {&L.ffn_up, up.data(), ff}};
        LinearGroup(*this, xn.data(), d, n, jobs, 2);
      }
      {
        OpTimer timer(*this, Op::kFfnAct);
        FfnActStage(*this, n, hook, l);
      }
      OpTimer timer(*this, Op::kFfnDown);
      const LinearJob jobs[] = {{&L.ffn_down, ffo.data(), d}};
      LinearGroup(*this, gate.data(), ff, n, jobs, 1);
    }
    {
      OpTimer timer(*this, Op::kNorm);  // post-FFN norm (Gemma) and the residual
      FfnResidualStage(*this, l, n);
    }
  }

  if (logits_dst == nullptr || first_logit >= n) return;
  if (device != nullptr && device->head()) {
    OpTimer timer(*this, Op::kLmHead);
    for (int b = first_logit; b < n; ++b) {
      float* row = logits_dst + static_cast<size_t>(b - first_logit) * hp.n_vocab;
      if (!device->Head(&x[static_cast<size_t>(b) * d], row).ok()) return;
    }
    SoftcapStage(*this, logits_dst, n - first_logit);
    return;
  }
  {
    OpTimer timer(*this, Op::kNorm);
    OutNormStage(*this, first_logit, n);
  }
  OpTimer timer(*this, Op::kLmHead);
  const LinearJob jobs[] = {{&w.output, logits_dst, hp.n_vocab}};
  LinearGroup(*this, &xn[first_logit * d], d, n - first_logit, jobs, 1);
  SoftcapStage(*this, logits_dst, n - first_logit);
}

}  // namespace kx
