#include "engine/tiny_sidecar.h"

namespace kx::test {
namespace {
constexpr int kPrepareThreads = 2;
constexpr int kPredictorRank = 16;
}  // namespace

absl::Status PrepareTinySidecar(const std::string& model_path, const std::string& sidecar_path,
                                const TinySidecarOptions& options) {
  PrepareOptions o;
  o.model_path = model_path;
  o.sidecar_path = sidecar_path;
  if (options.sparsity >= 0.0f) {
    o.sparsity = options.sparsity;
    if (!options.levels.empty()) o.levels = options.levels;
  }
  o.down_layout = options.down_layout;
  o.group_size = options.group_size;
  o.n_threads = kPrepareThreads;
  o.calibration.token_budget = options.calibration_tokens;
  o.calibration.max_new_tokens = options.max_new_tokens;
  o.predictor.ranks = {kPredictorRank};
  o.predictor.max_rank = kPredictorRank;
  o.predictor.train.epochs = options.epochs;
  return Prepare(o).status();
}

absl::Status WriteTinyModelWithSidecar(const TinyModelSpec& spec, const std::string& model_path,
                                       const std::string& sidecar_path,
                                       const TinySidecarOptions& options) {
  KX_RETURN_IF_ERROR(WriteTinyModel(model_path, spec, nullptr));
  return PrepareTinySidecar(model_path, sidecar_path, options);
}

TinyModelSpec SparseFatReluSpec(uint64_t seed) {
  TinyModelSpec s;
  s.n_layer = 3;
  s.n_embd = 64;
  s.n_ff = 512;
  s.seed = seed;
  s.ffn_act = "fatrelu";
  s.ffn_act_threshold = 1.2f;
  return s;
}

TinySidecarOptions SparseFatReluSidecar(bool brief) {
  TinySidecarOptions o;
  o.group_size = 4;
  if (brief) {
    o.calibration_tokens = 600;
    o.max_new_tokens = 32;
    o.epochs = 2;
  }
  return o;
}

}  // namespace kx::test
