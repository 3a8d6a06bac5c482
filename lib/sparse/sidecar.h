// The sidecar: everything kairox adds to a model for activation-sparse
// inference, in a standard GGUF file beside it (`<model>.kairox.gguf`), so
// the model file itself stays exactly as the llama.cpp ecosystem wrote it.
//
// Schema (format version kSidecarVersion):
//   keys   kairox.version                u32   format version
//          kairox.model.sha256           str   sha256 of the model file it was built for
//          kairox.model.arch             str   general.architecture of that model
//          kairox.model.n_layer/n_embd/n_ff u32
//          kairox.sparsity               f32   target sparsity s the thresholds/predictors are for
//          kairox.sparsity_levels        [f32] the grid blk.N.kairox.thresholds is indexed by
//          kairox.group_size             u32   neurons per group (GS)
//          kairox.down_layout            str   "rows" | "blocks" (bundle.h DownLayout; blocks:
//                                              GS 32, perm maps the model's ffn_down blocks
//                                              to groups in order, down type = the model's)
//          kairox.activation_rule        str   "cats": active ⇔ |act(gate·x)| > t_l
//                                              (SiLU/GELU models); "relu" | "fatrelu" |
//                                              "drelu": active ⇔ A(g, u) ≠ 0 (ReLU-family
//                                              models, model/llama_ffn_activation.h), every
//                                              threshold 0 (fatrelu: its t). Must match the
//                                              model's FFN activation (checked at open).
//          kairox.predictor.input        str   "adjacent": layer l+1's predictor reads layer l's
//                                              FFN input; layer 0's reads its own
//          kairox.calibration            str   JSON: data source, tokens, seed, timings
//          kairox.sha256.meta            str   SHA-256 over every other key (type and raw
//                                              value bytes, in file order;
//                                              sidecar_verify.h MetadataSha256)
//   per layer N (neurons in the sidecar's permuted, group-major order:
//   position i = group i/GS, slot i%GS, original neuron perm[i]):
//          blk.N.kairox.perm             I32 [n_ff]      the permutation
//          blk.N.kairox.freq             F32 [n_ff]      calibration activation frequency
//          blk.N.kairox.thresholds       F32 [levels]    t_l per sparsity level
//          blk.N.kairox.bundle_types     [u32] {up, gate, down} ggml types of the bundles
//          blk.N.kairox.bundles          I8  [n_groups·stride]  one bundle per group (bundle.h)
//          blk.N.kairox.pred.w1 F16 [n_in, rank], .b1 F32 [rank],
//          blk.N.kairox.pred.w2 F16 [n_ff, rank] (rank rows of n_ff: W2 transposed, so
//                                decode adds rank scaled rows; columns permuted),
//                                .b2 F32 [n_ff] (permuted)
//          blk.N.kairox.pred.threshold   f32   probability threshold of the predictor
//          blk.N.kairox.sha256           str   SHA-256 over layer N's tensors above (name,
//                                              byte count, bytes; sidecar_verify.h)
// Open checks the metadata digest first, then each layer's structure, then
// (one pass, skipped when the verified-sidecar cache has this file's path,
// size, mtime and inode) each layer's digest and value ranges: predictor
// weights and biases finite, frequencies in [0, 1]. Thresholds (finite, in
// [0, kMaxSidecarThreshold]) are checked on every open.
// The file is aligned to 4096 bytes so each layer's bundles start on a page
// (O_DIRECT reads of groups need no copy of the file's head).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/gguf.h"
#include "sparse/bundle.h"
#include "sparse/predictor.h"

namespace kx {
class Model;
}

