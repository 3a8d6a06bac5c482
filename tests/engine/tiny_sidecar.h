// A writer-made tiny model (tiny_model.h) plus a sidecar from the real prepare pipeline, in
// one call: the tests of the split FFN, the decode graph's device externals and the
// simulator against the engine all need one, differing only in seed, activation, group size
// and sparsity. The same spec and options always give the same files.
//
//   kx::test::TinyModelSpec s;  // 3 layers, n_embd 64, n_ff 512 ...
//   kx::test::TinySidecarOptions o;
//   o.group_size = 4;
//   absl::Status st = kx::test::WriteTinyModelWithSidecar(s, model_path, sidecar_path, o);
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "engine/tiny_model.h"
#include "prepare/prepare.h"

namespace kx::test {

struct TinySidecarOptions {
  int group_size = 16;
  // The sidecar's target sparsity and the levels stored beside it; < 0 leaves prepare's
  // defaults (a ReLU-family model gets its natural sparsity either way).
  float sparsity = -1.0f;
  std::vector<float> levels;  // with sparsity >= 0; empty: prepare's default levels
  PrepareOptions::DownLayoutChoice down_layout = PrepareOptions::DownLayoutChoice::kRows;
  // Calibration and predictor training: small, so a test prepares in about a second.
  int calibration_tokens = 1200;
  int max_new_tokens = 48;
  int epochs = 3;
};

// Prepares `sidecar_path` for the model at `model_path` (2 threads, rank-16 predictors).
absl::Status PrepareTinySidecar(const std::string& model_path, const std::string& sidecar_path,
                                const TinySidecarOptions& options);

// WriteTinyModel(model_path, spec), then PrepareTinySidecar.
absl::Status WriteTinyModelWithSidecar(const TinyModelSpec& spec, const std::string& model_path,
                                       const std::string& sidecar_path,
                                       const TinySidecarOptions& options);

// The split FFN's test model, which its tests (device FFN, decode graph, device layers,
// simulator against the engine) share and vary only by seed: 3 layers, n_embd 64, n_ff 512,
// FATReLU with t = 1.2 (most gates below it, so most groups are idle in a step and the
// policies have something to move). Its sidecar: rows, 128 groups of 4; `brief`: a shorter
// calibration (600 tokens, 2 epochs; about a second less). The two give other predictors, so
// which groups move (and whether any do) depends on it: each test keeps the one its
// expectations were written for.
TinyModelSpec SparseFatReluSpec(uint64_t seed);
TinySidecarOptions SparseFatReluSidecar(bool brief);

}  // namespace kx::test
