// Token sampling from a logit vector: logit bias, repetition penalty, greedy,
// top-k, min-p, top-p, temperature, then a seeded draw.
//
// Usage:
//   kx::SamplerParams sp;  sp.temperature = 0.7f;  sp.seed = 42;
//   kx::Sampler sampler(sp);
//   int32_t next = sampler.Sample(engine->Logits(), history);
//
// The pipeline runs in this order (llama.cpp's names and semantics):
//   0. logit bias: each (id, bias) pair adds bias to that token's logit
//      (pairs for the same id add up; -inf bans the token, +inf forces it
//      unless it is banned too; ids outside the vocabulary are ignored);
//   1. repetition penalty over the distinct tokens among the last
//      repeat_last_n of `history`: logit > 0 → logit / penalty, else
//      logit × penalty;
//   2. temperature <= 0 → the argmax (lowest id on ties), nothing else runs;
//   3. top-k: keep the k highest logits;
//   4. min-p: keep tokens whose probability is >= min_p × the top probability;
//   5. top-p: keep the smallest set of most likely tokens whose probability
//      mass reaches top_p;
//   6. divide by the temperature, softmax, draw.
// Filters 4 and 5 use probabilities at temperature 1 (before step 6).
//
// Determinism: for a given seed, params and inputs the same token comes out on
// every platform: the generator is std::mt19937_64 (its output sequence is
// fixed by the C++ standard), the uniform variate is computed here from the
// raw 64-bit output, and every selection orders candidates by (logit
// descending, id ascending), a strict total order, so ties do not depend on
// the standard library's nth_element/sort.
//
// Non-finite logits: NaN and -inf are never sampled (treated as -inf). If any
// logit is +inf, the draw is uniform over the +inf tokens (the limit of the
// softmax); greedy returns the lowest such id. If no token has a logit above
// -inf (all NaN/-inf), Sample returns 0.
//
// Cost per call: two passes over the vocabulary (copy, max), then only the
// tokens above the min-p cutoff are gathered; top-k selects with a k-entry
// heap during that gather (O(n) compares for typical logits), and top-p sorts
// the most likely candidates in chunks of doubling size until the mass is
// reached. The vocabulary is never fully sorted unless top-p must keep
// (nearly) all of it; nothing is allocated after the first call with a given
// vocabulary size. Not thread-safe: one Sampler per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kx {

struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;  // added to the logit; -inf bans the token
  bool operator==(const LogitBias&) const = default;
};

// Parses a comma-separated list of ID(+|-)BIAS entries, e.g.
// "15043+1.5,2-inf" (BIAS: a decimal number, "inf" or "infinity"). Errors
// name the entry that is wrong. An empty string gives an empty list.
absl::StatusOr<std::vector<LogitBias>> ParseLogitBias(std::string_view spec);

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1 (or <= 0): off
  int repeat_last_n = 64;       // 0: off, < 0: the whole history
  uint64_t seed = 0xC0FFEE;
  std::vector<LogitBias> logit_bias;  // applied first (step 0)
};

// OK when every parameter is in its range, else InvalidArgument naming the first one that is
// not and its range: temperature finite; top_p and min_p in [0, 1]; repeat_penalty finite and
// > 0; repeat_last_n >= -1; top_k >= -1. Every interface (CLI, chat, C ABI, Python) checks
// through this before anything runs.
absl::Status ValidateSamplerParams(const SamplerParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // Picks the next token from `logits` (one per vocabulary entry, not empty).
  // `history`: the tokens so far (prompt and generated), for the repetition
  // penalty; ids outside [0, logits.size()) are ignored.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history);

  // Restarts the generator's sequence from `seed`.
  void Reset(uint64_t seed);

  const SamplerParams& params() const { return params_; }

  // Replaces params().logit_bias; the generator's sequence goes on.
  void SetLogitBias(std::vector<LogitBias> bias) { params_.logit_bias = std::move(bias); }

  // A uniform double in [0, 1) from one raw 64-bit output (top 53 bits).
  static double UniformFromBits(uint64_t bits);

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  void ApplyLogitBias();
  void ApplyRepetitionPenalty(std::span<const int32_t> history);
  // Fills cands_ with the tokens that survive top-k and min-p (with any +inf
  // logit: the +inf tokens, as logit 0).
  void CollectCandidates(float max_logit);
  void TopK(size_t k);
  void TopP(float top_p);
  int32_t Draw(float temperature);

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<float> vals_;         // sanitized, penalised logits; reused
  std::vector<Candidate> cands_;    // reused across calls
  std::vector<int32_t> penalized_;  // reused across calls
  std::vector<double> weights_;     // reused across calls
  // True while cands_ is in id order (the canonical order for the draw).
  bool in_id_order_ = true;
};

}  // namespace kx
