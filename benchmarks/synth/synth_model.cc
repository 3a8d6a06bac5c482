#include "synth/synth_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/quantize.h"
#include "model/gguf_writer.h"
#include "synth/synth_rng.h"

namespace kx::synth {
namespace {

// Embedding = α·z_topic + β·ξ_token (unit norm): α sets the gate margin (a
// firing gate is ≥ α·kGateLo), β the LM head's.
constexpr double kAlpha = 0.8;
constexpr double kBeta = 0.6;
// LM head scale τ: the successor's logit is ≈ τ·β·(1 − cross-talk) ≈ 20 nats
// above the rest at n_embd 4096 (cross-talk of random unit vectors on the
// token part ~ 4/√|R|), so temperature-1 sampling follows it too.
constexpr double kHeadScale = 50.0;
constexpr double kGateLo = 1.0, kGateHi = 2.0;  // |gate coefficient| per topic
constexpr double kUpLo = 0.5, kUpHi = 1.5;      // |up coefficient| per topic
constexpr int kBosId = 1, kEosId = 2;           // byte tokens, as tests/engine/tiny_model.cc

// Streams of the counter-based RNG (synth_rng.h): one per kind of row, so a
// row's values depend only on (seed, stream, layer, row).
enum Stream : uint64_t {
  kDims = 1,
  kTokenDir,
  kCycle,
  kHot,
  kMember,
  kGate,
  kUp,
  kDown,
  kQ,
  kK,
  kV,
  kO,
};

// Per-thread scratch of the row functions.
struct Scratch {
  std::vector<float> xi, coef;
  std::vector<uint8_t> in;
};

// Everything the rows are computed from (small: O(n_embd + n_vocab + topics)).
struct Plan {
  SynthSpec spec;
  SynthDerived derived;
  int n_layer = 0, d = 0, f = 0, v = 0, k = 0, head_dim = 0;
  std::vector<int> topic_of_dim;  // -1: the token part R
  std::vector<float> zval;        // z_topic's value on each of its dimensions
  std::vector<int> token_dims;    // R
  std::vector<int> topic_of_token;
  std::vector<int> pred;  // the token before v on the cycle; -1: none (EOS is never next)
  std::vector<double> p_hot, p_cold;  // per layer
  double down_sigma = 0, wo_sigma = 0;
};

double LayerDensity(const SynthSpec& s, int n_layer, int l) {
  const std::vector<double>& sp = s.sparsity;
  if (sp.size() == 1 || n_layer == 1) return 1.0 - sp.front();
  const double pos = static_cast<double>(l) / (n_layer - 1) * static_cast<double>(sp.size() - 1);
  const size_t i = std::min(static_cast<size_t>(pos), sp.size() - 2);
  const double frac = pos - static_cast<double>(i);
  return 1.0 - (sp[i] * (1.0 - frac) + sp[i + 1] * frac);
}

// ξ_t on the token part: a unit vector.
void TokenDir(const Plan& p, int t, std::vector<float>& dst) {
  Rng rng(RowSeed(p.spec.seed, kTokenDir, 0, static_cast<uint64_t>(t)));
  dst.resize(p.token_dims.size());
  double sq = 0;
  for (float& x : dst) {
    x = static_cast<float>(rng.Symmetric(1.0));
    sq += static_cast<double>(x) * x;
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(sq));
  for (float& x : dst) x *= inv;
}

absl::StatusOr<Plan> MakePlan(const SynthSpec& spec) {
  Plan p;
  p.spec = spec;
  KX_ASSIGN_OR_RETURN(p.derived, Derive(spec));
  const SynthShape& sh = spec.shape;
  p.n_layer = spec.n_layer_override > 0 ? spec.n_layer_override : sh.n_layer;
  p.d = sh.n_embd;
  p.f = sh.n_ff;
  p.v = sh.n_vocab;
  p.k = spec.topics;
  p.head_dim = sh.n_embd / sh.n_head;
  // The dimensions: a random permutation, the first |R| for ξ, the rest dealt to the topics.
  Rng rng(RowSeed(spec.seed, kDims, 0, 0));
  std::vector<int> dims(p.d);
  for (int i = 0; i < p.d; ++i) dims[i] = i;
  rng.Shuffle(dims);
  const int n_token = static_cast<int>(std::lround(spec.token_fraction * p.d));
  p.topic_of_dim.assign(p.d, -1);
  p.zval.assign(p.d, 0.0f);
  std::vector<double> norm2(p.k, 0.0);
  for (int j = 0; j < p.d; ++j) {
    const int dim = dims[j];
    if (j < n_token) {
      p.token_dims.push_back(dim);
      continue;
    }
    const int topic = (j - n_token) % p.k;
    p.topic_of_dim[dim] = topic;
    const double mag = rng.Uniform(0.5, 1.5);
    p.zval[dim] = static_cast<float>(rng.Uniform() < 0.5 ? -mag : mag);
    norm2[topic] += mag * mag;
  }
  std::sort(p.token_dims.begin(), p.token_dims.end());
  for (int dim = 0; dim < p.d; ++dim) {
    if (p.topic_of_dim[dim] >= 0)
      p.zval[dim] /= static_cast<float>(std::sqrt(norm2[p.topic_of_dim[dim]]));
  }
  // One cycle through every token but EOS; the topic stays along it with probability q.
  Rng crng(RowSeed(spec.seed, kCycle, 0, 0));
  std::vector<int> order;
  for (int t = 0; t < p.v; ++t) {
    if (t != kEosId) order.push_back(t);
  }
  crng.Shuffle(order);
  p.topic_of_token.assign(p.v, 0);
  p.pred.assign(p.v, -1);
  int topic = static_cast<int>(crng.Below(p.k));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i > 0 && crng.Uniform() >= p.derived.topic_stay) {
      topic = static_cast<int>((topic + 1 + crng.Below(p.k - 1)) % p.k);
    }
    p.topic_of_token[order[i]] = topic;
    p.pred[order[(i + 1) % order.size()]] = order[i];
  }
  for (int l = 0; l < p.n_layer; ++l) {
    const double dl = p.derived.density[l];
    p.p_hot.push_back(spec.hot_share * dl / spec.hot_fraction);
    p.p_cold.push_back((1.0 - spec.hot_share) * dl / (1.0 - spec.hot_fraction));
  }
  // Block outputs of norm ≈ residual_mix next to the unit embedding. Attention:
  // v = Wv·x has unit-variance entries, their average over the context at most
  // norm √d, so Wo's entries get residual_mix / d. FFN: ~density·n_ff neurons
  // with |act·up| ≈ α²·E|c_g|·E|c_u| ≈ 1 (SiLU's negative side adds ~5 % of the
  // rest), so down's entries get residual_mix / √(active·d).
  const double active = p.f * (p.derived.density[0] + (spec.act == "silu" ? 0.05 : 0.0));
  p.down_sigma = spec.residual_mix / std::sqrt(active * p.d);
  p.wo_sigma = spec.residual_mix / p.d;
  return p;
}

