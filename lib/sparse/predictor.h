// Activation predictors: per FFN layer, a small MLP that guesses which
// neurons will be active for a token before the FFN runs,
//   p = σ(W2·relu(W1·x + b1) + b2),   neuron n predicted active iff p[n] ≥ threshold.
// x is the n_in-vector the engine hands over (for layer l+1: layer l's FFN
// input — "adjacent prediction"); the output covers the layer's n_ff neurons.
//
// Offline: TrainPredictor fits one rank on (x, labels) with mini-batch Adam on
// a positive-weighted BCE (oneDNN sgemm for the matmuls); TrainForRecall picks
// the smallest rank that reaches a held-out recall target and reports how it
// compares with the static "most frequent neurons" mask. Online (decode):
// weights are stored as F16 and RunPredictor evaluates one token with the CPU
// kernel table; LogitsToMask/LogitsToActiveList compare logits against
// logit(threshold), so no sigmoid runs per neuron.
//
// Usage:
//   kx::sparse::RankSearchOptions opt;                    // target recall 0.95
//   kx::sparse::PredictorReport report;
//   KX_ASSIGN_OR_RETURN(kx::sparse::Predictor p,
//                       kx::sparse::TrainForRecall(x, n_tokens, n_in, labels, opt, &report));
//   kx::sparse::PredictorF16 h = kx::sparse::ToF16Predictor(p);   // what the sidecar stores
//   kx::sparse::RunPredictor(h.View(), kx::cpu::Kernels(), x_tok, hidden, logits);
//   int n_active = kx::sparse::LogitsToActiveList(logits, h.n_out, h.threshold, active);
//
// Threading: training and evaluation run on their own kx::ThreadPool of
// n_threads threads (data parallel over tokens), each calling oneDNN's sgemm
// single-threaded: the GNU OpenMP team is capped to 1 with omp_set_num_threads
// on every pool thread (the caller's own setting is restored on return), so no
// libgomp thread spins against kairox's pool or the element-wise work.
// Results depend on n_threads, never on timing. Functions here are
// thread-compatible: concurrent calls on different data are fine.
#pragma once

#include <cstddef>  // activity.h uses size_t without including it
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/kernels.h"
#include "sparse/activity.h"