namespace kx::sparse {

// 2: kairox.down_layout (version 1 sidecars were all "rows"); pred.w2 stored
//    transposed (rank rows of n_ff).
// 3: content digests (kairox.sha256.meta, blk.N.kairox.sha256). Version 2
//    files are refused with the kairox-prepare command that rebuilds them:
//    a sidecar is derived from the model in minutes, and reading one whose
//    bytes cannot be checked is how damage turned into different text.
inline constexpr uint32_t kSidecarVersion = 3;
inline constexpr uint64_t kSidecarAlignment = 4096;

// `<model path without .gguf>.kairox.gguf`.
std::string DefaultSidecarPath(const std::string& model_path);

// kairox.activation_rule for a model with this FFN activation: "cats" for
// SiLU/GELU, the activation's name for the ReLU family.
std::string ActivationRuleFor(FfnActivation act);

// What kairox-prepare writes, per layer.
struct SidecarLayerData {
  std::vector<int32_t> perm;
  std::vector<float> freq;        // permuted order
  std::vector<float> thresholds;  // one per sparsity level
  BundleLayout layout;
  std::vector<uint8_t> bundles;   // layout.n_groups · layout.bundle_stride
  bool has_predictor = false;
  int pred_rank = 0;
  float pred_threshold = 0.5f;
  // F16. w2t: rank rows of n_ff (w2 transposed), its columns and b2 in
  // permuted order.
  std::vector<uint16_t> w1, w2t;
  std::vector<float> b1, b2;
};

struct SidecarData {
  std::string model_sha256;
  std::string model_arch;
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  float sparsity = 0.0f;
  std::vector<float> sparsity_levels;
  int group_size = 0;
  DownLayout down_layout = DownLayout::kRows;
  std::string activation_rule = "cats";  // ActivationRuleFor(the model's ffn_act)
  std::string calibration_json;
  std::vector<SidecarLayerData> layers;
};

absl::Status WriteSidecar(const SidecarData& data, const std::string& path);

struct SidecarOptions {
  // Compare kairox.model.sha256 with the model file's (cached by path, size
  // and mtime, so only the first open of a model hashes it).
  bool check_model_sha256 = true;
};

// A validated, mapped sidecar. Views point into the file; valid while it lives.
class Sidecar {
 public:
  struct Layer {
    const int32_t* perm = nullptr;
    const float* freq = nullptr;
    std::vector<float> thresholds;
    BundleLayout layout;
    const uint8_t* bundles = nullptr;
    uint64_t bundles_file_offset = 0;  // where `bundles` starts in the file (O_DIRECT reads)
    bool has_predictor = false;
    PredictorView predictor;
  };

  static absl::StatusOr<std::unique_ptr<const Sidecar>> Open(const std::string& path,
                                                             const Model& model,
                                                             const SidecarOptions& options = {});

  const std::string& path() const { return path_; }
  float sparsity() const { return sparsity_; }
  const std::vector<float>& sparsity_levels() const { return levels_; }
  int group_size() const { return group_size_; }
  DownLayout down_layout() const { return down_layout_; }
  const std::string& activation_rule() const { return activation_rule_; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int l) const { return layers_[l]; }
  const std::string& calibration_json() const { return calibration_; }
  // Per-layer thresholds for sparsity s: the grid's level nearest to s
  // (exact levels are what prepare calibrated; say so when s is not one).
  absl::StatusOr<std::vector<float>> ThresholdsFor(float s) const;
  // Bytes of predictor weights (F16 + F32 biases) over all layers.
  uint64_t PredictorBytes() const;
  // Bytes of all bundles over all layers.
  uint64_t BundleBytes() const;
  // Every layer's group frequencies (group_frequency.h), [layer][group].
  std::vector<float> GroupFrequency() const;
  // True when Open skipped the per-layer hash pass because the
  // verified-sidecar cache already had this file (sidecar_verify.h).
  bool verified_from_cache() const { return verified_from_cache_; }
  // OK while the file is the one verified at Open; DataLoss naming the file
  // once it was written to in place (size or mtime changed): its mapped or
  // read bytes are no longer the verified ones. One fstat; the engine calls
  // it after every evaluation.
  absl::Status CheckUnchanged() const;

  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

 private:
  Sidecar() = default;
  std::string path_;
  std::unique_ptr<GgufFile> file_;
  float sparsity_ = 0.0f;
  std::vector<float> levels_;
  int group_size_ = 0;
  DownLayout down_layout_ = DownLayout::kRows;
  std::string activation_rule_;
  std::string calibration_;
  std::vector<Layer> layers_;
  int fd_ = -1;  // kept open to fstat the file the session reads
  uint64_t stamp_size_ = 0;
  int64_t stamp_mtime_ns_ = 0;
  bool verified_from_cache_ = false;
};

}  // namespace kx::sparse
