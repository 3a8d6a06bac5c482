// One decode token's FFN over neuron bundles (bundle.h): only the groups the
// predictor marks are read, and inside them only the predicted neurons.
//
//   y = Σ_{n kept} act(gate_n·x) · (up_n·x) · down_t[n]
//   kept(n) = predicted(n) and |act(gate_n·x)| > threshold   (CATS-style cut)
// ReLU family (relu, fatrelu, drelu; model/llama_ffn_activation.h): act is
// the activated value A(g, u) (FATReLU's t from act_threshold; dReLU zero
// when up·x <= 0), exactly 0 when inactive, so threshold 0 (or t) keeps
// exactly the non-zero neurons and the coefficient A·u is relu(g)·relu(u).
//
// Usage (per layer, per token; scratch is owned by SparseFfn and reused):
//   kx::sparse::SparseFfn ffn(kx::cpu::Kernels(), n_embd, n_ff, pool.size());
//   kx::sparse::SparseFfnArgs a{&layout, bundle_ptrs, groups, n_groups, masks, xn,
//                               FfnActivation::kSilu, 0.0f, y, nullptr};
//   ffn.Run(a, pool);
// Steps: x is prepared once per weight type; up then gate rows are computed
// over runs of contiguous predicted neurons (address order, see GateUp);
// act and the threshold pick the kept neurons; the down projection adds
// their down columns: axpy_rows over the kept neurons' down_t rows
// (DownLayout::kRows), or down_blocks over the groups with a kept neuron,
// the others' coefficients 0 (kBlocks: the model's own ffn_down blocks).
// Where the kernel table has matvec_runs (AVX-512, Q4_1/Q8_0, gate and up of one type) the three steps
// run group by group in one pass (matvec_runs prefetches along each
// thread's run list; the down rows are read from L1 right after), threads
// take fixed chunks of groups and y sums the chunks' partials in order;
// otherwise gate/up is one matvec per run, split by groups, and the down
// projection a second pass split by output columns. Either way y is
// bit-identical for any number of threads running a call (≤ the n_threads
// the SparseFfn was built with); the fused path cuts the groups into two
// chunks per such thread, so SparseFfns built for different thread counts
// may differ in the last bits.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "model/llama.h"
#include "sparse/bundle.h"

namespace kx::sparse {

struct SparseFfnArgs {
  const BundleLayout* layout = nullptr;
  const uint8_t* const* bundles = nullptr;  // bundles[g]: group g's bundle (indexed by group id)
  const int32_t* groups = nullptr;          // groups to compute, ascending, distinct
  int n_groups = 0;
  const uint32_t* masks = nullptr;  // masks[i]: bit j = neuron j of groups[i] predicted active
  const float* x = nullptr;         // FFN input (already normed), n_embd
  FfnActivation act = FfnActivation::kSilu;
  float threshold = 0.0f;  // |act(gate·x)| <= threshold counts as zero (0: exact zeros only)
  float* y = nullptr;      // n_embd, overwritten
  uint32_t* kept = nullptr;  // optional: per computed group, bits of the neurons kept
  // FATReLU's t (LlamaHParams::ffn_act_threshold); the other activations ignore it.
  float act_threshold = 0.0f;
};

// act(g) for one pre-activation value (SiLU g·σ(g); GELU tanh approximation;
// ReLU; FATReLU and dReLU as ReLU, i.e. t = 0 and up > 0). The kernels use
// ActivatedValue (model/llama_ffn_activation.h), which takes t and up.
float ApplyFfnActivation(FfnActivation act, float g);

class SparseFfn {
 public:
  // n_embd_max, max_rows (n_ff) and n_threads bound every Run's scratch.
  SparseFfn(const cpu::KernelTable& kernels, int64_t n_embd_max, int max_rows, int n_threads);

  // Computes args.y (and args.kept). Checks (aborting: a caller bug) that the
  // layout fits the scratch, its types have kernels and pool.size() ≤
  // n_threads. Allocates nothing. Run is not reentrant.
  void Run(const SparseFfnArgs& args, ThreadPool& pool);

