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
#include "engine/engine_impl.h"
#include "kernels/cpu/quantize.h"

namespace kx {
namespace {

// The F16 KV cache's rows, stored as bytes (engine_impl.h: the same buffer
// holds Q8_0 blocks with KvType::kQ8_0); offsets are always even.
uint16_t* KvF16(uint8_t* p) { return reinterpret_cast<uint16_t*>(p); }

// Rows per unit when splitting a linear op across threads: keeps the kernels'
// multi-row inner loops full.
constexpr int64_t kRowAlign = 8;

class OpTimer {
 public:
  OpTimer(Engine::Impl& m, Op op) : m_(m), op_(static_cast<int>(op)), start_(NowNs()) {}
  ~OpTimer() {
    m_.op_ns[op_] += NowNs() - start_;
    m_.op_calls[op_] += 1;
  }

 private:
  Engine::Impl& m_;
  int op_;
  int64_t start_;
};

void RmsNorm(const float* src, const float* weight, float* dst, int n, float eps) {
  double sum_sq = 0.0;
  for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(src[i]) * src[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (int i = 0; i < n; ++i) dst[i] = src[i] * scale * weight[i];
}

// One matrix of a linear group: dst[b·ldd + r] = W[r]·src_b.
struct LinearJob {
  const WeightRef* w;
  float* dst;
  int64_t ldd;
};

// ---- oneDNN bf16 prefill (engine/dnnl_linear.h; owner: dnnl) ----
// The prefill path: EngineOptions::prefill, overridden by
// KAIROX_PREFILL=native|dnnl|dnnl-fast (read once per process).
EngineOptions::Prefill PrefillPath(const EngineOptions& options) {
  using P = EngineOptions::Prefill;
  static const int env = [] {
    const char* v = std::getenv("KAIROX_PREFILL");
    if (v == nullptr) return -1;
    if (std::strcmp(v, "native") == 0) return static_cast<int>(P::kNative);
    if (std::strcmp(v, "dnnl") == 0) return static_cast<int>(P::kDnnl);
    if (std::strcmp(v, "dnnl-fast") == 0) return static_cast<int>(P::kDnnlFast);
    return -1;
  }();
  return env >= 0 ? static_cast<P>(env) : options.prefill;
}

// Runs the group through oneDNN when wanted, supported and the batch is at
// least dnnl_min_batch tokens; false: the caller runs it natively.
bool TryDnnlGroup(Engine::Impl& m, const float* src, int64_t src_ld, int n_tokens,
                  const LinearJob* jobs, int n_jobs) {
  // Below these batch sizes the native kernels were faster (kairox-bench's
  // per-shape measurements, 1 and 2 threads): a split-activation matmul is
  // two bf16 matmuls, so it needs larger batches to win.
  constexpr int kSplitMinBatch = 32, kFastMinBatch = 8;
  const EngineOptions::Prefill path = PrefillPath(m.options);
  if (m.dnnl_off || path == EngineOptions::Prefill::kNative) return false;
  const int min_batch = m.options.dnnl_min_batch > 0 ? m.options.dnnl_min_batch
                        : path == EngineOptions::Prefill::kDnnl ? kSplitMinBatch
                                                                : kFastMinBatch;
  if (n_tokens < std::max(2, min_batch)) return false;
  if (m.dnnl == nullptr) {
    if (!DnnlLinear::Supported()) {
      Log().warn("oneDNN has no optimized bf16 matmul on this CPU: prefill stays native");
      m.dnnl_off = true;
      return false;
    }
    m.dnnl = std::make_unique<DnnlLinear>(m.pool->size(),
                                          /*split_src=*/path == EngineOptions::Prefill::kDnnl);
  }
  DnnlLinear::Job dj[4];
  KX_CHECK(n_jobs <= 4);
  for (int j = 0; j < n_jobs; ++j) dj[j] = {jobs[j].w, jobs[j].dst, jobs[j].ldd};
  if (m.dnnl->RunGroup(src, src_ld, n_tokens, dj, n_jobs, *m.pool)) return true;
  // A weight type without a dequantizer, or a oneDNN error: native from now on.
  Log().warn("oneDNN prefill off for this session: {}",
             m.dnnl->ok() ? "a weight type cannot be converted to bf16" : m.dnnl->error());
  m.dnnl_off = true;
  return false;
}
// ---- end oneDNN bf16 prefill ----

// Runs every job of the group on the rows of `src` (n_tokens rows of
// `src_ld` floats; all jobs share n_in). Activations are prepared once per
// distinct weight type.
void LinearGroup(Engine::Impl& m, const float* src, int64_t src_ld, int n_tokens,
                 const LinearJob* jobs, int n_jobs) {
  if (TryDnnlGroup(m, src, src_ld, n_tokens, jobs, n_jobs)) return;  // oneDNN bf16 prefill
  constexpr int kMaxTypes = 2;
  constexpr int kMaxJobs = 4;
  KX_CHECK(n_jobs > 0 && n_jobs <= kMaxJobs);
  const int64_t n_in = jobs[0].w->n_in;
  GgmlType types[kMaxTypes];
  const cpu::TypeKernels* tks[kMaxTypes];
  uint8_t* acts[kMaxTypes];
  size_t strides[kMaxTypes];
  int n_types = 0;
  int job_type[kMaxJobs];
  const size_t region = m.act.size() / kMaxTypes;
  for (int j = 0; j < n_jobs; ++j) {
    KX_CHECK(jobs[j].w->n_in == n_in);
    int t = 0;
    while (t < n_types && types[t] != jobs[j].w->type) ++t;
    if (t == n_types) {
      KX_CHECK(n_types < kMaxTypes);
      types[t] = jobs[j].w->type;
      tks[t] = m.kernels->For(types[t]);
      strides[t] = tks[t]->act_bytes(n_in);
      acts[t] = m.act.data() + region * t;
      KX_CHECK(strides[t] * n_tokens <= region);
      for (int b = 0; b < n_tokens; ++b) {
        tks[t]->quantize_act(src + b * src_ld, n_in, acts[t] + strides[t] * b);
      }
      ++n_types;
    }
    job_type[j] = t;
  }
  int64_t total_rows = 0;
  for (int j = 0; j < n_jobs; ++j) total_rows += jobs[j].w->n_out;

  m.pool->Run([&](int ith, int nth) {
    int64_t begin, end;
    ThreadPool::Split(total_rows, ith, nth, kRowAlign, &begin, &end);
    int64_t base = 0;
    for (int j = 0; j < n_jobs && begin < end; ++j) {
      const WeightRef& w = *jobs[j].w;
      const int64_t lo = std::max(begin, base), hi = std::min(end, base + w.n_out);
      if (lo < hi) {
        const int64_t r0 = lo - base, rows = hi - lo;
        const int t = job_type[j];
        if (n_tokens == 1) {
          tks[t]->matvec(w.row(r0), w.row_bytes, n_in, rows, acts[t], jobs[j].dst + r0);
        } else {
          tks[t]->matmul(w.row(r0), w.row_bytes, n_in, rows, acts[t], strides[t], n_tokens,
                         jobs[j].dst + r0, jobs[j].ldd);
        }
      }
      base += w.n_out;
    }
  });
}

// Rotates pairs of one head in place (RoPE), with cos/sin for its position.
// Only the first n_rot dimensions rotate; NeoX pairs dimension i with
// i + n_rot/2 (not head_dim/2) when the rotation is partial.
void RopeHead(float* h, const float* cos_t, const float* sin_t, int n_rot, RopeStyle style) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int a = style == RopeStyle::kAdjacent ? 2 * i : i;
    const int b = style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
    const float x0 = h[a], x1 = h[b];
    h[a] = x0 * cos_t[i] - x1 * sin_t[i];
    h[b] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

void AddBias(float* dst, const WeightRef& bias, int n) {
  const auto* b = reinterpret_cast<const float*>(bias.data);
  for (int i = 0; i < n; ++i) dst[i] += b[i];
}

const float* F32(const WeightRef& w) { return reinterpret_cast<const float*>(w.data); }

// sqrt(2/π), the tanh approximation's constant, and its cubic coefficient.
constexpr float kGeluTanhScale = 0.7978845608028654f;
constexpr float kGeluTanhCubic = 0.044715f;

// gate[i] = act(gate[i]) · up[i] over n elements: the gated FFN's activation.
void GatedActivation(FfnActivation act, float* gate, const float* up, int64_t n) {
  switch (act) {
    case FfnActivation::kSilu:
      for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
      }
      return;
    case FfnActivation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float t = std::tanh(kGeluTanhScale * (g + kGeluTanhCubic * g * g * g));
        gate[i] = 0.5f * g * (1.0f + t) * up[i];
      }
      return;
    case FfnActivation::kRelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > 0.0f ? gate[i] * up[i] : 0.0f;
      return;
  }
}

// gate[i] = act(gate[i]) alone, the same arithmetic as GatedActivation before
// its multiplication by up (so a hook that masks nothing changes no bit).
void Activation(FfnActivation act, float* gate, int64_t n) {
  switch (act) {
    case FfnActivation::kSilu:
      for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i]));
      return;
    case FfnActivation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float t = std::tanh(kGeluTanhScale * (g + kGeluTanhCubic * g * g * g));
        gate[i] = 0.5f * g * (1.0f + t);
      }
      return;
    case FfnActivation::kRelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > 0.0f ? gate[i] : 0.0f;
      return;
  }
}

