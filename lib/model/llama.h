// The llama family of decoder-only transformers (LLaMA, SmolLM, Mistral,
// Qwen2): hyper-parameters read from GGUF metadata and the weight tensors
// bound in place (pointers into the mapped file, nothing copied).
//
// Architectures, as llama.cpp's converter writes them:
//   "llama"  LLaMA, SmolLM and Mistral 7B (Mistral has no GGUF architecture
//            of its own): Q/K rows permuted for adjacent-pair RoPE.
//   "qwen2"  Q/K/V biases (F32), Q/K not permuted: NeoX-style RoPE.
//   "gemma3" head_dim from attention.key_length (n_head·head_dim != n_embd),
//            RMSNorm on each Q/K head, norms after attention and FFN too,
//            GeGLU (tanh GELU), embeddings scaled by sqrt(n_embd), NeoX RoPE,
//            local (sliding-window, RoPE base 10000) layers with one global
//            layer in every six. Norm weights are stored as 1 + w (llama.cpp's
//            converter adds the 1), so the plain RMSNorm applies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kx {

class GgufFile;

// How RoPE pairs the dimensions of a head.
enum class RopeStyle {
  kAdjacent,  // (x0,x1), (x2,x3), ...: llama converters permute Q/K for this
  kNeox,      // (x0, x_{d/2}), ...: Qwen2, Gemma
};

// The FFN's activation on the gate: act(gate·x) ⊙ (up·x) (exact definitions
// in model/llama_ffn_activation.h). The optional key <arch>.feed_forward_activation
// (a kairox convention, docs/sparsity.md) selects it; without it, llama and
// qwen2 are SiLU and gemma3 GELU.
enum class FfnActivation {
  kSilu,      // SwiGLU: LLaMA, SmolLM, Mistral, Qwen2
  kGeluTanh,  // GeGLU with the tanh approximation: Gemma
  kRelu,      // ReGLU: relu(gate·x) ⊙ (up·x) (ReLU-family sparse models)
  kFatRelu,   // FATReLU: (gate·x)·[gate·x > t] ⊙ (up·x), t = ffn_act_threshold ≥ 0
  kDRelu,     // dReLU: relu(gate·x) ⊙ relu(up·x)
};

struct LlamaHParams {
  std::string arch;     // general.architecture
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;      // per Q/K/V head; n_embd / n_head unless key_length says otherwise
  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_rot = 0;        // dimensions of each head RoPE rotates
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kAdjacent;
  FfnActivation ffn_act = FfnActivation::kSilu;
  float ffn_act_threshold = 0.0f;  // FATReLU's t (<arch>.feed_forward_activation_threshold)
  bool tied_output = false;  // no output.weight: token_embd doubles as the LM head
  bool qkv_bias = false;     // blk.N.attn_{q,k,v}.bias (qwen2 always; llama when present)

  // Gemma-style extras; the defaults are the plain llama computation.
  float attn_scale = 0.0f;   // multiplies Q·K; set to 1/sqrt(head_dim) by ReadLlamaHParams
  float embd_scale = 1.0f;   // multiplies the token embedding (Gemma: sqrt(n_embd))
  bool qk_norm = false;      // RMSNorm over each Q and K head before RoPE (attn_{q,k}_norm)
  bool post_norms = false;   // RMSNorm on the attention and FFN outputs before the residual add
  float final_logit_softcap = 0.0f;  // logits = c·tanh(logits/c) when > 0
  // Sliding-window (local) attention: a local layer at position p attends to
  // positions (p − sliding_window, p]. Empty: every layer is global.
  int sliding_window = 0;
  std::vector<uint8_t> layer_is_local;  // [n_layer], 1 = local
  float rope_freq_base_local = 10000.0f;  // RoPE base of local layers

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  bool IsLocalLayer(int l) const {
    return !layer_is_local.empty() && layer_is_local[static_cast<size_t>(l)] != 0;
  }
};

// A weight matrix of n_out rows, each n_in elements of `type`, row-major.
struct WeightRef {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  uint64_t row_bytes = 0;
  std::string name;

  uint64_t bytes() const { return row_bytes * static_cast<uint64_t>(n_out); }
  const uint8_t* row(int64_t r) const { return data + row_bytes * static_cast<uint64_t>(r); }
};

struct LlamaLayerWeights {
  WeightRef attn_norm, wq, wk, wv, wo;
  WeightRef bq, bk, bv;  // F32 vectors when hp.qkv_bias, else data == nullptr
  WeightRef ffn_norm, ffn_gate, ffn_up, ffn_down;
  // F32 vectors when hp.qk_norm ([head_dim]) / hp.post_norms ([n_embd]), else data == nullptr.
  WeightRef attn_q_norm, attn_k_norm;
  WeightRef post_attention_norm, post_ffw_norm;
};

struct LlamaWeights {
  WeightRef tok_embd;     // [n_vocab rows × n_embd]
  WeightRef output_norm;  // [n_embd]
  WeightRef output;       // LM head [n_vocab rows × n_embd] (== tok_embd when tied)
  std::vector<LlamaLayerWeights> layers;
};

// Architectures this build computes with, for messages.
const std::vector<std::string>& SupportedArchitectures();

// Reads and checks the hyper-parameters; unsupported architectures are
// refused by name.
absl::StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& file);

// Binds every weight tensor, checking names, shapes and that the CPU kernels
// support its type (refusing others by tensor and type name).
absl::StatusOr<LlamaWeights> BindLlamaWeights(const GgufFile& file, const LlamaHParams& hp);

}  // namespace kx
