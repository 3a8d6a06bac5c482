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

}  // namespace kx::test