// cos/sin of position·inv_freq for every position of the batch: [b][half].
void RopeTables(const std::vector<float>& inv_freq, int n_past, int n, float* cos_dst,
                float* sin_dst) {
  const int half = static_cast<int>(inv_freq.size());
  for (int b = 0; b < n; ++b) {
    const double pos = static_cast<double>(n_past + b);
    for (int i = 0; i < half; ++i) {
      const double theta = pos * inv_freq[i];
      cos_dst[b * half + i] = static_cast<float>(std::cos(theta));
      sin_dst[b * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

}  // namespace

void Engine::Impl::ForwardBatch(const int32_t* tokens, int n, int first_logit,
                                float* logits_dst) {
  const int d = hp.n_embd, ff = hp.n_ff, hd = hp.head_dim, kvd = static_cast<int>(kv_dim);
  const int qd = hp.q_dim();  // n_embd, except for Gemma's wide heads
  const int half_rot = hp.n_rot / 2;
  const int group = hp.n_head / hp.n_head_kv;
  const float attn_scale = hp.attn_scale;
  const cpu::VecKernels& vec = kernels->vec;

  {
    OpTimer timer(*this, Op::kEmbed);
    const cpu::TypeKernels* tk = kernels->For(w.tok_embd.type);
    for (int b = 0; b < n; ++b) tk->dequantize(w.tok_embd.row(tokens[b]), &x[b * d], d);
    if (hp.embd_scale != 1.0f) {
      for (int i = 0; i < n * d; ++i) x[i] *= hp.embd_scale;
    }
    RopeTables(inv_freq, n_past, n, rope_cos.data(), rope_sin.data());
    if (!inv_freq_local.empty()) {
      RopeTables(inv_freq_local, n_past, n, rope_cos_local.data(), rope_sin_local.data());
    }
  }

  for (int l = 0; l < hp.n_layer; ++l) {
    const LlamaLayerWeights& L = w.layers[l];
    const auto* attn_norm = reinterpret_cast<const float*>(L.attn_norm.data);
    const auto* ffn_norm = reinterpret_cast<const float*>(L.ffn_norm.data);
    uint8_t* kc = k_cache.data() + static_cast<size_t>(l) * n_ctx * kv_row_bytes;
    uint8_t* vc = v_cache.data() + static_cast<size_t>(l) * n_ctx * kv_row_bytes;
    const bool kv_q8 = kv_type == EngineOptions::KvType::kQ8_0;
    const bool local = hp.IsLocalLayer(l);
    // Keys a query at position p sees: (p − window, p]; all of [0, p] when global.
    const int window = local ? hp.sliding_window : n_ctx;

    {
      OpTimer timer(*this, Op::kNorm);
      for (int b = 0; b < n; ++b) RmsNorm(&x[b * d], attn_norm, &xn[b * d], d, hp.rms_eps);
    }
    {
      OpTimer timer(*this, Op::kQkv);
      const LinearJob jobs[] = {
          {&L.wq, q.data(), qd}, {&L.wk, k.data(), kvd}, {&L.wv, v.data(), kvd}};
      LinearGroup(*this, xn.data(), d, n, jobs, 3);
      if (hp.qkv_bias) {
        for (int b = 0; b < n; ++b) {
          AddBias(&q[b * qd], L.bq, qd);
          AddBias(&k[b * kvd], L.bk, kvd);
          AddBias(&v[b * kvd], L.bv, kvd);
        }
      }
    }
    if (hp.qk_norm) {
      OpTimer timer(*this, Op::kNorm);
      for (int b = 0; b < n; ++b) {
        for (int h = 0; h < hp.n_head; ++h) {
          float* qh = &q[b * qd + h * hd];
          RmsNorm(qh, F32(L.attn_q_norm), qh, hd, hp.rms_eps);
        }
        for (int h = 0; h < hp.n_head_kv; ++h) {
          float* kh = &k[b * kvd + h * hd];
          RmsNorm(kh, F32(L.attn_k_norm), kh, hd, hp.rms_eps);
        }
      }
    }
    {
      OpTimer timer(*this, Op::kRope);
      const std::vector<float>& cos_table = local ? rope_cos_local : rope_cos;
      const std::vector<float>& sin_table = local ? rope_sin_local : rope_sin;
      for (int b = 0; b < n; ++b) {
        const float* ct = &cos_table[b * half_rot];
        const float* st = &sin_table[b * half_rot];
        for (int h = 0; h < hp.n_head; ++h) {
          RopeHead(&q[b * qd + h * hd], ct, st, hp.n_rot, hp.rope_style);
        }
        for (int h = 0; h < hp.n_head_kv; ++h) {
          RopeHead(&k[b * kvd + h * hd], ct, st, hp.n_rot, hp.rope_style);
        }
        const size_t pos = static_cast<size_t>(n_past + b);
        if (kv_q8) {
          // Quantize-on-write; heads are whole blocks (head_dim % 32 == 0,
          // checked at load), so each head's row is its own run of blocks.
          const absl::Status ks = cpu::QuantizeRow(GgmlType::kQ8_0, &k[b * kvd], kvd,
                                                   kc + pos * kv_row_bytes);
          const absl::Status vs = cpu::QuantizeRow(GgmlType::kQ8_0, &v[b * kvd], kvd,
                                                   vc + pos * kv_row_bytes);
          KX_CHECK_MSG(ks.ok() && vs.ok(), "Q8_0 KV quantization failed");
        } else {
          vec.f32_to_f16(&k[b * kvd], KvF16(kc + pos * kv_row_bytes), kvd);
          vec.f32_to_f16(&v[b * kvd], KvF16(vc + pos * kv_row_bytes), kvd);
        }
      }
    }
    {
      OpTimer timer(*this, Op::kAttention);
      const int pairs = n * hp.n_head;
      pool->Run([&](int ith, int nth) {
        float* sc = &scores[static_cast<size_t>(ith) * n_ctx];
        for (int p = ith; p < pairs; p += nth) {
          const int b = p / hp.n_head, h = p % hp.n_head;
          const int kvh = h / group;
          const int pos = n_past + b;
          const int first_key = std::max(0, pos + 1 - window);
          const int n_keys = pos + 1 - first_key;
          const float* qh = &q[b * qd + h * hd];
          // Byte offset of the first key's head row (a head is whole Q8_0
          // blocks, so its offset scales like the row).
          const size_t key0 = static_cast<size_t>(first_key) * kv_row_bytes +
                              static_cast<size_t>(kvh) * hd * kv_row_bytes / kvd;
          if (kv_q8) {
            vec.dot_q8_0_rows(kc + key0, kv_row_bytes, n_keys, qh, hd, sc);
          } else {
            vec.dot_f16_rows(KvF16(kc + key0), kvd, n_keys, qh, hd, sc);
          }
          float max_s = -INFINITY;
          for (int t = 0; t < n_keys; ++t) {
            sc[t] *= attn_scale;
            max_s = std::max(max_s, sc[t]);
          }
          float sum = 0.0f;
          for (int t = 0; t < n_keys; ++t) {
            sc[t] = std::exp(sc[t] - max_s);
            sum += sc[t];
          }
          const float inv = 1.0f / sum;
          for (int t = 0; t < n_keys; ++t) sc[t] *= inv;
          float* out = &attn[b * qd + h * hd];
          std::memset(out, 0, sizeof(float) * hd);
          if (kv_q8) {
            vec.axpy_q8_0_rows(sc, vc + key0, kv_row_bytes, n_keys, out, hd);
          } else {
            vec.axpy_f16_rows(sc, KvF16(vc + key0), kvd, n_keys, out, hd);
          }
        }
      });
    }
    {
      OpTimer timer(*this, Op::kAttnOut);
      const LinearJob jobs[] = {{&L.wo, ffo.data(), d}};
      LinearGroup(*this, attn.data(), qd, n, jobs, 1);
      if (hp.post_norms) {
        const float* post = F32(L.post_attention_norm);
        for (int b = 0; b < n; ++b) RmsNorm(&ffo[b * d], post, &ffo[b * d], d, hp.rms_eps);
      }
      for (int i = 0; i < n * d; ++i) x[i] += ffo[i];
    }
    {
      OpTimer timer(*this, Op::kNorm);
      for (int b = 0; b < n; ++b) RmsNorm(&x[b * d], ffn_norm, &xn[b * d], d, hp.rms_eps);
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
        const int64_t count = static_cast<int64_t>(n) * ff;
        if (hook != nullptr) {
          Activation(hp.ffn_act, gate.data(), count);
          hook->OnActivations(l, n, gate.data());
          for (int64_t i = 0; i < count; ++i) gate[i] *= up[i];
        } else {
          GatedActivation(hp.ffn_act, gate.data(), up.data(), count);
        }
      }
      OpTimer timer(*this, Op::kFfnDown);
      const LinearJob jobs[] = {{&L.ffn_down, ffo.data(), d}};
      LinearGroup(*this, gate.data(), ff, n, jobs, 1);
    }
    {
      OpTimer timer(*this, Op::kNorm);  // post-FFN norm (Gemma) and the residual
      if (hp.post_norms) {
        const float* post = F32(L.post_ffw_norm);
        for (int b = 0; b < n; ++b) RmsNorm(&ffo[b * d], post, &ffo[b * d], d, hp.rms_eps);
      }
      for (int i = 0; i < n * d; ++i) x[i] += ffo[i];
    }
  }

  if (logits_dst == nullptr || first_logit >= n) return;
  const auto* out_norm = reinterpret_cast<const float*>(w.output_norm.data);
  {
    OpTimer timer(*this, Op::kNorm);
    for (int b = first_logit; b < n; ++b) RmsNorm(&x[b * d], out_norm, &xn[b * d], d, hp.rms_eps);
  }
  OpTimer timer(*this, Op::kLmHead);
  const LinearJob jobs[] = {{&w.output, logits_dst, hp.n_vocab}};
  LinearGroup(*this, &xn[first_logit * d], d, n - first_logit, jobs, 1);
  if (hp.final_logit_softcap > 0.0f) {
    const float cap = hp.final_logit_softcap;
    const int64_t count = static_cast<int64_t>(n - first_logit) * hp.n_vocab;
    for (int64_t i = 0; i < count; ++i) logits_dst[i] = cap * std::tanh(logits_dst[i] / cap);
  }
}

// oneDNN bf16 prefill (owner: dnnl).
uint64_t Engine::PrefillWeightBytes() const {
  return impl_->dnnl ? impl_->dnnl->weight_bytes() : 0;
}

}  // namespace kx
