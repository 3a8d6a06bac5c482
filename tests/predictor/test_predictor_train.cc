// Predictor training, rank search and evaluation on planted-rule data.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "sparse/predictor.h"
#include "sparse/predictor_synthetic.h"
#include "test_util.h"

namespace kx::sparse {
namespace {

// Small enough for CI (a few seconds on 2 cores), large enough that the
// planted rule has to be learned rather than memorized.
constexpr int64_t kTokens = 6000;
constexpr int kIn = 64, kOut = 192, kPlanted = 8;
constexpr int64_t kTrain = 5400;

const PlantedData& Data() {
  static const PlantedData d = [] {
    std::mt19937_64 rng = test::SeededRng(20261122);
    return MakePlantedData(kTokens, kIn, kOut, kPlanted, rng());
  }();
  return d;
}

TrainOptions SmallOptions() {
  TrainOptions o;
  o.rank = 32;
  o.epochs = 8;
  o.batch = 256;
  o.n_threads = 2;
  return o;
}

bool SameWeights(const Predictor& a, const Predictor& b) {
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  return a.rank == b.rank && same(a.w1, b.w1) && same(a.b1, b.b1) && same(a.w2, b.w2) &&
         same(a.b2, b.b2);
}

TEST_CASE("planted rule: predictor learns it and beats the static mask", "[predictor]") {
  const PlantedData& d = Data();
  const ActivityMatrix train = d.labels.Slice(0, kTrain), hold = d.labels.Slice(kTrain, kTokens);
  TrainStats stats;
  auto p = TrainPredictor(d.x.data(), kTrain, kIn, train, SmallOptions(), &stats);
  REQUIRE(p.ok());
  REQUIRE(p->n_in == kIn);
  REQUIRE(p->n_out == kOut);
  REQUIRE(p->w1.size() == static_cast<size_t>(32 * kIn));
  REQUIRE(p->w2.size() == static_cast<size_t>(kOut * 32));

  const float* hold_x = d.x.data() + kTrain * kIn;
  const PredictorMetrics m = EvaluatePredictor(*p, hold_x, kTokens - kTrain, hold);
  const StaticMaskEval s = EvaluateStaticMask(train, hold, m.predicted_fraction);
  INFO("recall " << m.recall << " precision " << m.precision << " predicted "
                 << m.predicted_fraction << " true " << m.true_fraction << "; static recall "
                 << s.recall << " precision " << s.precision);
  CHECK(m.recall > 0.85);
  CHECK(m.precision > 0.75);
  CHECK(m.recall > s.recall + 0.2);
  CHECK(m.precision > s.precision + 0.2);
  CHECK(m.n_tokens == kTokens - kTrain);
  CHECK(m.true_positives + m.false_negatives > 0);
  CHECK(m.min_predicted <= m.mean_predicted);
  CHECK(m.mean_predicted <= m.max_predicted);
  CHECK(m.p99_predicted <= m.max_predicted);
  CHECK(m.min_token_recall <= m.mean_token_recall);

  // The loss goes down, and not just in the first epoch.
  REQUIRE(stats.epoch_loss.size() == 8);
  CHECK(stats.epoch_loss.back() < 0.6 * stats.epoch_loss.front());
  for (size_t e = 1; e < stats.epoch_loss.size(); ++e) {
    INFO("epoch " << e);
    CHECK(stats.epoch_loss[e] < stats.epoch_loss[e - 1]);
  }

  // F16 rounding of the matrices barely moves the metrics.
  const PredictorMetrics m16 = EvaluatePredictor(RoundedToF16(*p), hold_x, kTokens - kTrain, hold);
  CHECK(std::fabs(m16.recall - m.recall) < 2e-3);
  CHECK(std::fabs(m16.precision - m.precision) < 2e-3);
}

TEST_CASE("training is deterministic for a seed and thread count", "[predictor]") {
  const PlantedData& d = Data();
  const ActivityMatrix train = d.labels.Slice(0, 2000);
  TrainOptions o = SmallOptions();
  o.epochs = 2;
  o.rank = 16;
  auto a = TrainPredictor(d.x.data(), 2000, kIn, train, o);
  auto b = TrainPredictor(d.x.data(), 2000, kIn, train, o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(SameWeights(*a, *b));
  o.seed = 2;
  auto c = TrainPredictor(d.x.data(), 2000, kIn, train, o);
  REQUIRE(c.ok());
  CHECK_FALSE(SameWeights(*a, *c));
  for (float w : a->w1) REQUIRE(std::isfinite(w));
  for (float w : a->w2) REQUIRE(std::isfinite(w));
}

TEST_CASE("TrainForRecall picks the smallest rank and equals a plain run of it", "[predictor]") {
  const PlantedData& d = Data();
  RankSearchOptions so;
  so.ranks = {64, 2, 32};  // unsorted on purpose; 2 is too small for a rank-8 rule
  so.max_rank = 48;        // 64 is over the cap
  so.target_recall = 0.85;
  so.train = SmallOptions();
  so.search_epochs = 3;
  so.calibrate_threshold = false;
  PredictorReport rep;
  auto p = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(p.ok());
  INFO(rep.note);
  REQUIRE(rep.trials.size() == 2);
  CHECK(rep.trials[0].rank == 2);
  CHECK(rep.trials[0].recall < so.target_recall);
  CHECK(rep.trials[1].rank == 32);
  CHECK(rep.rank == 32);
  CHECK(p->rank == 32);
  CHECK(rep.reached_target);
  CHECK(rep.threshold == 0.5f);
  CHECK_FALSE(rep.threshold_lowered);
  CHECK(rep.recall >= so.target_recall);
  CHECK(rep.beats_static_mask);
  CHECK(rep.static_mask.recall < rep.recall);
  CHECK(std::fabs(rep.held_out_f16.recall - rep.recall) < 2e-3);
  CHECK(rep.true_fraction > 0.0);
  CHECK(rep.train_seconds > 0.0);

  // The search continues the chosen run on the same schedule: the result is
  // a plain full run of that rank on the training split (tokens [0, 5400)).
  const int64_t n_train = kTokens - std::llround(so.holdout_fraction * kTokens);
  TrainOptions o = so.train;
  o.rank = 32;
  auto q = TrainPredictor(d.x.data(), n_train, kIn, d.labels.Slice(0, n_train), o);
  REQUIRE(q.ok());
  CHECK(SameWeights(*p, *q));
}

TEST_CASE("TrainForRecall lowers the threshold to reach a high target", "[predictor]") {
  const PlantedData& d = Data();
  RankSearchOptions so;
  so.ranks = {4};
  so.target_recall = 0.97;
  so.train = SmallOptions();
  so.train.epochs = 3;
  so.search_epochs = 1;
  PredictorReport rep;
  auto p = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(p.ok());
  INFO(rep.note);
  CHECK(rep.rank == 4);
  CHECK(rep.threshold_lowered);
  CHECK(p->threshold < 0.5f);
  CHECK(p->threshold >= so.min_threshold);
  CHECK(rep.threshold == p->threshold);
  CHECK(p->threshold > so.min_threshold);  // calibrated, not clamped
  CHECK(rep.reached_target);
  CHECK(rep.recall >= 0.97);  // the threshold was calibrated on these held-out tokens
  CHECK(rep.held_out.recall == rep.recall);
  // Lowering the threshold costs predicted-set size.
  CHECK(rep.predicted_fraction > rep.true_fraction);
}

TEST_CASE("TrainForRecall without a winner compares ranks at the target", "[predictor]") {
  const PlantedData& d = Data();
  RankSearchOptions so;
  so.ranks = {4, 32};
  so.target_recall = 0.97;  // neither reaches it at 0.5 after one epoch
  so.train = SmallOptions();
  so.train.epochs = 2;
  so.search_epochs = 1;
  PredictorReport rep;
  auto p = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(p.ok());
  INFO(rep.note);
  REQUIRE(rep.trials.size() == 2);
  double best = 1.0;
  for (const RankTrial& t : rep.trials) {
    CHECK(t.recall < so.target_recall);
    CHECK(t.threshold_at_target < 0.5f);
    CHECK(t.fraction_at_target > t.predicted_fraction);  // reaching the target costs set size
    best = std::min(best, t.fraction_at_target);
  }
  // The planted rule has rank 8: rank 32 needs fewer neurons at the target.
  CHECK(rep.trials[1].fraction_at_target < rep.trials[0].fraction_at_target);
  CHECK(rep.rank == 32);
  CHECK(rep.trials[1].fraction_at_target <= best + so.plateau_tolerance);
  CHECK(rep.threshold_lowered);

  // With a decode-bytes model: cheap FFN rows make the small predictor win,
  // expensive ones the accurate one.
  so.ffn_bytes_per_neuron = 1;
  auto cheap = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(cheap.ok());
  CHECK(rep.rank == 4);
  CHECK(rep.trials[0].bytes_at_target < rep.trials[1].bytes_at_target);
  so.ffn_bytes_per_neuron = 1 << 20;
  auto dear = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(dear.ok());
  CHECK(rep.rank == 32);
  CHECK(rep.trials[1].bytes_at_target < rep.trials[0].bytes_at_target);
}

TEST_CASE("TrainForRecall without a winner takes the smallest rank on the plateau", "[predictor]") {
  const PlantedData& d = Data();
  RankSearchOptions so;
  so.ranks = {16, 4};
  so.target_recall = 0.9999;  // out of reach
  so.train = SmallOptions();
  so.train.epochs = 2;
  so.search_epochs = 1;
  so.calibrate_threshold = false;
  PredictorReport rep;
  so.plateau_tolerance = 1.0;  // everything is on the plateau: the smallest rank
  auto small = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(small.ok());
  INFO(rep.note);
  REQUIRE(rep.trials.size() == 2);
  CHECK(rep.trials[1].recall > rep.trials[0].recall);  // rank 16 beats rank 4
  CHECK(rep.rank == 4);
  CHECK_FALSE(rep.reached_target);
  CHECK(rep.note.find("NOT REACHED") != std::string::npos);
  so.plateau_tolerance = 0.0;  // only the best
  auto best = TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep);
  REQUIRE(best.ok());
  CHECK(rep.rank == 16);
  CHECK(best->threshold == 0.5f);
}

TEST_CASE("static mask baseline on a hand-made matrix", "[predictor]") {
  // Neuron n is active on train tokens t < 10·(4 − n) (n < 4), never for n ≥ 4:
  // frequencies 4/4, 3/4, 2/4, 1/4 of 40 tokens.
  ActivityMatrix train(40, 70), hold(2, 70);
  for (int n = 0; n < 4; ++n) {
    for (int t = 0; t < 10 * (4 - n); ++t) train.Set(t, n, true);
  }
  hold.Set(0, 0, true);
  hold.Set(0, 2, true);
  hold.Set(1, 1, true);
  hold.Set(1, 69, true);
  // k = round(2/70 · 70) = 2: neurons 0 and 1; TP = 2 of 4 actives, 4 predicted.
  const StaticMaskEval e = EvaluateStaticMask(train, hold, 2.0 / 70);
  CHECK(e.n_predicted == 2);
  CHECK(e.recall == Approx(0.5));
  CHECK(e.precision == Approx(0.5));
  const StaticMaskEval all = EvaluateStaticMask(train, hold, 1.0);
  CHECK(all.n_predicted == 70);
  CHECK(all.recall == Approx(1.0));
}

TEST_CASE("bad inputs give errors", "[predictor]") {
  const PlantedData& d = Data();
  const TrainOptions o = SmallOptions();
  auto zero = TrainPredictor(d.x.data(), 0, kIn, ActivityMatrix(0, kOut), o);
  CHECK(zero.status().code() == absl::StatusCode::kInvalidArgument);
  auto mismatch = TrainPredictor(d.x.data(), 100, kIn, d.labels, o);  // labels have 6000 rows
  CHECK(mismatch.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(mismatch.status().message()).find("6000") != std::string::npos);
  auto null_x = TrainPredictor(nullptr, kTokens, kIn, d.labels, o);
  CHECK(null_x.status().code() == absl::StatusCode::kInvalidArgument);
  auto bad_in = TrainPredictor(d.x.data(), kTokens, 0, d.labels, o);
  CHECK(bad_in.status().code() == absl::StatusCode::kInvalidArgument);
  TrainOptions bad = o;
  bad.rank = 0;
  CHECK_FALSE(TrainPredictor(d.x.data(), kTokens, kIn, d.labels, bad).ok());
  bad = o;
  bad.lr = -1.0f;
  CHECK_FALSE(TrainPredictor(d.x.data(), kTokens, kIn, d.labels, bad).ok());

  RankSearchOptions so;
  so.train = o;
  PredictorReport rep;
  so.max_rank = 8;  // below every candidate
  CHECK(TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep).status().code() ==
        absl::StatusCode::kInvalidArgument);
  so = RankSearchOptions{};
  ActivityMatrix one(1, kOut);
  CHECK_FALSE(TrainForRecall(d.x.data(), 1, kIn, one, so, &rep).ok());  // nothing left to train on
  so.holdout_fraction = 1.5;
  CHECK_FALSE(TrainForRecall(d.x.data(), kTokens, kIn, d.labels, so, &rep).ok());
}

}  // namespace
}  // namespace kx::sparse