  // Run split for a task graph (engine/decode_graph.h), same results bit for
  // bit: Begin (serial: checks, x prepared), then the parts of phase 0
  // (RunPart(0, part, n_parts), any order, any threads), Between (serial),
  // the parts of phase 1, Finish (serial: y). n_parts is fixed from Begin to
  // Finish and at most n_threads; args must stay valid until Finish.
  // Run(args, pool) = Begin(args, pool.size()) + pool.Run per phase + Finish.
  void Begin(const SparseFfnArgs& args, int n_parts);
  void RunPart(int phase, int part, int n_parts);
  void Between();
  void Finish();
  // Whether phase p has any work this time (Run skips the dispatch if not).
  bool HasPhase(int phase) const;
  // Whether layouts like l run the fused path (one phase; its parts take
  // fixed chunks, so any number of parts gives the same y and n_parts may
  // exceed n_threads there).
  bool IsFused(const BundleLayout& l) const {
    return l.up_type == l.gate_type && kernels_.MatvecRuns(l.up_type) != nullptr;
  }

  // Bytes of scratch held (for memory budgets).
  uint64_t ScratchBytes() const {
    return act_gate_.capacity() + act_up_.capacity() + gate_up_.capacity() * sizeof(float) +
           runs_.capacity() * sizeof(cpu::RowRun) + down_rows_.capacity() * sizeof(void*) +
           coef_.capacity() * sizeof(float) + kept_.capacity() * sizeof(uint32_t) +
           counts_.capacity() * sizeof(ThreadCount) + partial_.capacity() * sizeof(float);
  }

 private:
  struct alignas(64) ThreadCount {
    int64_t n = 0;
  };
  void GateUp(const SparseFfnArgs& a, int ith, int nth);
  // Activation and threshold of groups [ib, ie): kept bits, and the kept
  // neurons' down rows and coefficients from slot ib·GS on. Returns their count.
  int64_t Keep(const SparseFfnArgs& a, int64_t ib, int64_t ie);
  // The fused path's share of thread ith (sparse_ffn.cc).
  void Fused(const SparseFfnArgs& a, cpu::MatvecRunsFn runs_fn, int n_chunks, int ith, int nth);
  // The down projection of n down_rows_ entries from group slot `first`
  // (Keep's slots: kRows from GS·first, kBlocks from first) into y[i0, i1).
  void Down(const BundleLayout& l, int64_t first, int64_t n, int64_t i0, int64_t i1, float* y);

  // The call in progress between Begin and Finish.
  struct Call {
    SparseFfnArgs args;
    int n_parts = 1;
    cpu::MatvecRunsFn runs_fn = nullptr;  // non-null: the fused path
    cpu::AxpyRowsFn axpy = nullptr;          // kRows
    cpu::DownBlocksFn down_blocks = nullptr;  // kBlocks
    int n_chunks = 0;   // fused path
    int64_t total = 0;  // per-run path: kept neurons after Between
  };

  const cpu::KernelTable& kernels_;
  Call call_;
  int64_t n_embd_max_;
  int max_rows_;
  int n_threads_;
  std::vector<uint8_t> act_gate_, act_up_;  // x prepared for the gate and up types
  std::vector<float> gate_up_;              // slot i: up at 2·GS·i + j, gate at 2·GS·i + GS + j
  std::vector<cpu::RowRun> runs_;           // matvec_runs lists: group i's from i·RunsPerGroup
  std::vector<const uint8_t*> down_rows_;   // kept neurons' down_t rows (kBlocks: groups' down parts)
  std::vector<float> coef_;                 // act(g)·u for each of down_rows_ (kBlocks: GS each)
  std::vector<uint32_t> kept_;              // used when args.kept is null
  std::vector<ThreadCount> counts_;         // kept neurons per thread's share
  std::vector<float> partial_;              // fused path: chunk c's y at c·partial_stride_
  int64_t partial_stride_ = 0;
};

// The test oracle: plain loops in double over dequantized weights and the
// float input x (no activation quantization). If `decide` is non-null, bit j
// of decide[i] replaces the threshold test for neuron j of groups[i] (tests
// pass the kernel's own decision for neurons within rounding distance of the
// threshold). act_out / up_out (optional, n_groups·GS) receive act(gate·x) and
// up·x of every predicted neuron (0 elsewhere). Writes args.y and args.kept.
void SparseFfnReference(const SparseFfnArgs& args, const uint32_t* decide, double* act_out,
                        double* up_out);

}  // namespace kx::sparse
