// Rank selection: short runs pick the smallest rank that reaches the recall
// target on held-out tokens, the chosen run continues to the full schedule,
// and the threshold is lowered on the held-out tokens if recall still misses.
#include <algorithm>
#include <cmath>
#include <memory>

#include "base/check.h"
#include "base/timer.h"
#include "sparse/predictor.h"
#include "sparse/predictor_internal.h"

namespace kx::sparse {
namespace {

// Calibrated thresholds sit this far (in logit units) below the logit of the
// positive they are computed from, so float rounding cannot flip it.
constexpr float kCalibrationMargin = 1e-4f;

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// The largest threshold whose held-out recall is ≥ target: the logit of the
// floor((1 − target)·P)-th smallest positive logit (P = held-out positives).
float CalibrateThreshold(const Predictor& p, const float* x, int64_t n_tokens,
                         const ActivityMatrix& labels, double target_recall) {
  std::vector<float> positives;
  internal::ForwardLogits(p, x, n_tokens, [&](int64_t begin, int64_t rows, const float* z) {
    for (int64_t i = 0; i < rows; ++i) {
      const uint64_t* lab = labels.Row(begin + i);
      for (int w = 0; w < labels.words_per_row(); ++w) {
        for (uint64_t bits = lab[w]; bits != 0; bits &= bits - 1) {
          positives.push_back(z[i * p.n_out + w * 64 + __builtin_ctzll(bits)]);
        }
      }
    }
  });
  if (positives.empty()) return p.threshold;
  const auto k = static_cast<size_t>(
      std::floor((1.0 - target_recall) * static_cast<double>(positives.size())));
  std::nth_element(positives.begin(), positives.begin() + std::min(k, positives.size() - 1),
                   positives.end());
  return Sigmoid(positives[std::min(k, positives.size() - 1)] - kCalibrationMargin);
}

absl::Status ValidateSearchOptions(const RankSearchOptions& o) {
  if (!(o.target_recall > 0.0 && o.target_recall <= 1.0)) {
    return absl::InvalidArgumentError("target_recall must be in (0, 1]");
  }
  if (!(o.holdout_fraction > 0.0 && o.holdout_fraction < 1.0)) {
    return absl::InvalidArgumentError("holdout_fraction must be in (0, 1)");
  }
  if (!(o.plateau_tolerance >= 0.0))
    return absl::InvalidArgumentError("plateau_tolerance must be ≥ 0");
  if (o.search_epochs <= 0) return absl::InvalidArgumentError("search_epochs must be > 0");
  if (!(o.min_threshold > 0.0f && o.min_threshold <= 0.5f)) {
    return absl::InvalidArgumentError("min_threshold must be in (0, 0.5]");
  }
  bool any = false;
  for (int r : o.ranks) {
    if (r <= 0)
      return absl::InvalidArgumentError(absl::StrCat("rank candidates must be > 0, got ", r));
    any |= r <= o.max_rank;
  }
  if (!any) return absl::InvalidArgumentError("no rank candidate is ≤ max_rank");
  TrainOptions t = o.train;
  t.rank = 1;
  return internal::ValidateTrainOptions(t);
}

}  // namespace

absl::StatusOr<Predictor> TrainForRecall(const float* x, int64_t n_tokens, int n_in,
                                         const ActivityMatrix& labels,
                                         const RankSearchOptions& opts, PredictorReport* report) {
  KX_RETURN_IF_ERROR(internal::ValidateTrainInputs(x, n_tokens, n_in, labels));
  KX_RETURN_IF_ERROR(ValidateSearchOptions(opts));
  const auto n_hold =
      std::max<int64_t>(1, std::llround(opts.holdout_fraction * static_cast<double>(n_tokens)));
  const int64_t n_train = n_tokens - n_hold;
  if (n_train < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("too few tokens (", n_tokens, ") to hold out ", n_hold));
  }
  Stopwatch total;
  internal::WorkerPool workers(opts.train.n_threads);
  const ActivityMatrix train_labels = labels.Slice(0, n_train);
  const ActivityMatrix hold_labels = labels.Slice(n_train, n_tokens);
  const float* hold_x = x + n_train * n_in;
  const internal::TrainData data =
      internal::PrepareTrainData(x, n_train, n_in, train_labels, opts.train.standardize);

  std::vector<int> ranks;
  for (int r : opts.ranks) {
    if (r <= opts.max_rank) ranks.push_back(r);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());

