// Predictor evaluation on labelled tokens, and the static-mask baseline.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "sparse/predictor.h"
#include "sparse/predictor_internal.h"

namespace kx::sparse {
namespace internal {
namespace {
// Tokens per forward chunk: big enough for efficient sgemm, small enough that
// the logits (chunk × n_out floats) stay a few MB.
constexpr int64_t kEvalChunk = 1024;
// Percentile reported for predicted-set sizes.
constexpr double kSizePercentile = 0.99;
}  // namespace

void ForwardLogits(const Predictor& p, const float* x, int64_t n_tokens,
                   const std::function<void(int64_t, int64_t, const float*)>& fn) {
  const int64_t chunk = std::min(kEvalChunk, n_tokens);
  std::vector<float> h(chunk * p.rank), z(chunk * p.n_out);
  for (int64_t begin = 0; begin < n_tokens; begin += chunk) {
    const int64_t rows = std::min(chunk, n_tokens - begin);
    Gemm(false, true, rows, p.rank, p.n_in, x + begin * p.n_in, p.n_in, p.w1.data(), p.n_in, 0.0f,
         h.data(), p.rank);
    for (int64_t i = 0; i < rows; ++i) {
      float* hr = h.data() + i * p.rank;
      for (int j = 0; j < p.rank; ++j) hr[j] = std::max(hr[j] + p.b1[j], 0.0f);
    }
    Gemm(false, true, rows, p.n_out, p.rank, h.data(), p.rank, p.w2.data(), p.rank, 0.0f, z.data(),
         p.n_out);
    for (int64_t i = 0; i < rows; ++i) {
      float* zr = z.data() + i * p.n_out;
      for (int n = 0; n < p.n_out; ++n) zr[n] += p.b2[n];
    }
    fn(begin, rows, z.data());
  }
}

}  // namespace internal

namespace internal {
namespace {
// One thread's counts.
struct MetricSums {
  int64_t tp = 0, pred = 0, act = 0, scored_tokens = 0;
  double token_recall_sum = 0, min_token_recall = 1.0;
};
}  // namespace

PredictorMetrics Evaluate(const Predictor& p, const float* x, int64_t n_tokens,
                          const ActivityMatrix& labels, WorkerPool& workers) {
  KX_CHECK_MSG(labels.n_tokens() == n_tokens && labels.n_neurons() == p.n_out,
               "EvaluatePredictor: labels do not match the predictor / tokens");
  PredictorMetrics m;
  m.n_tokens = n_tokens;
  if (n_tokens <= 0) return m;
  const float tl = ThresholdLogit(p.threshold);
  std::vector<int> sizes(n_tokens);
  std::vector<MetricSums> sums(workers.size());
  workers.pool().Run([&](int ith, int nth) {
    int64_t first = 0, last = 0;
    ThreadPool::Split(n_tokens, ith, nth, 1, &first, &last);
    if (first == last) return;
    MetricSums& s = sums[ith];
    ForwardLogits(p, x + first * p.n_in, last - first,
                  [&](int64_t begin, int64_t rows, const float* z) {
                    for (int64_t i = 0; i < rows; ++i) {
                      const int64_t t = first + begin + i;
                      const float* zr = z + i * p.n_out;
                      const uint64_t* lab = labels.Row(t);
                      int64_t tp = 0, pred = 0, act = 0;
                      for (int n = 0; n < p.n_out; ++n) {
                        const bool y = (lab[n >> 6] >> (n & 63)) & 1u;
                        const bool yhat = zr[n] >= tl;
                        tp += y && yhat;
                        pred += yhat;
                        act += y;
                      }
                      s.tp += tp;
                      s.pred += pred;
                      s.act += act;
                      sizes[t] = static_cast<int>(pred);
                      if (act > 0) {
                        const double r = static_cast<double>(tp) / static_cast<double>(act);
                        s.token_recall_sum += r;
                        s.min_token_recall = std::min(s.min_token_recall, r);
                        ++s.scored_tokens;
                      }
                    }
                  });
  });
  MetricSums all;
  for (const MetricSums& s : sums) {  // in thread order: deterministic
    all.tp += s.tp;
    all.pred += s.pred;
    all.act += s.act;
    all.scored_tokens += s.scored_tokens;
    all.token_recall_sum += s.token_recall_sum;
    all.min_token_recall = std::min(all.min_token_recall, s.min_token_recall);
  }
  m.true_positives = all.tp;
  m.false_positives = all.pred - all.tp;
  m.false_negatives = all.act - all.tp;
  m.recall = all.act > 0 ? static_cast<double>(all.tp) / all.act : 1.0;
  m.precision = all.pred > 0 ? static_cast<double>(all.tp) / all.pred : 1.0;
  const double denom = static_cast<double>(n_tokens) * p.n_out;
  m.predicted_fraction = static_cast<double>(all.pred) / denom;
  m.true_fraction = static_cast<double>(all.act) / denom;
  m.mean_token_recall = all.scored_tokens > 0 ? all.token_recall_sum / all.scored_tokens : 1.0;
  m.min_token_recall = all.scored_tokens > 0 ? all.min_token_recall : 1.0;
  m.mean_predicted = static_cast<double>(all.pred) / static_cast<double>(n_tokens);
  std::sort(sizes.begin(), sizes.end());
  m.min_predicted = sizes.front();
  m.max_predicted = sizes.back();
  const int64_t pi = std::min<int64_t>(
      n_tokens - 1, static_cast<int64_t>(std::ceil(kSizePercentile * n_tokens)) - 1);
  m.p99_predicted = sizes[std::max<int64_t>(0, pi)];
  return m;
}

}  // namespace internal

PredictorMetrics EvaluatePredictor(const Predictor& p, const float* x, int64_t n_tokens,
                                   const ActivityMatrix& labels, int n_threads) {
  internal::WorkerPool workers(n_threads);
  return internal::Evaluate(p, x, n_tokens, labels, workers);
}

StaticMaskEval EvaluateStaticMask(const ActivityMatrix& train, const ActivityMatrix& held_out,
                                  double predicted_fraction) {
  KX_CHECK_MSG(train.n_neurons() == held_out.n_neurons(),
               "EvaluateStaticMask: train and held-out neuron counts differ");
  const int n_out = train.n_neurons();
  std::vector<int64_t> count(n_out, 0);
  for (int64_t t = 0; t < train.n_tokens(); ++t) {
    const uint64_t* row = train.Row(t);
    for (int w = 0; w < train.words_per_row(); ++w) {
      for (uint64_t bits = row[w]; bits != 0; bits &= bits - 1)
        ++count[w * 64 + __builtin_ctzll(bits)];
    }
  }
  std::vector<int> order(n_out);
  std::iota(order.begin(), order.end(), 0);
  // Most frequent first; ties by neuron id so the mask is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
  StaticMaskEval e;
  e.n_predicted =
      static_cast<int>(std::clamp<long long>(std::llround(predicted_fraction * n_out), 0, n_out));
  e.predicted_fraction = n_out > 0 ? static_cast<double>(e.n_predicted) / n_out : 0.0;
  std::vector<uint64_t> mask(held_out.words_per_row(), 0);
  for (int i = 0; i < e.n_predicted; ++i) mask[order[i] >> 6] |= uint64_t{1} << (order[i] & 63);
  int64_t tp = 0, act = 0;
  for (int64_t t = 0; t < held_out.n_tokens(); ++t) {
    const uint64_t* row = held_out.Row(t);
    for (int w = 0; w < held_out.words_per_row(); ++w) {
      tp += __builtin_popcountll(row[w] & mask[w]);
      act += __builtin_popcountll(row[w]);
    }
  }
  const int64_t pred = static_cast<int64_t>(e.n_predicted) * held_out.n_tokens();
  e.recall = act > 0 ? static_cast<double>(tp) / act : 1.0;
  e.precision = pred > 0 ? static_cast<double>(tp) / pred : 1.0;
  return e;
}

}  // namespace kx::sparse
