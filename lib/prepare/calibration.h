// Calibration data for kairox-prepare: token sequences a fresh machine can
// get without any download. By default the model's own answers to built-in
// instructions (formatted with its chat template, sampled with a fixed seed),
// so calibration follows the distribution the model is used on and never
// touches the text perplexity is measured on; or a text file the user names.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kx {

class Engine;

struct CalibrationOptions {
  // Total tokens (prompts + generations), at least. 4096: on SmolLM2-135M at
  // s = 0.15 the predictors then give masked-dense PPL 37.466 (+1.1 % over
  // dense) where 8192 gave 39.508 (+6.6 %) — the measured curve
  // (docs/sparsity.md) was made with 4096, and prepare takes half the time.
  int64_t token_budget = 4096;
  int max_new_tokens = 192;     // per built-in instruction
  uint64_t seed = 1;
  float temperature = 0.8f;
  std::string text_file;        // non-empty: chunks of this text instead of generations
  int seq_len = 256;            // tokens per chunk of text_file
};

struct CalibrationSet {
  std::vector<std::vector<int32_t>> sequences;
  int64_t n_tokens = 0;
  std::string source;  // what it was built from, for the sidecar's record
};

// The built-in instructions (for tests and the record).
const std::vector<std::string>& CalibrationInstructions();

// Builds the set with `engine` (dense; its KV cache is cleared). progress
// (may be empty) gets (tokens so far, token budget).
absl::StatusOr<CalibrationSet> BuildCalibration(
    Engine& engine, const CalibrationOptions& options,
    const std::function<void(int64_t, int64_t)>& progress);

}  // namespace kx
