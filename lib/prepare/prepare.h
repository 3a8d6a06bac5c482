// kairox-prepare's pipeline: calibration → activation profile → thresholds →
// co-activation grouping → predictors → bundles → sidecar. One call, minutes
// on 2 cores for the default model; every stage reports what it measured.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "prepare/calibration.h"
#include "sparse/grouping.h"
#include "sparse/predictor.h"
#include "tensor/dtype.h"

namespace kx {

struct PrepareOptions {
  std::string model_path;
  std::string sidecar_path;  // "": <model>.kairox.gguf beside the model
  // Target s: thresholds, labels and predictors are for this level
  // (SiLU/GELU models; a ReLU-family model's sparsity is its natural one, and
  // sparsity and levels are replaced by it: PrepareReport::sparsity). 0.15 is
  // the largest level whose predictor-driven perplexity stays within 3 % of
  // dense on SmolLM2-135M (docs/sparsity.md).
  float sparsity = 0.15f;
  // The caller asked for sparsity/levels explicitly (--sparsity, --levels):
  // a ReLU-family model then warns that they do not apply.
  bool sparsity_requested = false;
  // Thresholds are also stored for these levels (--sparsity switches at run time).
  std::vector<float> levels = {0.1f, 0.15f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f};
  // How ffn_down is stored in the bundles (sparse/bundle.h DownLayout).
  // kAuto: kBlocks when every layer's ffn_down allows it (Q4_1) and
  // auto_down_type is set, else kRows. kBlocks keeps the model's own down
  // blocks (no re-quantization, no extra bytes) and so fixes the groups to
  // them: group_size and grouping are then not used (the report says
  // "blocks"). kRows groups with `grouping` and re-quantizes down_t.
  enum class DownLayoutChoice { kAuto, kRows, kBlocks };
  DownLayoutChoice down_layout = DownLayoutChoice::kAuto;
  int group_size = 16;
  sparse::GroupingMethod grouping = sparse::GroupingMethod::kMetis;
  bool auto_down_type = true;
  GgmlType down_type = GgmlType::kQ8_0;  // used when !auto_down_type (kRows)
  CalibrationOptions calibration;
  bool train_predictors = true;
  // holdout_fraction is the held-out tail for every report. Ranks above 64
  // add more decode bytes than they save on this model class (prepare report).
  sparse::RankSearchOptions predictor = [] {
    sparse::RankSearchOptions r;
    r.ranks = {16, 32, 64};
    return r;
  }();
  // Neurons pinned always-on per layer: the largest max |act| over the
  // calibration ("massive activations", e.g. at the first token, which the
  // rest of the sequence depends on). A predictor that misses one of them
  // costs far more than its share of recall.
  double pin_fraction = 0.01;
  int n_threads = 0;                     // 0: all cores
  // Also compare METIS with frequency and random grouping for GS 4/8/16/32.
  bool compare_grouping = false;
  // Progress of each stage: (stage, done, total).
  std::function<void(const std::string&, int64_t, int64_t)> progress;
};

struct LayerReport {
  float threshold = 0;
  double calib_sparsity = 0;     // measured fraction at or below the threshold (pass 1;
                                 // ReLU family: the natural sparsity, all calibration tokens)
  double active_fraction = 0;    // held-out tokens, above the threshold
  sparse::PredictorReport predictor;
  sparse::GroupingQuality grouping;  // the chosen grouping on held-out tokens
  int pinned = 0;
  float max_abs_pinned_min = 0;  // smallest max |act| among the pinned neurons
  float max_abs_median = 0;      // median over the layer's neurons of max |act|
};

struct GroupingComparison {
  int group_size = 0;
  sparse::GroupingMethod method = sparse::GroupingMethod::kMetis;
  sparse::GroupingQuality mean;  // averaged over layers
  double seconds = 0;
};

struct PrepareReport {
  std::string sidecar_path;
  std::string calibration_source;
  int64_t calibration_tokens = 0, held_out_tokens = 0;
  std::string down_type;
  std::string down_layout;      // "rows" | "blocks"
  int group_size = 0;           // as used (kBlocks: 32)
  std::string activation_rule;  // the sidecar's kairox.activation_rule ("cats", "relu", ...)
  float sparsity = 0;           // the sidecar's target (ReLU family: mean natural sparsity)
  std::vector<LayerReport> layers;
  std::vector<GroupingComparison> grouping_comparison;
  uint64_t predictor_bytes = 0, bundle_bytes = 0, model_bytes = 0;
  double seconds_calibration = 0, seconds_profile = 0, seconds_grouping = 0,
         seconds_predictors = 0, seconds_bundles = 0, seconds_total = 0;
  std::string ToJson() const;
  std::string ToTable() const;  // human-readable summary
};

absl::StatusOr<PrepareReport> Prepare(const PrepareOptions& options);

}  // namespace kx
