// Internals shared by predictor_train.cc, predictor_eval.cc and
// predictor_search.cc: the oneDNN plumbing, the batched forward pass and the
// resumable trainer. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/thread_pool.h"
#include "sparse/predictor.h"

namespace kx::sparse::internal {

// Caps the GNU OpenMP team oneDNN uses to n threads for the calling thread
// while alive (omp_set_num_threads sets the calling thread's nthreads-var
// ICV, which is what oneDNN reads through omp_get_max_threads), and restores
// the previous value on destruction. The symbols are looked up at run time in
// the libgomp that libdnnl already loaded, so kairox need not link OpenMP
// itself; if oneDNN was built on another runtime the cap is a no-op.
class OmpThreadCap {
 public:
  explicit OmpThreadCap(int n_threads);
  ~OmpThreadCap();
  OmpThreadCap(const OmpThreadCap&) = delete;
  OmpThreadCap& operator=(const OmpThreadCap&) = delete;

 private:
  int previous_ = 0;
};

// The threads training and evaluation run on. oneDNN's GNU OpenMP team is
// capped to one thread on every thread of the pool (the caller's previous cap
// comes back when this dies): an OpenMP team spins for milliseconds after each
// parallel region, which on a 2-core machine steals the core the element-wise
// work needs. Parallelism comes from the pool instead — each thread runs
// single-threaded sgemm on its share of the tokens — so the element-wise work
// and reductions are parallel too, and no thread ever spins in libgomp.
class WorkerPool {
 public:
  explicit WorkerPool(int n_threads);
  ThreadPool& pool() { return pool_; }
  int size() const { return pool_.size(); }

 private:
  OmpThreadCap cap_;  // the calling thread (index 0 of the pool)
  ThreadPool pool_;
};

// Row-major C[M×N] = op(A)·op(B) + beta·C through dnnl_sgemm. Arguments are
// internal invariants: a failure aborts.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Runs p over x in chunks on the calling thread; calls fn(first_token,
// n_chunk_tokens, logits) with logits n_chunk_tokens × n_out, row-major.
void ForwardLogits(const Predictor& p, const float* x, int64_t n_tokens,
                   const std::function<void(int64_t, int64_t, const float*)>& fn);

// EvaluatePredictor on an existing pool.
PredictorMetrics Evaluate(const Predictor& p, const float* x, int64_t n_tokens,
                          const ActivityMatrix& labels, WorkerPool& workers);

absl::Status ValidateTrainInputs(const float* x, int64_t n_tokens, int n_in,
                                 const ActivityMatrix& labels);
absl::Status ValidateTrainOptions(const TrainOptions& opts);

// Training tokens prepared once and shared by every rank's trainer.
struct TrainData {
  int64_t n_tokens = 0;
  int n_in = 0, n_out = 0;
  const ActivityMatrix* labels = nullptr;
  std::vector<float> xs;             // standardized tokens, n_tokens × n_in
  std::vector<float> mean, inv_std;  // per input feature (0 / 1 without standardizing)
  std::vector<double> frequency;     // per neuron, fraction of tokens active
};
TrainData PrepareTrainData(const float* x, int64_t n_tokens, int n_in, const ActivityMatrix& labels,
                           bool standardize);

// Mini-batch Adam on weighted BCE for one rank. The epoch schedule (shuffle
// order, learning-rate decay) is fixed by opts at construction, so running
// epochs in several RunEpochs calls gives the same weights as one call. Each
// batch is split over the pool's threads (data parallel); their gradients are
// summed in thread order, so results depend on the thread count only.
class Trainer {
 public:
  Trainer(const TrainData& data, const TrainOptions& opts, WorkerPool& workers);
  // Runs up to k more epochs (never past opts.epochs).
  void RunEpochs(int k, TrainStats* stats);
  int epochs_done() const { return epochs_done_; }
  int rank() const { return rank_; }
  // Float weights with the standardization folded into w1/b1; threshold 0.5.
  Predictor Export() const;

 private:
  // One thread's share of a batch: its gradients and scratch.
  struct Workspace {
    std::vector<float> xb, yb, h, z, dh, grads;
    double loss = 0;
  };
  void Step(const int64_t* rows, int64_t n_rows, bool want_loss);
  // Gradients of rows (a share of a batch of batch_rows) into ws.grads.
  void ComputeGrads(const int64_t* rows, int64_t n_rows, int64_t batch_rows, bool want_loss,
                    Workspace& ws);
  void AdamUpdate(int64_t begin, int64_t end, float step_size, float inv_bc2);

  const TrainData& data_;
  WorkerPool& workers_;
  TrainOptions opts_;
  int rank_ = 0;
  int epochs_done_ = 0;
  int64_t step_ = 0, total_steps_ = 0;
  // Parameters and Adam moments in one flat layout [w1|b1|w2|b2].
  std::vector<float> params_, m_, v_;
  int64_t off_b1_ = 0, off_w2_ = 0, off_b2_ = 0;
  std::vector<Workspace> work_;  // one per pool thread
};

}  // namespace kx::sparse::internal