namespace kx::sparse {

// Float weights, as trained. Any input standardization is already folded into
// w1/b1, so the predictor consumes the raw hidden state.
struct Predictor {
  int n_in = 0, rank = 0, n_out = 0;
  std::vector<float> w1;  // rank × n_in, row-major
  std::vector<float> b1;  // rank
  std::vector<float> w2;  // n_out × rank, row-major
  std::vector<float> b2;  // n_out
  float threshold = 0.5f;
};

struct TrainOptions {
  int rank = 64;
  int epochs = 6;
  int batch = 256;
  // Adam step size, cosine-decayed to 0.1·lr. High for Adam, but with only a
  // few epochs affordable it converges much further than 1e-3 (bench_predictor).
  float lr = 3e-2f;
  // BCE weight on positive labels. With weight w the loss-optimal decision at
  // p = 0.5 predicts "active" once the true probability exceeds 1/(1+w), so
  // w > 1 trades precision for recall.
  float pos_weight = 3.0f;
  uint64_t seed = 1;
  int n_threads = 2;
  // Standardize each input feature (mean/std of the training tokens); folded
  // into w1/b1 when training ends. Hidden states have outlier channels.
  bool standardize = true;
};

// Optional training diagnostics.
struct TrainStats {
  std::vector<double> epoch_loss;  // mean weighted BCE per element, per epoch
  double seconds = 0;
};

// Trains one predictor of opts.rank on tokens x (n_tokens × n_in, row-major)
// with labels (n_tokens × n_out bits). Deterministic for a fixed seed and
// n_threads. Errors: empty input, shape mismatch, bad options.
absl::StatusOr<Predictor> TrainPredictor(const float* x, int64_t n_tokens, int n_in,
                                         const ActivityMatrix& labels, const TrainOptions& opts,
                                         TrainStats* stats = nullptr);

// Micro-averaged quality of a predictor (or mask) on labelled tokens.
struct PredictorMetrics {
  int64_t n_tokens = 0;
  int64_t true_positives = 0, false_positives = 0, false_negatives = 0;
  double recall = 0;              // TP / (TP + FN)
  double precision = 0;           // TP / (TP + FP)
  double predicted_fraction = 0;  // mean predicted-set size / n_out
  double true_fraction = 0;       // mean active-set size / n_out
  double mean_token_recall = 0;   // per-token recall averaged over tokens with actives
  double min_token_recall = 0;
  // Predicted-set sizes over tokens.
  double mean_predicted = 0;
  int min_predicted = 0, max_predicted = 0, p99_predicted = 0;
};

// Runs p over the tokens (float weights, oneDNN; n_threads as in TrainOptions).
PredictorMetrics EvaluatePredictor(const Predictor& p, const float* x, int64_t n_tokens,
                                   const ActivityMatrix& labels, int n_threads = 2);

// The baseline every predictor must beat: always predict the k most frequent
// neurons of `train`, k = round(predicted_fraction · n_out), scored on held_out.
struct StaticMaskEval {
  int n_predicted = 0;
  double recall = 0, precision = 0, predicted_fraction = 0;
};
StaticMaskEval EvaluateStaticMask(const ActivityMatrix& train, const ActivityMatrix& held_out,
                                  double predicted_fraction);

struct RankSearchOptions {
  std::vector<int> ranks = {16, 32, 64, 128, 256};
  double target_recall = 0.95;
  int max_rank = 256;
  // The last fraction of the tokens (a contiguous tail: neighbouring tokens are
  // correlated, so a random split would flatter the predictor) is held out.
  double holdout_fraction = 0.1;
  // Base options; `rank` is ignored. Every candidate rank first trains for
  // search_epochs of the full schedule; the chosen one continues to
  // train.epochs, so the result equals a plain full run of that rank.
  TrainOptions train;
  int search_epochs = 2;
  // If no rank reaches the target at 0.5 (the usual case for SiLU models),
  // ranks are compared by what they cost at the target: with
  // calibrate_threshold, the predicted fraction once the threshold is lowered
  // to reach the target on held-out tokens (recall at 0.5 alone favours loose
  // predictors); without, recall at 0.5. The smallest rank within this of the
  // best is used: past the rule's own rank the curve is flat while the decode
  // bytes keep doubling.
  double plateau_tolerance = 0.01;
  // Bytes the sparse FFN reads per active neuron (gate + up + down rows; SmolLM2
  // Q4_1: 3·576·20/32 = 1080). When > 0 it replaces plateau_tolerance in the
  // calibrated comparison: the rank minimising the decode bytes per token,
  // F16 predictor bytes + fraction_at_target·n_out·ffn_bytes_per_neuron.
  int64_t ffn_bytes_per_neuron = 0;
  // If the chosen predictor's held-out recall at 0.5 misses the target, lower
  // the threshold (not below min_threshold) to the largest value that reaches it
  // on the held-out tokens and store it in Predictor::threshold.
  bool calibrate_threshold = true;
  float min_threshold = 0.05f;
};

struct RankTrial {
  int rank = 0;
  double recall = 0, precision = 0,
         predicted_fraction = 0;  // held out, at 0.5, after search_epochs
  // Only when no rank reached the target and calibrate_threshold is on: the
  // threshold that reaches it on held-out tokens and the predicted fraction there.
  float threshold_at_target = 0.5f;
  double fraction_at_target = 0;
  int64_t bytes_at_target = 0;  // predictor + predicted FFN bytes (ffn_bytes_per_neuron > 0)
  double seconds = 0;
};

struct PredictorReport {
  int rank = 0;
  float threshold = 0.5f;
  bool threshold_lowered = false;
  bool reached_target = false;  // held-out recall ≥ target at the stored threshold
  double recall = 0, precision = 0, predicted_fraction = 0, true_fraction = 0;
  double train_seconds = 0;        // the whole call
  PredictorMetrics held_out;       // float weights, stored threshold
  PredictorMetrics held_out_f16;   // after rounding w1/w2 to F16
  StaticMaskEval static_mask;      // same predicted-set size, same held-out tokens
  bool beats_static_mask = false;  // recall and precision both higher
  std::vector<RankTrial> trials;
  std::string note;  // human-readable summary (misses, calibration)
};

// Picks the smallest rank in opts.ranks (≤ max_rank) whose held-out recall at
// threshold 0.5 reaches the target after the short search run, then finishes
// training it. If none does, the smallest rank within plateau_tolerance of the
// best (see there) is used and the report says so; the threshold may then be
// lowered (calibrate_threshold). Note that a calibrated threshold is fitted on
// the same held-out tokens the report scores, so its recall is slightly
// optimistic (one scalar fitted on ~10⁵ positive labels).
absl::StatusOr<Predictor> TrainForRecall(const float* x, int64_t n_tokens, int n_in,
                                         const ActivityMatrix& labels,
                                         const RankSearchOptions& opts, PredictorReport* report);

// ---- Inference (decode) --------------------------------------------------------------------

// A predictor with F16 (IEEE half bits) matrices, as the sidecar stores it.
// The view's pointers stay valid while the arrays they point into live.
struct PredictorView {
  int n_in = 0, rank = 0, n_out = 0;
  const uint16_t* w1 = nullptr;  // rank × n_in
  const float* b1 = nullptr;     // rank
  const uint16_t* w2 = nullptr;  // n_out × rank
  // Or W2 transposed, rank × n_out (the sidecar's layout): then the second
  // layer is rank axpys over n_out outputs, not n_out dots of rank elements
  // (short rows leave a dot kernel's per-row reduction as the whole cost).
  const uint16_t* w2t = nullptr;
  const float* b2 = nullptr;     // n_out
  float threshold = 0.5f;
};

struct PredictorF16 {
  int n_in = 0, rank = 0, n_out = 0;
  std::vector<uint16_t> w1, w2;
  std::vector<float> b1, b2;
  float threshold = 0.5f;
  PredictorView View() const;
  int64_t WeightBytes() const;  // bytes read per token: F16 matrices + F32 biases
};

// Round to nearest even half.
std::vector<uint16_t> ToF16(const std::vector<float>& src);
PredictorF16 ToF16Predictor(const Predictor& p);
// The float predictor whose w1/w2 are the F16-rounded values (for evaluation).
Predictor RoundedToF16(const Predictor& p);

// One token: hidden[rank] = relu(W1·x + b1), logits[n_out] = W2·hidden + b2,
// with the F16 matvec of `kernels` (its activations are plain F32, so x and
// hidden are used in place). Single-threaded; RunPredictorRows evaluates
// logits[row_begin, row_end) only, for callers that split the output rows
// over their own threads after computing `hidden` once with RunPredictorHidden.
void RunPredictor(const PredictorView& p, const cpu::KernelTable& kernels, const float* x,
                  float* hidden, float* logits);
void RunPredictorHidden(const PredictorView& p, const cpu::KernelTable& kernels, const float* x,
                        float* hidden);
void RunPredictorRows(const PredictorView& p, const cpu::KernelTable& kernels, const float* hidden,
                      int row_begin, int row_end, float* logits);

// logit(threshold) = log(t / (1 − t)): p ≥ t  ⟺  logit ≥ ThresholdLogit(t).
float ThresholdLogit(float threshold);
// Bit n of mask (words (n_out + 63) / 64, all written) = logits[n] ≥ logit(threshold).
// Returns the number of set bits.
int LogitsToMask(const float* logits, int n_out, float threshold, uint64_t* mask);
// Writes the ascending ids of predicted-active neurons to active (room for
// n_out) and returns how many.
int LogitsToActiveList(const float* logits, int n_out, float threshold, int32_t* active);

}  // namespace kx::sparse
