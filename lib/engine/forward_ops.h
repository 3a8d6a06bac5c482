// The pieces of the forward pass (forward.cc), shared by the two ways of
// running it: ForwardBatch, which dispatches each parallel op with
// pool.Run, and the per-token task graph (decode_graph.h), which runs the
// same parallel bodies as graph parts and the same serial stages as
// one-part nodes. Both call exactly these functions, so their results are
// bit-identical. Not a public header.
//
// A parallel op is "plan, prepare, parts": Plan* fixes what to compute,
// Prepare* (serial) readies its input, Run*Part(plan, ith, nth) is what
// thread ith of nth computes — pool.Run's body, or graph part ith.
#pragma once

#include <cstdint>

#include "base/timer.h"
#include "engine/engine_impl.h"

namespace kx {

// Accumulates the wall time of a scope into the engine's per-op profile.
class OpTimer {
 public:
  OpTimer(Engine::Impl& m, Op op) : m_(m), op_(static_cast<int>(op)), start_(NowNs()) {}
  ~OpTimer() {
    m_.op_ns[op_] += NowNs() - start_;
    m_.op_calls[op_] += 1;
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Engine::Impl& m_;
  int op_;
  int64_t start_;
};

// One matrix of a linear group: dst[b·ldd + r] = W[r]·src_b.
struct LinearJob {
  const WeightRef* w;
  float* dst;
  int64_t ldd;
};

inline constexpr int kMaxLinearJobs = 4;
inline constexpr int kMaxLinearTypes = 2;

// A group of linear ops sharing one input (Q/K/V, gate/up): activations are
// prepared once per distinct weight type into the engine's act scratch.
struct LinearPlan {
  LinearJob jobs[kMaxLinearJobs];
  int n_jobs = 0;
  int n_tokens = 0;
  int64_t n_in = 0;
  int64_t total_rows = 0;
  int n_types = 0;
  GgmlType types[kMaxLinearTypes];
  const cpu::TypeKernels* tks[kMaxLinearTypes] = {};
  uint8_t* acts[kMaxLinearTypes] = {};
  size_t strides[kMaxLinearTypes] = {};
  int job_type[kMaxLinearJobs] = {};
};

// Fills *plan for n_tokens rows (KX_CHECKs the jobs share n_in and fit the scratch). The
// prepared input goes to the act scratch's token rows from first_act_row on (an op whose
// input is prepared while another op still reads its own, at row 0, takes row 1).
void PlanLinear(Engine::Impl& m, int n_tokens, const LinearJob* jobs, int n_jobs, LinearPlan* plan,
                int first_act_row = 0);
// Prepares (quantizes) the input rows: n_tokens rows of src_ld floats.
void PrepareLinear(const LinearPlan& plan, const float* src, int64_t src_ld);
// One token's input elements [begin, end) only (multiples of cpu::kQ16ABlock, or end = n_in):
// the bytes PrepareLinear writes for them (TypeKernels: activations are per 32-element block).
void PrepareLinearRange(const LinearPlan& plan, const float* src, int64_t begin, int64_t end);
// Rows per unit when splitting a linear op across threads (RunLinearPart's static split, the
// decode graph's stealable units): keeps the kernels' multi-row inner loops full.
inline constexpr int64_t kRowAlign = 8;
// Thread ith's rows of every job.
void RunLinearPart(const LinearPlan& plan, int ith, int nth);
// Rows [begin, end) of the plan's jobs taken together (RunLinearPart's body).
void RunLinearRows(const LinearPlan& plan, int64_t begin, int64_t end);

// One token's gate and up rows, activation and down input for n_ff elements [begin, end) (a
// multiple of cpu::kQ16ABlock apart, or end = n_ff) as one piece of a parallel op (the task
// graph's dense FFN when no FfnHook sees the activations): the same 32-element blocks of
// n_ff in gate and in up (plan gate_up: the jobs gate, then up), their gated activation, and
// those elements prepared as down's input. What the serial stages compute, bit for bit: a
// row's sum does not depend on the split, the activation is element-wise, down's activations
// are per 32-element block. So the activation (~27 us of std::exp over Qwen 1.5B's 8960, one
// thread) runs split, without a sync point of its own, and any thread may run any piece
// (the graph's parts steal them: docs/dag.md). Returns the nanoseconds the activation and
// the preparation took.
int64_t RunGateUpActRange(Engine::Impl& m, const LinearPlan& gate_up, const LinearPlan& down,
                          int64_t begin, int64_t end);

// Attention of n tokens at positions n_past.. over one layer's KV cache, a task per KV head
// and its query heads (cpu::AttendGroup): per (token, KV head) for a batch; per (KV head,
// chunk of keys) for one token, the chunks' partials (m.attn_parts) merged by
// FinishAttention. Either way the result does not depend on the thread count. Thread ith
// uses scores row ith.
struct AttnPlan {
  Engine::Impl* m = nullptr;
  int layer = 0;
  int n = 0;
  int n_past = 0;
  int window = 0;    // keys a query at position p sees: (p − window, p]
  int n_chunks = 0;  // one token: its keys' chunks (cpu::AttnChunks); 0 for a batch
};
void PlanAttention(Engine::Impl& m, int layer, int n, AttnPlan* plan);
void RunAttentionPart(const AttnPlan& plan, int ith, int nth);
// After every part: one token's merge of the chunks into m.attn (serial; nothing for a batch).
void FinishAttention(const AttnPlan& plan);

// The serial stages of a layer, in forward order (n tokens). None times
// itself: the callers attribute time to ops (ForwardBatch with OpTimer).
void EmbedStage(Engine::Impl& m, const int32_t* tokens, int n);
void AttnNormStage(Engine::Impl& m, int layer, int n);
void QkvBiasStage(Engine::Impl& m, int layer, int n);
void QkNormStage(Engine::Impl& m, int layer, int n);  // no-op without q/k norms
void RopeStage(Engine::Impl& m, int layer, int n);    // RoPE and the KV cache store
void AttnResidualStage(Engine::Impl& m, int layer, int n);
void FfnNormStage(Engine::Impl& m, int layer, int n);
void FfnActStage(Engine::Impl& m, int n, FfnHook* hook, int layer);
void FfnResidualStage(Engine::Impl& m, int layer, int n);
void OutNormStage(Engine::Impl& m, int first, int n);
void SoftcapStage(Engine::Impl& m, float* logits, int rows);

}  // namespace kx
