#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_join.h"
#include "kernels/cpu/kernels.h"
#include "model/gguf.h"
#include "model/llama_ffn_activation.h"

namespace kx {
namespace {

// Upper bounds that no real model reaches; they keep hostile metadata from
// driving huge allocations.
constexpr uint64_t kMaxLayers = 1024;
constexpr uint64_t kMaxDim = 1 << 20;
constexpr uint64_t kMaxVocab = 1 << 22;
constexpr uint64_t kMaxCtx = 1 << 24;
// RoPE bases in released models run from 1e4 to 1e7 (long-context Qwen);
// beyond this every rotation but the first pair's is zero: a damaged file.
constexpr double kMaxRopeFreqBase = 1e10;

absl::StatusOr<int> GetDim(const GgufFile& f, const std::string& key, uint64_t max_value) {
  auto v = f.GetUint(key);
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata: ", key, ": ", v.status().message()));
  }
  if (*v == 0 || *v > max_value) {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata: ", key, " = ", *v, " is out of range (1..", max_value, ")"));
  }
  return static_cast<int>(*v);
}

absl::StatusOr<WeightRef> Bind(const GgufFile& f, const std::string& name, int64_t n_in,
                               int64_t n_out) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("tensor '", name, "' is missing"));
  const int64_t want_dims = n_out == 1 ? 1 : 2;
  bool shape_ok = t->ne[0] == n_in && t->ne[1] == n_out && t->ne[2] == 1 && t->ne[3] == 1;
  if (want_dims == 1 && t->n_dims != 1) shape_ok = false;
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [", t->ne[0],
                                                   ", ", t->ne[1], ", ", t->ne[2], ", ", t->ne[3],
                                                   "], expected [", n_in, ", ", n_out, "]"));
  }
  if (!cpu::IsSupportedWeightType(t->type)) {
    return absl::UnimplementedError(absl::StrCat("tensor '", name, "' has type ",
                                                 TypeName(t->type),
                                                 ", which kairox cannot compute with yet"));
  }
  WeightRef w;
  w.data = f.TensorData(*t);
  w.type = t->type;
  w.n_in = n_in;
  w.n_out = n_out;
  KX_ASSIGN_OR_RETURN(w.row_bytes, TypeBytes(t->type, n_in));
  w.name = name;
  return w;
}

// Norm weights and biases are used as f32 vectors directly.
absl::StatusOr<WeightRef> BindVector(const GgufFile& f, const std::string& name, int64_t n) {
  KX_ASSIGN_OR_RETURN(WeightRef w, Bind(f, name, n, 1));
  if (w.type != GgmlType::kF32) {
    return absl::UnimplementedError(absl::StrCat("vector tensor '", name, "' is ",
                                                 TypeName(w.type), "; kairox expects F32"));
  }
  return w;
}

}  // namespace

const std::vector<std::string>& SupportedArchitectures() {
  static const std::vector<std::string> archs = {"llama", "qwen2", "gemma3"};
  return archs;
}

