#include "engine/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/check.h"
#include "kernels/cpu/kernels.h"
#include "model/gguf_writer.h"

namespace kx::test {
namespace {

constexpr int kBlock = 32;
constexpr float kBiasScale = 0.5f;

void PutHalf(std::vector<uint8_t>& out, float v) {
  const uint16_t h = cpu::FloatToHalf(v);
  out.push_back(static_cast<uint8_t>(h & 0xff));
  out.push_back(static_cast<uint8_t>(h >> 8));
}

std::vector<float> RandomVec(std::mt19937_64& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The byte-level BPE alphabet: byte b is written as this code point.
std::string ByteToken(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int n = 0;
    for (int c = 0; c < b; ++c) {
      if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) ++n;
    }
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

}  // namespace

std::vector<uint8_t> QuantizeRow(GgmlType type, const std::vector<float>& src) {
  std::vector<uint8_t> out;
  const size_t n = src.size();
  switch (type) {
    case GgmlType::kF32:
      out.resize(n * 4);
      std::memcpy(out.data(), src.data(), n * 4);
      break;
    case GgmlType::kF16:
      for (float v : src) PutHalf(out, v);
      break;
    case GgmlType::kBF16:
      for (float v : src) {
        const uint16_t h = cpu::FloatToBf16(v);
        out.push_back(static_cast<uint8_t>(h & 0xff));
        out.push_back(static_cast<uint8_t>(h >> 8));
      }
      break;
    case GgmlType::kQ8_0:
      for (size_t b = 0; b < n; b += kBlock) {
        float amax = 0.0f;
        for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(src[b + i]));
        const float d = amax / 127.0f;
        const float d_stored = cpu::HalfToFloat(cpu::FloatToHalf(d));
        PutHalf(out, d);
        for (int i = 0; i < kBlock; ++i) {
          const float q = d_stored > 0 ? std::round(src[b + i] / d_stored) : 0.0f;
          out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f))));
        }
      }
      break;
    case GgmlType::kQ4_1:
      for (size_t b = 0; b < n; b += kBlock) {
        float lo = src[b], hi = src[b];
        for (int i = 0; i < kBlock; ++i) {
          lo = std::min(lo, src[b + i]);
          hi = std::max(hi, src[b + i]);
        }
        const float d = (hi - lo) / 15.0f;
        const float d_stored = cpu::HalfToFloat(cpu::FloatToHalf(d));
        const float m_stored = cpu::HalfToFloat(cpu::FloatToHalf(lo));
        PutHalf(out, d);
        PutHalf(out, lo);
        uint8_t q[kBlock];
        for (int i = 0; i < kBlock; ++i) {
          const float v = d_stored > 0 ? std::round((src[b + i] - m_stored) / d_stored) : 0.0f;
          q[i] = static_cast<uint8_t>(std::clamp(v, 0.0f, 15.0f));
        }
        for (int i = 0; i < kBlock / 2; ++i) out.push_back(q[i] | (q[i + kBlock / 2] << 4));
      }
      break;
    default:
      out = QuantizeRowIssue3(type, src);  // tiny_quantize.cc; empty for other types
      break;
  }
  return out;
}

