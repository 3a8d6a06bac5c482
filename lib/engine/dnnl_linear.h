// Batched linear ops (prefill) through oneDNN's bf16 matmul.
//
// Weights are dequantized once to bf16 (2 bytes per weight, on the first
// batch that uses them) and kept for the session; weight_bytes() reports
// them for memory budgets. Activations are rounded per call to one bf16 or
// split into two (see the constructor); the matmul accumulates in f32.
//
// Threading: oneDNN 2.6 on Debian runs on GNU OpenMP, whose worker threads
// spin after each parallel region and would fight kairox's own (hot,
// spinning) pool for the cores. So oneDNN never gets a parallel region:
// every kairox pool thread calls a single-threaded oneDNN matmul on its own
// slice of output rows (omp_set_num_threads(1) in a scope around each call,
// restored after), and no OpenMP team is ever created. Measured on a 2-core
// AVX-512 BF16 machine this is also faster than oneDNN's own 2-thread run.
//
// Usage (from the thread that drives the pool):
//   DnnlLinear dl(pool.size(), /*split_src=*/true);
//   if (!dl.Supported()) ...;                          // no bf16 matmul on this CPU
//   const uint16_t* wb = dl.Weights(w, pool);          // converts on first use
//   dl.PrepareSrc(src, src_ld, m, k, pool);            // f32 → bf16, once per input
//   pool.Run([&](int ith, int nth) {
//     ... dl.Matmul(ith, wb + r0 * k, rows, k, m, dst + r0, ldd) ...
//   });
//   if (!dl.ok()) ...;                                 // a oneDNN error: rerun natively
// Not thread-safe except Matmul, which pool threads call concurrently with
// distinct `ith`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/llama.h"

namespace kx {

class DnnlLinear {
 public:
  // n_threads: the size of the pool whose threads call Matmul. split_src:
  // each activation is the sum of two bf16 numbers (hi + lo, 16 significant
  // bits, like the native path's 16-bit activations) and every matmul runs
  // twice, the second accumulating; otherwise one bf16 (8 bits), half the
  // work, but SmolLM2's outlier channels then move logits by up to ~0.5.
  DnnlLinear(int n_threads, bool split_src);
  ~DnnlLinear();
  DnnlLinear(const DnnlLinear&) = delete;
  DnnlLinear& operator=(const DnnlLinear&) = delete;

  // Whether this CPU and oneDNN build can run a bf16 matmul with an
  // optimized (non-reference) implementation; probed once per process.
  static bool Supported();
  // oneDNN's implementation name for a bf16 matmul of this shape ("" if none).
  static std::string ImplName(int64_t m, int64_t k, int64_t n);

  // The bf16 copy of `w` ([n_out rows × n_in], row-major), made on the first
  // call with the pool's threads and found again by w.data: the weights must
  // stay where they are, unchanged, while this object lives (a model's
  // mapping does). Null if w's type cannot be dequantized.
  const uint16_t* Weights(const WeightRef& w, ThreadPool& pool);
  // Bytes of bf16 weights held (for memory budgets).
  uint64_t weight_bytes() const;

  // Rounds m rows of k floats (row b at src + b·src_ld) to bf16 (split:
  // to hi + lo pairs) into the internal source buffer that the next Matmul
  // calls read.
  void PrepareSrc(const float* src, int64_t src_ld, int64_t m, int64_t k, ThreadPool& pool);

  // dst[b·ldd + r] = Σ_i w[r·k + i]·src_b[i] for r < rows, b < m (the
  // prepared source). Called by pool thread `ith`; on a oneDNN error the
  // call records it (ok() turns false) and writes nothing more.
  void Matmul(int ith, const uint16_t* w, int64_t rows, int64_t k, int64_t m, float* dst,
              int64_t ldd);

  // False once any call failed; error() says why. Reset by ClearError().
  bool ok() const;
  std::string error() const;
  void ClearError();

  // One matrix of a linear group: dst[b·ldd + r] = W[r]·src_b.
  struct Job {
    const WeightRef* w;
    float* dst;
    int64_t ldd;
  };
  // A group of jobs sharing one input (rows b of n_tokens at src + b·src_ld,
  // all jobs with the same n_in), their rows split across the pool as one
  // range. Returns false when a weight type cannot be converted or oneDNN
  // failed (error() says why); the outputs are then unspecified.
  bool RunGroup(const float* src, int64_t src_ld, int n_tokens, const Job* jobs, int n_jobs,
                ThreadPool& pool);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Round to nearest even; NaN stays NaN.
uint16_t F32ToBf16(float f);

}  // namespace kx
