// kairox-synth's generator: llama-family GGUF models at the shapes of real
// 1B-13B models whose FFN activations have chosen statistics (natural
// sparsity per layer, a hot set, reuse between tokens), realised through the
// weights so that the engine, its predictors, grouping and policies face them.
// The weights mean nothing: the models exist to measure speed, I/O and
// policies at realistic sizes (issue #17), never quality.
//
//   kx::synth::SynthSpec spec;
//   KX_ASSIGN_OR_RETURN(spec.shape, kx::synth::ShapeByName("7b"));
//   spec.act = "relu";
//   KX_RETURN_IF_ERROR(kx::synth::WriteSynthModel("/work/synth-data/7b.gguf", spec));
//
// How the statistics are realised (docs/scale.md has the derivation):
//  - The hidden dimensions are split at random: a "token" part R and K "topic"
//    parts C_k (disjoint). Token t's embedding is α·z_k(t) + β·ξ_t, z_k a unit
//    vector on C_k, ξ_t a unit vector on R; every norm weight is 1/√n_embd, so
//    a normalized FFN input is that unit vector (plus the small outputs of the
//    attention and FFN blocks, whose weights are scaled to `residual_mix`).
//  - Neuron n's gate row has coefficient +c on topic k when k ∈ S_n and −c
//    otherwise (c ~ U[1, 2]), nothing on R: gate·x = ±α·c, so the neuron fires
//    exactly for the topics in S_n. Each topic joins S_n with probability p_hot
//    for the layer's hot set (a `hot_fraction` of its neurons) and p_cold for
//    the rest, solved from the layer's sparsity and `hot_share`. The up row is
//    positive on S_n, so dReLU's up-side ReLU keeps the same set.
//  - The LM head maps ξ_t to the token after t on one cycle through the
//    vocabulary, with a logit margin of ~20 nats: greedy (and temperature ≤ 1)
//    decoding walks the cycle. Along the cycle the topic stays the same with
//    probability q, else moves to another one: q is solved from `reuse`.
// So during decode a neuron fires with probability p_n per token, consecutive
// tokens share their topic (and so their active set) with probability q, and
// the measured sparsity, hot share and reuse are the requested ones up to
// sampling noise (synth_stats.h measures them; tests/synth checks them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kx::synth {

// The hyper-parameters of a real model (the architecture is always "llama").
struct SynthShape {
  std::string name;
  std::string follows;  // the real model whose shape this is
  int n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0;
  int n_vocab = 0, n_ctx_train = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
};

// "tiny" (tests), "1b", "3b", "7b", "7b-mistral", "13b"; NotFound names the known ones.
absl::StatusOr<SynthShape> ShapeByName(const std::string& name);
const std::vector<std::string>& ShapeNames();

struct SynthSpec {
  SynthShape shape;
  int n_layer_override = 0;  // > 0: this many layers of the shape (same per-layer shape)
  GgmlType weight_type = GgmlType::kQ4_0;  // attention and FFN matrices, token embedding
  GgmlType output_type =
      GgmlType::kQ8_0;  // the LM head (llama.cpp writes Q6_K: not quantizable here)
  // relu | fatrelu | drelu: written as llama.feed_forward_activation (llama.cpp
  // ignores the key and computes SwiGLU on the same bytes); silu: no key.
  std::string act = "relu";
  float fatrelu_threshold = 0.1f;  // written for fatrelu; every firing gate is ≥ α
  // Fraction of inactive neurons per layer: one value for every layer, or
  // several interpolated linearly from the first layer to the last.
  // Default 0.90: ProSparse-7B/13B and dReLU models (TurboSparse) report
  // ~89-90 % FFN sparsity (dynamicinfer.txt §2, kairox.txt §8).
  std::vector<double> sparsity = {0.90};
  // PowerInfer (powerinfer.txt §3.1): ~20 % of neurons take ~80 % of the
  // activations (26 % / 43 % per layer for OPT-30B / LLaMA(ReGLU)-70B, 17 % /
  // 26 % model-wide); issue #17 asks for 20 % → 80 %.
  double hot_fraction = 0.20;
  double hot_share = 0.80;
  // P(neuron active at t+1 | active at t), micro-averaged over neurons and
  // layers. KAIROX (kairox.txt §6, Fig. 8) shows high reactivation for hot
  // neurons and < 0.2 beyond δ = 2 for the cold 70 %; no paper gives one
  // number, 0.6 is between the two. It must be at least the hot set's chance
  // overlap (≈ 0.33 at the defaults), which is what reuse is without topics.
  double reuse = 0.60;
  int topics = 64;               // K; at most the dimensions left after the token part
  double token_fraction = 0.25;  // share of n_embd reserved for ξ_t
  double residual_mix = 0.05;    // norm of each block's output relative to the embedding
  uint64_t seed = 1;
  int n_threads = 2;  // rows are made in parallel; the file does not depend on it
};

// The derived parameters (reported by the program, written as kairox.synth.* keys).
struct SynthDerived {
  std::vector<double> density;   // per layer, 1 - sparsity
  double p_hot = 0, p_cold = 0;  // per layer 0 (the others scale with their density)
  double topic_stay = 0;         // q
  double chance_reuse = 0;       // reuse without topic runs
  uint64_t file_bytes = 0;
};
absl::StatusOr<SynthDerived> Derive(const SynthSpec& spec);

// Writes the model to `path` (atomically: path.tmp, then rename), one tensor
// at a time: memory stays at the largest tensor (the token embedding).
// progress (may be null) is called after each tensor with (done, total).
absl::StatusOr<SynthDerived> WriteSynthModel(const std::string& path, const SynthSpec& spec,
                                             void (*progress)(int done, int total) = nullptr);

}  // namespace kx::synth