absl::Status WriteTinyModel(const std::string& path, const TinyModelSpec& s,
                            TinyModelWeights* weights) {
  std::mt19937_64 rng(s.seed);
  GgufWriter g;
  const std::string p = s.arch + ".";
  g.SetString("general.architecture", s.arch);
  g.SetString("general.name", s.name);
  g.SetU32(p + "block_count", s.n_layer);
  g.SetU32(p + "context_length", s.n_ctx_train);
  g.SetU32(p + "embedding_length", s.n_embd);
  g.SetU32(p + "feed_forward_length", s.n_ff);
  g.SetU32(p + "attention.head_count", s.n_head);
  g.SetU32(p + "attention.head_count_kv", s.n_head_kv);
  g.SetF32(p + "rope.freq_base", s.rope_freq_base);
  g.SetF32(p + "attention.layer_norm_rms_epsilon", s.rms_eps);
  if (!s.ffn_act.empty()) g.SetString(p + "feed_forward_activation", s.ffn_act);
  if (s.ffn_act == "fatrelu") g.SetF32(p + "feed_forward_activation_threshold", s.ffn_act_threshold);
  g.SetString("tokenizer.ggml.model", "gpt2");
  g.SetString("tokenizer.ggml.pre", "default");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteToken(b));
  g.SetArrayString("tokenizer.ggml.tokens", tokens);
  g.SetArrayI32("tokenizer.ggml.token_type", std::vector<int32_t>(256, 1));
  g.SetArrayString("tokenizer.ggml.merges", {});
  g.SetU32("tokenizer.ggml.bos_token_id", 1);
  g.SetU32("tokenizer.ggml.eos_token_id", 2);
  g.SetBool("tokenizer.ggml.add_bos_token", false);

  TinyModelWeights local;
  TinyModelWeights& w = weights ? *weights : local;
  const bool gemma = s.arch == "gemma3";
  const int head_dim = gemma && s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int kv_dim = head_dim * s.n_head_kv;
  const int q_dim = head_dim * s.n_head;
  if (gemma) {
    g.SetU32(p + "attention.key_length", head_dim);
    g.SetU32(p + "attention.value_length", head_dim);
    if (s.sliding_window > 0) g.SetU32(p + "attention.sliding_window", s.sliding_window);
  }
  const int vocab = 256;
  // Adds a matrix of n_out rows × n_in, stores the values the file holds.
  auto add_matrix = [&](const std::string& name, GgmlType type, int n_in, int n_out,
                        float scale, std::vector<float>* dst) -> absl::Status {
    std::vector<float> all = RandomVec(rng, static_cast<size_t>(n_in) * n_out, scale);
    std::vector<uint8_t> bytes;
    dst->assign(all.size(), 0.0f);
    const cpu::TypeKernels* tk = cpu::KernelsFor(Isa::kScalar)->For(type);
    if (tk == nullptr) {  // a type kairox cannot compute with: random blocks (refusal tests)
      const TypeInfo& info = GetTypeInfo(type);
      bytes.resize(static_cast<size_t>(n_in) / info.block_size * info.block_bytes * n_out);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
      return g.AddTensor(name, type, {n_in, n_out}, bytes.data(), bytes.size());
    }
    for (int r = 0; r < n_out; ++r) {
      std::vector<float> row(all.begin() + static_cast<size_t>(r) * n_in,
                             all.begin() + static_cast<size_t>(r + 1) * n_in);
      std::vector<uint8_t> q = QuantizeRow(type, row);
      tk->dequantize(q.data(), dst->data() + static_cast<size_t>(r) * n_in, n_in);
      bytes.insert(bytes.end(), q.begin(), q.end());
    }
    return g.AddTensor(name, type, {n_in, n_out}, bytes.data(), bytes.size());
  };
  // Biases are large enough (like Qwen2's) that dropping one changes the logits.
  auto add_bias = [&](const std::string& name, int n, std::vector<float>* dst) -> absl::Status {
    *dst = RandomVec(rng, n, kBiasScale);
    return g.AddTensor(name, GgmlType::kF32, {n}, dst->data(), dst->size() * 4);
  };
  auto add_norm_n = [&](const std::string& name, int n, std::vector<float>* dst) -> absl::Status {
    std::uniform_real_distribution<float> dist(0.5f, 1.5f);
    dst->resize(n);
    for (auto& x : *dst) x = dist(rng);
    return g.AddTensor(name, GgmlType::kF32, {n}, dst->data(), dst->size() * 4);
  };
  auto add_norm = [&](const std::string& name, std::vector<float>* dst) -> absl::Status {
    return add_norm_n(name, s.n_embd, dst);
  };
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const float ff_scale = 1.0f / std::sqrt(static_cast<float>(s.n_ff));
  KX_RETURN_IF_ERROR(add_matrix("token_embd.weight", s.embd_type, s.n_embd, vocab, 1.0f, &w.tok_embd));
  KX_RETURN_IF_ERROR(add_norm("output_norm.weight", &w.output_norm));
  if (!s.tied_output) {
    KX_RETURN_IF_ERROR(add_matrix("output.weight", s.weight_type, s.n_embd, vocab, in_scale, &w.output));
  }
  w.layers.resize(s.n_layer);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    auto& L = w.layers[l];
    KX_RETURN_IF_ERROR(add_norm(b + "attn_norm.weight", &L.attn_norm));
    KX_RETURN_IF_ERROR(add_matrix(b + "attn_q.weight", s.weight_type, s.n_embd, q_dim, in_scale, &L.wq));
    KX_RETURN_IF_ERROR(add_matrix(b + "attn_k.weight", s.weight_type, s.n_embd, kv_dim, in_scale, &L.wk));
    KX_RETURN_IF_ERROR(add_matrix(b + "attn_v.weight", s.weight_type, s.n_embd, kv_dim, in_scale, &L.wv));
    if (s.qkv_bias) {
      KX_RETURN_IF_ERROR(add_bias(b + "attn_q.bias", s.n_embd, &L.bq));
      KX_RETURN_IF_ERROR(add_bias(b + "attn_k.bias", kv_dim, &L.bk));
      KX_RETURN_IF_ERROR(add_bias(b + "attn_v.bias", kv_dim, &L.bv));
    }
    KX_RETURN_IF_ERROR(add_matrix(b + "attn_output.weight", s.weight_type, q_dim, s.n_embd, in_scale, &L.wo));
    KX_RETURN_IF_ERROR(add_norm(b + "ffn_norm.weight", &L.ffn_norm));
    KX_RETURN_IF_ERROR(add_matrix(b + "ffn_gate.weight", s.weight_type, s.n_embd, s.n_ff, in_scale, &L.gate));
    KX_RETURN_IF_ERROR(add_matrix(b + "ffn_up.weight", s.weight_type, s.n_embd, s.n_ff, in_scale, &L.up));
    KX_RETURN_IF_ERROR(add_matrix(b + "ffn_down.weight", s.weight_type, s.n_ff, s.n_embd, ff_scale, &L.down));
    if (gemma) {
      KX_RETURN_IF_ERROR(add_norm_n(b + "attn_q_norm.weight", head_dim, &L.q_norm));
      KX_RETURN_IF_ERROR(add_norm_n(b + "attn_k_norm.weight", head_dim, &L.k_norm));
      KX_RETURN_IF_ERROR(add_norm(b + "post_attention_norm.weight", &L.post_attn_norm));
      KX_RETURN_IF_ERROR(add_norm(b + "post_ffw_norm.weight", &L.post_ffw_norm));
    }
  }
  return g.WriteFile(path);
}