  PredictorReport rep;
  std::vector<std::unique_ptr<internal::Trainer>> tried;
  std::unique_ptr<internal::Trainer> chosen;
  for (int r : ranks) {
    Stopwatch timer;
    TrainOptions t = opts.train;
    t.rank = r;
    auto trainer = std::make_unique<internal::Trainer>(data, t, workers);
    trainer->RunEpochs(opts.search_epochs, nullptr);
    const PredictorMetrics m =
        internal::Evaluate(trainer->Export(), hold_x, n_hold, hold_labels, workers);
    RankTrial trial;
    trial.rank = r;
    trial.recall = m.recall;
    trial.precision = m.precision;
    trial.predicted_fraction = m.predicted_fraction;
    trial.seconds = timer.ElapsedSeconds();
    rep.trials.push_back(trial);
    if (m.recall >= opts.target_recall) {
      chosen = std::move(trainer);
      break;
    }
    tried.push_back(std::move(trainer));
  }
  const bool search_reached = chosen != nullptr;
  if (!chosen && opts.calibrate_threshold) {
    // Cost at the target: predicted fraction at the calibrated threshold.
    double best = 1.0;
    bool any_reached = false;
    std::vector<char> reached(tried.size(), 0);
    for (size_t i = 0; i < tried.size(); ++i) {
      Predictor p = tried[i]->Export();
      p.threshold =
          std::clamp(CalibrateThreshold(p, hold_x, n_hold, hold_labels, opts.target_recall),
                     opts.min_threshold, p.threshold);
      const PredictorMetrics m = internal::Evaluate(p, hold_x, n_hold, hold_labels, workers);
      rep.trials[i].threshold_at_target = p.threshold;
      rep.trials[i].fraction_at_target = m.predicted_fraction;
      rep.trials[i].bytes_at_target = ToF16Predictor(p).WeightBytes() +
                                      std::llround(m.predicted_fraction * p.n_out *
                                                   static_cast<double>(opts.ffn_bytes_per_neuron));
      if (m.recall >= opts.target_recall) {  // a clamped threshold can miss it
        best = std::min(best, m.predicted_fraction);
        any_reached = true;
        reached[i] = 1;
      }
    }
    if (any_reached && opts.ffn_bytes_per_neuron > 0) {  // least decode bytes
      size_t arg = tried.size();
      for (size_t i = 0; i < tried.size(); ++i) {
        if (!reached[i]) continue;  // threshold clamped at min_threshold
        if (arg == tried.size() ||
            rep.trials[i].bytes_at_target < rep.trials[arg].bytes_at_target) {
          arg = i;
        }
      }
      if (arg < tried.size()) chosen = std::move(tried[arg]);
    }
    for (size_t i = 0; any_reached && i < tried.size() && !chosen; ++i) {  // ascending rank
      if (reached[i] && rep.trials[i].fraction_at_target <= best + opts.plateau_tolerance) {
        chosen = std::move(tried[i]);
      }
    }
  }
  if (!chosen) {  // recall at 0.5
    double best = 0;
    for (const RankTrial& t : rep.trials) best = std::max(best, t.recall);
    for (size_t i = 0; i < tried.size() && !chosen; ++i) {
      if (rep.trials[i].recall >= best - opts.plateau_tolerance) chosen = std::move(tried[i]);
    }
  }
  tried.clear();
  chosen->RunEpochs(opts.train.epochs, nullptr);
  Predictor p = chosen->Export();
  PredictorMetrics m = internal::Evaluate(p, hold_x, n_hold, hold_labels, workers);
  if (m.recall < opts.target_recall && opts.calibrate_threshold) {
    const float t = CalibrateThreshold(p, hold_x, n_hold, hold_labels, opts.target_recall);
    p.threshold = std::clamp(t, opts.min_threshold, p.threshold);
    rep.threshold_lowered = p.threshold < 0.5f;
    m = internal::Evaluate(p, hold_x, n_hold, hold_labels, workers);
  }

  rep.rank = p.rank;
  rep.threshold = p.threshold;
  rep.reached_target = m.recall >= opts.target_recall;
  rep.recall = m.recall;
  rep.precision = m.precision;
  rep.predicted_fraction = m.predicted_fraction;
  rep.true_fraction = m.true_fraction;
  rep.held_out = m;
  rep.held_out_f16 = internal::Evaluate(RoundedToF16(p), hold_x, n_hold, hold_labels, workers);
  rep.static_mask = EvaluateStaticMask(train_labels, hold_labels, m.predicted_fraction);
  rep.beats_static_mask =
      m.recall > rep.static_mask.recall && m.precision > rep.static_mask.precision;
  const char* how = "the smallest rank reaching the target at threshold 0.5";
  if (!search_reached) {
    how = !opts.calibrate_threshold ? "no rank reached the target at 0.5; the smallest near the "
                                      "best recall"
          : opts.ffn_bytes_per_neuron > 0
              ? "no rank reached the target at 0.5; the least decode bytes at the target"
              : "no rank reached the target at 0.5; the smallest near the least predicted "
                "fraction at the target";
  }
  rep.note = absl::StrFormat(
      "rank %d: %s (%d search epochs); threshold %.4f%s; held-out recall %.4f precision %.4f "
      "predicted %.4f (true %.4f); static mask recall %.4f precision %.4f",
      p.rank, how, opts.search_epochs, p.threshold,
      rep.threshold_lowered ? " (lowered on the held-out tokens scored here)" : "", m.recall,
      m.precision, m.predicted_fraction, m.true_fraction, rep.static_mask.recall,
      rep.static_mask.precision);
  if (!rep.reached_target) rep.note += "; TARGET RECALL NOT REACHED";
  rep.train_seconds = total.ElapsedSeconds();
  if (report) *report = std::move(rep);
  return p;
}

}  // namespace kx::sparse