namespace {

// How an architecture differs from plain llama.
struct ArchTraits {
  RopeStyle rope_style;
  bool qkv_bias;  // the attention Q/K/V projections carry biases
  bool gemma;     // Gemma 3's norms, GeGLU, embedding scale and local/global layers
};

ArchTraits TraitsOf(const std::string& arch) {
  if (arch == "qwen2") return {RopeStyle::kNeox, true, false};
  if (arch == "gemma3") return {RopeStyle::kNeox, false, true};
  return {RopeStyle::kAdjacent, false, false};
}

// Gemma 3 makes every sixth layer global (layers 5, 11, 17, ...: transformers'
// default sliding_window_pattern 6, which its GGUF loader and llama.cpp
// assume because the converter does not write it) and the others local.
constexpr uint64_t kGemma3SlidingPattern = 6;
// transformers' Gemma 3 default for local layers (rope_local_base_freq); the
// GGUF's rope.freq_base is the global layers' base.
constexpr float kGemma3LocalRopeBase = 10000.0f;

absl::Status ReadGemma3HParams(const GgufFile& f, const std::string& p, LlamaHParams& hp) {
  hp.ffn_act = FfnActivation::kGeluTanh;
  hp.qk_norm = true;
  hp.post_norms = true;
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  // query_pre_attn_scalar is not in the file; transformers' default (256)
  // equals head_dim for every released Gemma 3 but the 27B, which the
  // converter gives a key_length of its own.
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  hp.rope_freq_base_local = kGemma3LocalRopeBase;
  uint64_t pattern = kGemma3SlidingPattern;
  if (f.HasKey(p + "attention.sliding_window_pattern")) {
    KX_ASSIGN_OR_RETURN(pattern, f.GetUint(p + "attention.sliding_window_pattern"));
    if (pattern == 0) return absl::InvalidArgumentError("sliding_window_pattern must be >= 1");
  }
  if (f.HasKey(p + "attention.sliding_window")) {
    KX_ASSIGN_OR_RETURN(hp.sliding_window, GetDim(f, p + "attention.sliding_window", kMaxCtx));
    hp.layer_is_local.resize(hp.n_layer);
    for (int l = 0; l < hp.n_layer; ++l) {
      hp.layer_is_local[l] = (static_cast<uint64_t>(l) + 1) % pattern != 0 ? 1 : 0;
    }
  }
  if (f.HasKey(p + "final_logit_softcapping")) {
    KX_ASSIGN_OR_RETURN(double cap, f.GetFloat(p + "final_logit_softcapping"));
    if (!(cap >= 0.0 && std::isfinite(cap))) {
      return absl::InvalidArgumentError(absl::StrCat("model metadata: ", p,
                                                     "final_logit_softcapping = ", cap,
                                                     " must be finite and >= 0"));
    }
    hp.final_logit_softcap = static_cast<float>(cap);
  }
  // The larger Gemma 3 models scale the global layers' positions; computing
  // them without it would be silently wrong.
  if (f.HasKey(p + "rope.scaling.type")) {
    KX_ASSIGN_OR_RETURN(std::string_view type, f.GetString(p + "rope.scaling.type"));
    if (type != "none") {
      return absl::UnimplementedError(
          absl::StrCat("gemma3 with rope scaling '", std::string(type), "' is not supported yet"));
    }
  }
  return absl::OkStatus();
}

// <arch>.feed_forward_activation and its threshold: kairox's own convention
// (llama.cpp writes neither for these architectures, so its files keep the
// architecture's default). Read after the architecture's defaults.
absl::Status ReadFfnActivation(const GgufFile& f, const std::string& p, LlamaHParams& hp) {
  const std::string key = p + "feed_forward_activation";
  const std::string tkey = p + "feed_forward_activation_threshold";
  if (f.HasKey(key)) {
    KX_ASSIGN_OR_RETURN(std::string_view name, f.GetString(key));
    auto act = ParseFfnActivation(name);
    if (!act.ok()) {
      return absl::Status(act.status().code(),
                          absl::StrCat("model metadata: ", key, ": ", act.status().message()));
    }
    hp.ffn_act = *act;
  }
  if (hp.ffn_act == FfnActivation::kFatRelu) {
    if (!f.HasKey(tkey)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model metadata: ", key, " is fatrelu but ", tkey, " is missing"));
    }
    KX_ASSIGN_OR_RETURN(double t, f.GetFloat(tkey));
    if (!(t >= 0.0 && std::isfinite(t))) {
      return absl::InvalidArgumentError(
          absl::StrCat("model metadata: ", tkey, " = ", t, " must be finite and >= 0"));
    }
    hp.ffn_act_threshold = static_cast<float>(t);
  } else if (f.HasKey(tkey)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model metadata: ", tkey, " is set but the FFN activation is ",
                     std::string(FfnActivationName(hp.ffn_act)), ", not fatrelu"));
  }
  return absl::OkStatus();
}

// A hint for an architecture people expect to work.
std::string RefusalHint(const std::string& arch) {
  if (arch == "mistral") {
    return "; llama.cpp writes Mistral 7B models as 'llama', and no converter kairox knows "
           "writes 'mistral'";
  }
  return "";
}

}  // namespace