namespace {

void RefRmsNorm(const std::vector<double>& x, const std::vector<float>& w, double eps,
                std::vector<double>& out) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w[i];
}

// out[r] = Σ_i W[r][i]·x[i] for W of n_out rows × n_in.
std::vector<double> RefMatVec(const std::vector<float>& W, const std::vector<double>& x,
                              size_t n_out) {
  const size_t n_in = x.size();
  std::vector<double> out(n_out, 0.0);
  for (size_t r = 0; r < n_out; ++r) {
    double acc = 0;
    for (size_t i = 0; i < n_in; ++i) acc += static_cast<double>(W[r * n_in + i]) * x[i];
    out[r] = acc;
  }
  return out;
}

}  // namespace

namespace {

// act(g)·u for the spec's FFN activation (model/llama_ffn_activation.h).
double RefGatedActivation(const TinyModelSpec& s, double g, double u) {
  if (s.ffn_act.empty() || s.ffn_act == "silu") return g / (1.0 + std::exp(-g)) * u;
  if (s.ffn_act == "relu") return g > 0.0 ? g * u : 0.0;
  if (s.ffn_act == "fatrelu") return g > s.ffn_act_threshold ? g * u : 0.0;
  if (s.ffn_act == "drelu") return g > 0.0 && u > 0.0 ? g * u : 0.0;
  KX_CHECK_MSG(false, "ReferenceForward: unsupported ffn_act");
  return 0.0;
}

}  // namespace

