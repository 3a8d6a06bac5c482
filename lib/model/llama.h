// The llama family of decoder-only transformers (LLaMA, SmolLM, Mistral,
// Qwen2): hyper-parameters read from GGUF metadata and the weight tensors
// bound in place (pointers into the mapped file, nothing copied).
//
// Architectures, as llama.cpp's converter writes them:
//   "llama"  LLaMA, SmolLM and Mistral 7B (Mistral has no GGUF architecture
//            of its own): Q/K rows permuted for adjacent-pair RoPE.
//   "qwen2"  Q/K/V biases (F32), Q/K not permuted: NeoX-style RoPE.
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

struct LlamaHParams {
  std::string arch;     // general.architecture
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_rot = 0;        // dimensions of each head RoPE rotates
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kAdjacent;
  bool tied_output = false;  // no output.weight: token_embd doubles as the LM head
  bool qkv_bias = false;     // blk.N.attn_{q,k,v}.bias (qwen2 always; llama when present)
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