absl::StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& f) {
  LlamaHParams hp;
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) return absl::InvalidArgumentError("model has no general.architecture key");
  hp.arch = std::string(*arch);
  const auto& archs = SupportedArchitectures();
  if (std::find(archs.begin(), archs.end(), hp.arch) == archs.end()) {
    return absl::UnimplementedError(absl::StrCat("architecture '", hp.arch,
                                                 "' is not supported (supported: ",
                                                 absl::StrJoin(archs, ", "), ")",
                                                 RefusalHint(hp.arch)));
  }
  const std::string p = hp.arch + ".";
  KX_ASSIGN_OR_RETURN(hp.n_layer, GetDim(f, p + "block_count", kMaxLayers));
  KX_ASSIGN_OR_RETURN(hp.n_embd, GetDim(f, p + "embedding_length", kMaxDim));
  KX_ASSIGN_OR_RETURN(hp.n_ff, GetDim(f, p + "feed_forward_length", kMaxDim));
  KX_ASSIGN_OR_RETURN(hp.n_head, GetDim(f, p + "attention.head_count", kMaxDim));
  hp.n_head_kv = hp.n_head;
  if (f.HasKey(p + "attention.head_count_kv")) {
    KX_ASSIGN_OR_RETURN(hp.n_head_kv, GetDim(f, p + "attention.head_count_kv", kMaxDim));
  }
  KX_ASSIGN_OR_RETURN(hp.n_ctx_train, GetDim(f, p + "context_length", kMaxCtx));
  if (hp.n_head % hp.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_count ", hp.n_head,
                                                   " is not a multiple of head_count_kv ",
                                                   hp.n_head_kv));
  }
  if (f.HasKey(p + "attention.key_length")) {
    // Gemma: heads wider than n_embd / n_head. kairox keeps one width for
    // K and V (the attention reads both with the same head stride).
    KX_ASSIGN_OR_RETURN(hp.head_dim, GetDim(f, p + "attention.key_length", kMaxDim));
    int value_length = hp.head_dim;
    if (f.HasKey(p + "attention.value_length")) {
      KX_ASSIGN_OR_RETURN(value_length, GetDim(f, p + "attention.value_length", kMaxDim));
    }
    if (value_length != hp.head_dim) {
      return absl::UnimplementedError(absl::StrCat("attention.key_length ", hp.head_dim,
                                                   " != value_length ", value_length,
                                                   " is not supported"));
    }
  } else {
    if (hp.n_embd % hp.n_head != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding_length ", hp.n_embd, " is not a multiple of head_count ", hp.n_head));
    }
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  if (hp.head_dim % 2 != 0) return absl::InvalidArgumentError("head dimension is odd");
  if (hp.head_dim > cpu::kAttnMaxHeadDim) {
    return absl::UnimplementedError(absl::StrCat("head dimension ", hp.head_dim, " > ",
                                                 cpu::kAttnMaxHeadDim, ", the attention's limit"));
  }
  if (static_cast<uint64_t>(hp.q_dim()) > kMaxDim) {
    return absl::InvalidArgumentError("head_count × head dimension is implausibly large");
  }
  hp.n_rot = hp.head_dim;
  if (f.HasKey(p + "rope.dimension_count")) {
    KX_ASSIGN_OR_RETURN(hp.n_rot, GetDim(f, p + "rope.dimension_count", hp.head_dim));
    if (hp.n_rot % 2 != 0) return absl::InvalidArgumentError("rope.dimension_count is odd");
  }
  if (f.HasKey(p + "rope.freq_base")) {
    KX_ASSIGN_OR_RETURN(double base, f.GetFloat(p + "rope.freq_base"));
    if (!(base > 1.0 && base <= kMaxRopeFreqBase)) {
      return absl::InvalidArgumentError(absl::StrCat("model metadata: ", p, "rope.freq_base = ",
                                                     base, " is out of range (1, ",
                                                     kMaxRopeFreqBase, "]"));
    }
    hp.rope_freq_base = static_cast<float>(base);
  }
  if (f.HasKey(p + "attention.layer_norm_rms_epsilon")) {
    KX_ASSIGN_OR_RETURN(double eps, f.GetFloat(p + "attention.layer_norm_rms_epsilon"));
    if (!(eps > 0.0 && eps < 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model metadata: ", p, "attention.layer_norm_rms_epsilon = ", eps,
          " is out of range (0, 1)"));
    }
    hp.rms_eps = static_cast<float>(eps);
  }
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) return absl::NotFoundError("tensor 'token_embd.weight' is missing");
  if (embd->ne[1] <= 0 || static_cast<uint64_t>(embd->ne[1]) > kMaxVocab) {
    return absl::InvalidArgumentError("token_embd.weight has an implausible vocabulary size");
  }
  hp.n_vocab = static_cast<int>(embd->ne[1]);
  // Optional; when present it must say what the embedding holds (a file
  // whose key disagrees with its tensors was not written by one converter).
  if (f.HasKey(p + "vocab_size")) {
    KX_ASSIGN_OR_RETURN(int vocab, GetDim(f, p + "vocab_size", kMaxVocab));
    if (vocab != hp.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("model metadata: ", p, "vocab_size = ", vocab,
                                                     ", but token_embd.weight has ", hp.n_vocab,
                                                     " rows"));
    }
  }
  hp.tied_output = f.FindTensor("output.weight") == nullptr;
  const ArchTraits traits = TraitsOf(hp.arch);
  hp.rope_style = traits.rope_style;
  // llama.cpp also honours Q/K/V biases in "llama" files that carry them;
  // ignoring them would compute a different model.
  hp.qkv_bias = traits.qkv_bias || f.FindTensor("blk.0.attn_q.bias") != nullptr;
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  if (traits.gemma) KX_RETURN_IF_ERROR(ReadGemma3HParams(f, p, hp));
  KX_RETURN_IF_ERROR(ReadFfnActivation(f, p, hp));
  return hp;
}