std::vector<std::vector<float>> ReferenceForward(const TinyModelSpec& s,
                                                 const TinyModelWeights& w,
                                                 const std::vector<int32_t>& tokens) {
  const int d = s.n_embd, hd = s.n_embd / s.n_head, kvd = hd * s.n_head_kv;
  const int group = s.n_head / s.n_head_kv;
  const int vocab = 256;
  std::vector<std::vector<std::vector<double>>> kcache(s.n_layer), vcache(s.n_layer);
  std::vector<std::vector<float>> logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<double> x(d), xn, q, k, v;
    for (int i = 0; i < d; ++i) x[i] = w.tok_embd[static_cast<size_t>(tokens[pos]) * d + i];
    for (int l = 0; l < s.n_layer; ++l) {
      const auto& L = w.layers[l];
      RefRmsNorm(x, L.attn_norm, s.rms_eps, xn);
      q = RefMatVec(L.wq, xn, d);
      k = RefMatVec(L.wk, xn, kvd);
      v = RefMatVec(L.wv, xn, kvd);
      auto add = [](std::vector<double>& t, const std::vector<float>& bias) {
        for (size_t i = 0; i < bias.size(); ++i) t[i] += bias[i];
      };
      add(q, L.bq);
      add(k, L.bk);
      add(v, L.bv);
      // RoPE on adjacent pairs (the llama GGUF convention: converters permute
      // Q/K rows) or, for qwen2, on halves (x_i, x_{i+hd/2}) as in NeoX.
      const bool neox = s.arch == "qwen2";
      auto rope = [&](std::vector<double>& t, int heads) {
        for (int h = 0; h < heads; ++h) {
          for (int i = 0; i < hd / 2; ++i) {
            const double theta = pos * std::pow(static_cast<double>(s.rope_freq_base), -2.0 * i / hd);
            const double c = std::cos(theta), sn = std::sin(theta);
            double& a = t[h * hd + (neox ? i : 2 * i)];
            double& b = t[h * hd + (neox ? i + hd / 2 : 2 * i + 1)];
            const double a0 = a, b0 = b;
            a = a0 * c - b0 * sn;
            b = a0 * sn + b0 * c;
          }
        }
      };
      rope(q, s.n_head);
      rope(k, s.n_head_kv);
      kcache[l].push_back(k);
      vcache[l].push_back(v);
      std::vector<double> att(d, 0.0);
      for (int h = 0; h < s.n_head; ++h) {
        const int kvh = h / group;
        std::vector<double> sc(pos + 1);
        double mx = -1e300;
        for (size_t t = 0; t <= pos; ++t) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[h * hd + i] * kcache[l][t][kvh * hd + i];
          sc[t] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, sc[t]);
        }
        double sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (size_t t = 0; t <= pos; ++t) {
          for (int i = 0; i < hd; ++i) att[h * hd + i] += sc[t] / sum * vcache[l][t][kvh * hd + i];
        }
      }
      std::vector<double> o = RefMatVec(L.wo, att, d);
      for (int i = 0; i < d; ++i) x[i] += o[i];
      RefRmsNorm(x, L.ffn_norm, s.rms_eps, xn);
      std::vector<double> g = RefMatVec(L.gate, xn, s.n_ff), u = RefMatVec(L.up, xn, s.n_ff);
      for (int i = 0; i < s.n_ff; ++i) g[i] = RefGatedActivation(s, g[i], u[i]);
      std::vector<double> dn = RefMatVec(L.down, g, d);
      for (int i = 0; i < d; ++i) x[i] += dn[i];
    }
    RefRmsNorm(x, w.output_norm, s.rms_eps, xn);
    std::vector<double> lg = RefMatVec(s.tied_output ? w.tok_embd : w.output, xn, vocab);
    logits.emplace_back(lg.begin(), lg.end());
  }
  return logits;
}

const std::vector<std::string>& ArchGoldenVariants() {
  static const std::vector<std::string> variants = {"llama", "mistral", "qwen2", "gemma3"};
  return variants;
}

TinyModelSpec ArchGoldenSpec(const std::string& variant) {
  TinyModelSpec s;
  s.n_layer = 2;
  s.n_embd = 64;
  s.n_ff = 128;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ctx_train = 512;
  if (variant == "llama") {
    s.name = "kairox-tiny-llama";
    s.weight_type = GgmlType::kF32;
    s.embd_type = GgmlType::kF32;
    s.tied_output = true;
    s.seed = 101;
  } else if (variant == "mistral") {
    // A Mistral 7B-shaped llama file (wide GQA, high RoPE base, separate
    // head); the golden script runs transformers' Mistral code on its weights.
    s.name = "kairox-tiny-mistral";
    s.weight_type = GgmlType::kF16;
    s.embd_type = GgmlType::kF16;
    s.tied_output = false;
    s.n_head_kv = 1;
    s.rope_freq_base = 1000000.0f;
    s.seed = 202;
  } else if (variant == "qwen2") {
    s.arch = "qwen2";
    s.name = "kairox-tiny-qwen2";
    s.qkv_bias = true;
    s.weight_type = GgmlType::kF32;
    s.embd_type = GgmlType::kF16;
    s.tied_output = true;
    s.rope_freq_base = 1000000.0f;
    s.rms_eps = 1e-6f;
    s.seed = 303;
  } else if (variant == "gemma3") {
    // Gemma 3's shape in small: heads wider than n_embd / n_head, one KV
    // head, local layers with a window shorter than the 16 golden tokens.
    // head_dim 256 because the attention scale is 1/sqrt(head_dim) and
    // transformers takes 1/sqrt(query_pre_attn_scalar), which a GGUF does not
    // carry (its default, 256, is head_dim in every Gemma 3 but the 27B).
    s.arch = "gemma3";
    s.name = "kairox-tiny-gemma3";
    s.n_layer = 6;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 256;
    s.sliding_window = 5;
    s.weight_type = GgmlType::kF32;
    s.embd_type = GgmlType::kF16;
    s.tied_output = true;
    s.rope_freq_base = 1000000.0f;
    s.rms_eps = 1e-6f;
    s.seed = 404;
  } else {
    s.arch.clear();
  }
  return s;
}

}  // namespace kx::test