// The hot neurons of a layer: exactly round(hot_fraction · n_ff) of them.
std::vector<uint8_t> HotSet(const Plan& p, int layer) {
  std::vector<int> perm(p.f);
  for (int i = 0; i < p.f; ++i) perm[i] = i;
  Rng rng(RowSeed(p.spec.seed, kHot, layer, 0));
  rng.Shuffle(perm);
  std::vector<uint8_t> hot(p.f, 0);
  const int n_hot = static_cast<int>(std::lround(p.spec.hot_fraction * p.f));
  for (int i = 0; i < n_hot; ++i) hot[perm[i]] = 1;
  return hot;
}

// S_n: which topics neuron n of `layer` fires for.
void Membership(const Plan& p, int layer, int n, bool hot, std::vector<uint8_t>& in) {
  Rng rng(RowSeed(p.spec.seed, kMember, layer, n));
  const double prob = hot ? p.p_hot[layer] : p.p_cold[layer];
  in.resize(p.k);
  for (auto& m : in) m = rng.Uniform() < prob;
}

// Fills rows [0, rows) of a matrix of `type` with row(r, float* dst) on
// n_threads threads; each row's values depend on r only.
template <typename RowFn>
absl::Status FillRows(GgmlType type, int64_t n_in, int64_t rows, int n_threads, uint8_t* dst,
                      RowFn row) {
  KX_ASSIGN_OR_RETURN(uint64_t row_bytes, TypeBytes(type, n_in));
  std::vector<absl::Status> status(std::max(1, n_threads));
  auto work = [&](int part) {
    std::vector<float> buf(n_in);
    Scratch scratch;
    for (int64_t r = part; r < rows; r += static_cast<int64_t>(status.size())) {
      row(r, buf.data(), scratch);
      absl::Status st = cpu::QuantizeRow(type, buf.data(), n_in, dst + r * row_bytes);
      if (!st.ok()) {
        status[part] = st;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < status.size(); ++i) threads.emplace_back(work, static_cast<int>(i));
  work(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& st : status) KX_RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

// The byte-level BPE alphabet (tests/engine/tiny_model.cc): byte b as one code point.
std::string ByteToken(int b) {
  auto printable = [](int c) {
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
  };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += !printable(c);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

void SetMetadata(GgufWriter& g, const Plan& p) {
  const SynthShape& sh = p.spec.shape;
  g.SetString("general.architecture", "llama");
  g.SetString("general.name",
              absl::StrCat("kairox-synth-", sh.name, " (shape of ", sh.follows, ")"));
  g.SetU32("llama.block_count", p.n_layer);
  g.SetU32("llama.context_length", sh.n_ctx_train);
  g.SetU32("llama.embedding_length", p.d);
  g.SetU32("llama.feed_forward_length", p.f);
  g.SetU32("llama.attention.head_count", sh.n_head);
  g.SetU32("llama.attention.head_count_kv", sh.n_head_kv);
  g.SetU32("llama.rope.dimension_count", p.head_dim);
  g.SetF32("llama.rope.freq_base", sh.rope_freq_base);
  g.SetF32("llama.attention.layer_norm_rms_epsilon", sh.rms_eps);
  // kairox's own key (lib/model/llama.cc); llama.cpp does not know it and
  // computes SwiGLU over the same bytes (the dense comparison is about speed).
  if (p.spec.act != "silu") g.SetString("llama.feed_forward_activation", p.spec.act);
  if (p.spec.act == "fatrelu") {
    g.SetF32("llama.feed_forward_activation_threshold", p.spec.fatrelu_threshold);
  }
  g.SetString("tokenizer.ggml.model", "gpt2");
  g.SetString("tokenizer.ggml.pre", "default");
  std::vector<std::string> tokens;
  for (int t = 0; t < p.v; ++t) tokens.push_back(t < 256 ? ByteToken(t) : absl::StrCat("x", t));
  g.SetArrayString("tokenizer.ggml.tokens", tokens);
  g.SetArrayI32("tokenizer.ggml.token_type", std::vector<int32_t>(p.v, 1));
  g.SetArrayString("tokenizer.ggml.merges", {});
  g.SetU32("tokenizer.ggml.bos_token_id", kBosId);
  g.SetU32("tokenizer.ggml.eos_token_id", kEosId);
  g.SetBool("tokenizer.ggml.add_bos_token", false);
  // What was asked and derived (ignored by both engines; read by people and docs/scale.md).
  g.SetString("kairox.synth.shape", sh.name);
  g.SetString("kairox.synth.follows", sh.follows);
  g.SetU64("kairox.synth.seed", p.spec.seed);
  std::vector<float> sparsity;
  for (double dl : p.derived.density) sparsity.push_back(static_cast<float>(1.0 - dl));
  g.SetArrayF32("kairox.synth.sparsity", sparsity);
  g.SetF32("kairox.synth.hot_fraction", static_cast<float>(p.spec.hot_fraction));
  g.SetF32("kairox.synth.hot_share", static_cast<float>(p.spec.hot_share));
  g.SetF32("kairox.synth.reuse", static_cast<float>(p.spec.reuse));
  g.SetF32("kairox.synth.topic_stay", static_cast<float>(p.derived.topic_stay));
  g.SetU32("kairox.synth.topics", p.k);
}

}  // namespace

absl::StatusOr<SynthDerived> Derive(const SynthSpec& s) {
  const SynthShape& sh = s.shape;
  const int n_layer = s.n_layer_override > 0 ? s.n_layer_override : sh.n_layer;
  if (n_layer <= 0 || sh.n_embd <= 0 || sh.n_ff <= 0 || sh.n_head <= 0 || sh.n_head_kv <= 0 ||
      sh.n_embd % sh.n_head != 0 || sh.n_head % sh.n_head_kv != 0 || sh.n_vocab < 260) {
    return absl::InvalidArgumentError(absl::StrCat("shape '", sh.name, "' is inconsistent"));
  }
  if (s.act != "relu" && s.act != "fatrelu" && s.act != "drelu" && s.act != "silu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--act: '", s.act, "' is not one of relu, fatrelu, drelu, silu"));
  }
  if (!cpu::CanQuantize(s.weight_type) || !cpu::CanQuantize(s.output_type)) {
    return absl::InvalidArgumentError(
        "--type: the quantizer writes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16");
  }
  if (!(s.hot_fraction > 0 && s.hot_fraction < 1)) {
    return absl::InvalidArgumentError("--hot-fraction must be in (0, 1)");
  }
  if (!(s.hot_share >= s.hot_fraction && s.hot_share < 1)) {
    return absl::InvalidArgumentError("--hot-share must be in [--hot-fraction, 1)");
  }
  const int n_token = static_cast<int>(std::lround(s.token_fraction * sh.n_embd));
  if (s.topics < 2 || n_token < 8 || s.topics > sh.n_embd - n_token) {
    return absl::InvalidArgumentError(
        absl::StrCat("--topics: ", s.topics, " topics need 2 to ", sh.n_embd - n_token,
                     " dimensions beside the token part (", n_token, " of ", sh.n_embd, ")"));
  }
  if (s.sparsity.empty()) return absl::InvalidArgumentError("--sparsity: no value");
  SynthDerived d;
  double sum_p = 0, sum_p2 = 0;
  for (int l = 0; l < n_layer; ++l) {
    const double dl = LayerDensity(s, n_layer, l);
    const double p_hot = s.hot_share * dl / s.hot_fraction;
    if (!(dl > 0 && dl < 1) || p_hot > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sparsity: layer ", l, " at ", 1 - dl, " needs hot neurons to fire with p = ", p_hot,
          " (must be in (0, 1]: sparsity ≥ 1 − hot_fraction / hot_share)"));
    }
    const double p_cold = (1 - s.hot_share) * dl / (1 - s.hot_fraction);
    d.density.push_back(dl);
    sum_p += dl;
    sum_p2 += s.hot_fraction * p_hot * p_hot + (1 - s.hot_fraction) * p_cold * p_cold;
    if (l == 0) {
      d.p_hot = p_hot;
      d.p_cold = p_cold;
    }
  }
  d.chance_reuse = sum_p2 / sum_p;
  if (!(s.reuse >= d.chance_reuse && s.reuse < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reuse ", s.reuse, " must be in [", d.chance_reuse,
                     ", 1): the hot set alone gives that much reuse between random tokens"));
  }
  d.topic_stay = (s.reuse - d.chance_reuse) / (1 - d.chance_reuse);
  // Bytes: the tensors of WriteSynthModel.
  auto bytes = [](GgmlType t, int64_t n) { return TypeBytes(t, n).value_or(0); };
  const int64_t e = sh.n_embd, f = sh.n_ff, kv = e / sh.n_head * sh.n_head_kv;
  d.file_bytes = bytes(s.weight_type, e * sh.n_vocab) + bytes(s.output_type, e * sh.n_vocab) +
                 static_cast<uint64_t>(n_layer) *
                     (bytes(s.weight_type, 2 * e * e + 2 * e * kv + 3 * e * f) + 8 * e);
  return d;
}