absl::StatusOr<LlamaWeights> BindLlamaWeights(const GgufFile& f, const LlamaHParams& hp) {
  LlamaWeights w;
  const int64_t kv_dim = hp.kv_dim();
  const int64_t q_dim = hp.q_dim();
  KX_ASSIGN_OR_RETURN(w.tok_embd, Bind(f, "token_embd.weight", hp.n_embd, hp.n_vocab));
  KX_ASSIGN_OR_RETURN(w.output_norm, BindVector(f, "output_norm.weight", hp.n_embd));
  if (hp.tied_output) {
    w.output = w.tok_embd;
  } else {
    KX_ASSIGN_OR_RETURN(w.output, Bind(f, "output.weight", hp.n_embd, hp.n_vocab));
  }
  w.layers.resize(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    LlamaLayerWeights& L = w.layers[l];
    KX_ASSIGN_OR_RETURN(L.attn_norm, BindVector(f, b + "attn_norm.weight", hp.n_embd));
    KX_ASSIGN_OR_RETURN(L.wq, Bind(f, b + "attn_q.weight", hp.n_embd, q_dim));
    KX_ASSIGN_OR_RETURN(L.wk, Bind(f, b + "attn_k.weight", hp.n_embd, kv_dim));
    KX_ASSIGN_OR_RETURN(L.wv, Bind(f, b + "attn_v.weight", hp.n_embd, kv_dim));
    KX_ASSIGN_OR_RETURN(L.wo, Bind(f, b + "attn_output.weight", q_dim, hp.n_embd));
    if (hp.qkv_bias) {
      KX_ASSIGN_OR_RETURN(L.bq, BindVector(f, b + "attn_q.bias", q_dim));
      KX_ASSIGN_OR_RETURN(L.bk, BindVector(f, b + "attn_k.bias", kv_dim));
      KX_ASSIGN_OR_RETURN(L.bv, BindVector(f, b + "attn_v.bias", kv_dim));
    }
    KX_ASSIGN_OR_RETURN(L.ffn_norm, BindVector(f, b + "ffn_norm.weight", hp.n_embd));
    KX_ASSIGN_OR_RETURN(L.ffn_gate, Bind(f, b + "ffn_gate.weight", hp.n_embd, hp.n_ff));
    KX_ASSIGN_OR_RETURN(L.ffn_up, Bind(f, b + "ffn_up.weight", hp.n_embd, hp.n_ff));
    KX_ASSIGN_OR_RETURN(L.ffn_down, Bind(f, b + "ffn_down.weight", hp.n_ff, hp.n_embd));
    if (hp.qk_norm) {
      KX_ASSIGN_OR_RETURN(L.attn_q_norm, BindVector(f, b + "attn_q_norm.weight", hp.head_dim));
      KX_ASSIGN_OR_RETURN(L.attn_k_norm, BindVector(f, b + "attn_k_norm.weight", hp.head_dim));
    }
    if (hp.post_norms) {
      KX_ASSIGN_OR_RETURN(L.post_attention_norm,
                          BindVector(f, b + "post_attention_norm.weight", hp.n_embd));
      KX_ASSIGN_OR_RETURN(L.post_ffw_norm, BindVector(f, b + "post_ffw_norm.weight", hp.n_embd));
    }
  }
  return w;
}

}  // namespace kx
