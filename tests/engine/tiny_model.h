// Small llama-family GGUF models ("llama", "qwen2") written by kairox's own
// GGUF writer, with seeded random weights, for tests that must not need a
// download. The same spec and seed always give a byte-identical file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kx::test {

struct TinyModelSpec {
  std::string arch = "llama";            // general.architecture and the key prefix
  std::string name = "kairox-tiny-test";  // general.name
  bool qkv_bias = false;                 // write blk.N.attn_{q,k,v}.bias (F32; qwen2 needs them)
  int n_layer = 2;
  int n_embd = 64;
  int n_ff = 128;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ctx_train = 256;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  GgmlType weight_type = GgmlType::kQ4_1;  // attention and FFN matrices
  GgmlType embd_type = GgmlType::kQ8_0;    // token embedding (= LM head when tied)
  bool tied_output = true;
  uint64_t seed = 1234;
  // arch "gemma3" only: the head width (written as attention.key_length and
  // value_length; 0 = n_embd / n_head) and attention.sliding_window. gemma3
  // files also get attn_{q,k}_norm and post_{attention,ffw}_norm tensors.
  // ReferenceForward does not compute gemma3 (transformers is its reference).
  int head_dim = 0;
  int sliding_window = 0;
  // <arch>.feed_forward_activation ("" writes no key: the architecture's
  // default), and for "fatrelu" <arch>.feed_forward_activation_threshold.
  // ReferenceForward computes silu (""), relu, fatrelu and drelu.
  std::string ffn_act;
  float ffn_act_threshold = 0.0f;
};

// The model's float weights as written (after quantization round trip), so a
// reference forward can use exactly what the file holds.
struct TinyModelWeights {
  std::vector<float> tok_embd, output, output_norm;  // output empty when tied
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, gate, up, down;
    std::vector<float> bq, bk, bv;  // empty without qkv_bias
    std::vector<float> q_norm, k_norm, post_attn_norm, post_ffw_norm;  // gemma3 only
  };
  std::vector<Layer> layers;
};

// Writes a model with a 256-token byte-level vocabulary to `path`; fills
// `weights` (if not null) with the dequantized values.
absl::Status WriteTinyModel(const std::string& path, const TinyModelSpec& spec,
                            TinyModelWeights* weights);

// Quantizes a row of floats to `type` blocks (test-side quantizers, written
// from the block definitions; Q4_1, Q8_0, F16, BF16, F32).
std::vector<uint8_t> QuantizeRow(GgmlType type, const std::vector<float>& src);
// Q4_0, Q5_0, Q5_1, Q2_K..Q6_K (tiny_quantize.cc): row length a multiple of the block.
std::vector<uint8_t> QuantizeRowIssue3(GgmlType type, const std::vector<float>& src);

// Logits of every position of `tokens` by a plain float64 forward pass:
// adjacent-pair RoPE for "llama", NeoX halves for "qwen2"; biases when present.
std::vector<std::vector<float>> ReferenceForward(const TinyModelSpec& spec,
                                                 const TinyModelWeights& w,
                                                 const std::vector<int32_t>& tokens);

// The models behind the transformers goldens (tests/golden/arch/): "llama",
// "mistral" (a llama-architecture file, as llama.cpp writes Mistral 7B),
// "qwen2" and "gemma3" (6 layers: layer 5 global, the others local with a
// 5-position window, so 16 tokens exercise the window).
// Unknown variants give an empty arch.
const std::vector<std::string>& ArchGoldenVariants();
TinyModelSpec ArchGoldenSpec(const std::string& variant);

}  // namespace kx::test