absl::StatusOr<SynthDerived> WriteSynthModel(const std::string& path, const SynthSpec& spec,
                                             void (*progress)(int done, int total)) {
  KX_ASSIGN_OR_RETURN(Plan plan, MakePlan(spec));
  const Plan* pp = &plan;  // the producers run during WriteFile, while `plan` lives
  const int d = plan.d, f = plan.f, v = plan.v;
  const int kv = plan.head_dim * spec.shape.n_head_kv;
  const int nt = spec.n_threads;
  GgufWriter g;
  SetMetadata(g, plan);
  int total = 3 + 9 * plan.n_layer, done = 0;
  auto tick = [progress, total, &done] {
    if (progress != nullptr) progress(++done, total);
  };
  auto add = [&](const std::string& name, GgmlType type, int64_t n_in, int64_t rows,
                 auto row) -> absl::Status {
    return g.AddTensorProduced(name, type, {n_in, rows},
                               [=, &tick](uint8_t* dst, uint64_t) -> absl::Status {
                                 KX_RETURN_IF_ERROR(FillRows(type, n_in, rows, nt, dst, row));
                                 tick();
                                 return absl::OkStatus();
                               });
  };
  auto add_norm = [&](const std::string& name) {
    // 1/√d: RMSNorm's output is then a unit vector (the derivation in the header assumes it).
    return g.AddTensorProduced(name, GgmlType::kF32, {d}, [d, &tick](uint8_t* dst, uint64_t) {
      const float w = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
      for (int i = 0; i < d; ++i) std::memcpy(dst + 4 * i, &w, 4);
      tick();
      return absl::OkStatus();
    });
  };
  auto random_rows = [pp](Stream stream, int layer, double sigma) {
    return [pp, stream, layer, sigma](int64_t r, float* dst, Scratch& s) {
      Rng rng(RowSeed(pp->spec.seed, stream, layer, r));
      (void)s;
      const int64_t n = stream == kDown ? pp->f : pp->d;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(rng.Symmetric(sigma));
    };
  };
  KX_RETURN_IF_ERROR(
      add("token_embd.weight", spec.weight_type, d, v, [pp](int64_t t, float* dst, Scratch& s) {
        std::fill(dst, dst + pp->d, 0.0f);
        const int topic = pp->topic_of_token[t];
        for (int i = 0; i < pp->d; ++i) {
          if (pp->topic_of_dim[i] == topic) dst[i] = static_cast<float>(kAlpha * pp->zval[i]);
        }
        TokenDir(*pp, static_cast<int>(t), s.xi);
        for (size_t j = 0; j < s.xi.size(); ++j) {
          dst[pp->token_dims[j]] = static_cast<float>(kBeta * s.xi[j]);
        }
      }));
  KX_RETURN_IF_ERROR(add_norm("output_norm.weight"));
  KX_RETURN_IF_ERROR(
      add("output.weight", spec.output_type, d, v, [pp](int64_t t, float* dst, Scratch& s) {
        std::fill(dst, dst + pp->d, 0.0f);
        if (pp->pred[t] < 0) return;
        TokenDir(*pp, pp->pred[t], s.xi);
        for (size_t j = 0; j < s.xi.size(); ++j) {
          dst[pp->token_dims[j]] = static_cast<float>(kHeadScale * s.xi[j]);
        }
      }));
  for (int l = 0; l < plan.n_layer; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    const GgmlType wt = spec.weight_type;
    KX_RETURN_IF_ERROR(add_norm(b + "attn_norm.weight"));
    KX_RETURN_IF_ERROR(add(b + "attn_q.weight", wt, d, d, random_rows(kQ, l, 1.0)));
    KX_RETURN_IF_ERROR(add(b + "attn_k.weight", wt, d, kv, random_rows(kK, l, 1.0)));
    KX_RETURN_IF_ERROR(add(b + "attn_v.weight", wt, d, kv, random_rows(kV, l, 1.0)));
    KX_RETURN_IF_ERROR(add(b + "attn_output.weight", wt, d, d, random_rows(kO, l, plan.wo_sigma)));
    KX_RETURN_IF_ERROR(add_norm(b + "ffn_norm.weight"));
    // The hot set is made once per matrix (n_ff shuffles), shared by its rows.
    auto hot = std::make_shared<std::vector<uint8_t>>(HotSet(plan, l));
    auto ffn_rows = [pp, l, hot](bool gate) {
      return [pp, l, hot, gate](int64_t n, float* dst, Scratch& s) {
        Membership(*pp, l, static_cast<int>(n), (*hot)[n] != 0, s.in);
        Rng rng(RowSeed(pp->spec.seed, gate ? kGate : kUp, l, n));
        s.coef.resize(pp->k);
        for (int k = 0; k < pp->k; ++k) {
          const double mag = gate ? rng.Uniform(kGateLo, kGateHi) : rng.Uniform(kUpLo, kUpHi);
          // Gate: the sign is membership. Up: positive on S_n (dReLU keeps S_n), else either.
          const bool positive = s.in[k] || (!gate && rng.Uniform() < 0.5);
          s.coef[k] = static_cast<float>(positive ? mag : -mag);
        }
        for (int i = 0; i < pp->d; ++i) {
          const int topic = pp->topic_of_dim[i];
          dst[i] = topic < 0 ? 0.0f : s.coef[topic] * pp->zval[i];
        }
      };
    };
    KX_RETURN_IF_ERROR(add(b + "ffn_gate.weight", wt, d, f, ffn_rows(true)));
    KX_RETURN_IF_ERROR(add(b + "ffn_up.weight", wt, d, f, ffn_rows(false)));
    KX_RETURN_IF_ERROR(
        add(b + "ffn_down.weight", wt, f, d, random_rows(kDown, l, plan.down_sigma)));
  }
  KX_RETURN_IF_ERROR(g.WriteFile(path));
  return plan.derived;
}

}  // namespace kx::synth
