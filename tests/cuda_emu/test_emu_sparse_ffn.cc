// The sparse FFN's gate/up op (sparse_up_gate) under the emulator against the library's
// float64 oracle (SparseFfnReference), and the whole GPU pipeline — sparse_up_gate, then
// sparse_down_blocks or sparse_down_rows — against the CPU SparseFfn on the same bundles and
// predicted groups, with tolerances derived per neuron and per output (sparse_emu_util.h).
// The bundles are packed by lib/sparse's PackBundles and placed in scrambled device slots.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_up_gate.cuh"
#include "model/llama_ffn_activation.h"
#include "sparse/sparse_ffn.h"
#include "sparse_emu_util.h"

namespace kx::test {
namespace {

using UpGateFn = kx_cuda_status (*)(const kx_cuda_sparse_up_gate_args*, void*);
using DownBlocksFn = kx_cuda_status (*)(const kx_cuda_sparse_down_blocks_args*, void*);
using DownRowsFn = kx_cuda_status (*)(const kx_cuda_sparse_down_rows_args*, void*);

// Floats / words past each output that the op must leave alone (4: keeps 16-byte alignment).
constexpr size_t kGuard = 4;
constexpr uint32_t kPoisonWord = 0xffffffffu;

const FfnActivation kActivations[] = {FfnActivation::kSilu, FfnActivation::kGeluTanh,
                                      FfnActivation::kRelu, FfnActivation::kFatRelu,
                                      FfnActivation::kDRelu};

bool IsPoison(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits == kPoisonWord;
}

struct Call {
  FfnActivation act = FfnActivation::kSilu;
  float threshold = 0.0f;
  float act_threshold = 0.0f;  // FATReLU's t
  bool masks = true;           // false: pass masks = NULL (the listed masks must be all ones)
};

struct UpGateOut {
  std::vector<float> coef;
  std::vector<uint32_t> kept;
};

// sparse_up_gate through the registry; outputs poisoned first, guards checked after.
UpGateOut RunUpGate(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                    const Call& c) {
  const int gs = L.layout.group_size;
  UpGateOut out;
  out.coef.resize(static_cast<size_t>(l.n()) * gs + kGuard);
  out.kept.resize(static_cast<size_t>(l.n()) + kGuard);
  Poison(out.coef);
  Poison(out.kept);
  kx_cuda_sparse_up_gate_args a{};
  a.struct_size = sizeof a;
  a.arena = L.arena;
  a.slot_stride = L.slot_stride;
  a.slots = l.slots.data();
  a.masks = c.masks ? l.masks.data() : nullptr;
  a.n_listed = l.n();
  a.n_embd = L.layout.n_embd;
  a.group_size = gs;
  a.up_type = static_cast<int32_t>(L.layout.up_type);
  a.gate_type = static_cast<int32_t>(L.layout.gate_type);
  a.activation = static_cast<int32_t>(c.act);
  a.threshold = c.threshold;
  a.act_threshold = c.act_threshold;
  a.x = x.data();
  a.coef = out.coef.data();
  a.kept = out.kept.data();
  REQUIRE(FindOpOrFail<UpGateFn>("sparse_up_gate")(&a, nullptr) == KX_CUDA_OK);
  for (size_t k = 0; k < kGuard; ++k) {
    REQUIRE(IsPoison(out.coef[static_cast<size_t>(l.n()) * gs + k]));
    REQUIRE(out.kept[static_cast<size_t>(l.n()) + k] == kPoisonWord);
  }
  return out;
}

// The oracle's A and u per listed neuron slot, its decisions and y.
struct Oracle {
  std::vector<double> act, up;
  std::vector<uint32_t> kept;
  std::vector<float> y;
};

Oracle RunOracle(const SlotLayer& L, const Listed& l, const std::vector<float>& x, const Call& c,
                 const uint32_t* decide) {
  Oracle o;
  const size_t slots = static_cast<size_t>(l.n()) * L.layout.group_size;
  o.act.resize(slots);
  o.up.resize(slots);
  o.kept.resize(static_cast<size_t>(l.n()));
  o.y.resize(static_cast<size_t>(L.layout.n_embd));
  sparse::SparseFfnArgs a;
  a.layout = &L.layout;
  a.bundles = L.bundles.data();
  a.groups = l.groups.data();
  a.n_groups = l.n();
  a.masks = l.masks.data();
  a.x = x.data();
  a.act = c.act;
  a.threshold = c.threshold;
  a.act_threshold = c.act_threshold;
  a.y = o.y.data();
  a.kept = o.kept.data();
  sparse::SparseFfnReference(a, decide, o.act.data(), o.up.data());
  return o;
}

const uint8_t* UpRow(const SlotLayer& L, const Listed& l, int i, int j) {
  return L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])] +
         static_cast<uint64_t>(j) * L.layout.up_row_bytes;
}
const uint8_t* GateRow(const SlotLayer& L, const Listed& l, int i, int j) {
  return UpRow(L, l, i, 0) + L.layout.gate_offset() +
         static_cast<uint64_t>(j) * L.layout.gate_row_bytes;
}

// The GPU's error bound for neuron (i, j) of the listed groups.
NeuronError GpuNeuron(const SlotLayer& L, const Listed& l, const Oracle& o, const Call& c,
                      const std::vector<float>& x, int i, int j) {
  const int64_t n = L.layout.n_embd;
  const size_t s = static_cast<size_t>(i) * L.layout.group_size + j;
  const uint8_t* gate = GateRow(L, l, i, j);
  return BoundNeuron(c.act, c.act_threshold, o.act[s], o.up[s],
                     ExactDot(L.layout.gate_type, gate, x.data(), n),
                     GpuDotBound(L.layout.gate_type, gate, x.data(), n),
                     GpuDotBound(L.layout.up_type, UpRow(L, l, i, j), x.data(), n));
}

// Checks sparse_up_gate's coef and kept against the oracle. Returns the kept count.
int64_t CheckUpGate(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                    const Call& c) {
  const int gs = L.layout.group_size;
  const UpGateOut got = RunUpGate(L, l, x, c);
  const Oracle o = RunOracle(L, l, x, c, nullptr);
  int64_t n_kept = 0;
  for (int i = 0; i < l.n(); ++i) {
    const uint32_t kept = got.kept[static_cast<size_t>(i)];
    if (gs < 32) REQUIRE((kept >> gs) == 0);
    for (int j = 0; j < gs; ++j) {
      const size_t s = static_cast<size_t>(i) * gs + j;
      const bool predicted = !c.masks || ((l.masks[static_cast<size_t>(i)] >> j) & 1u) != 0;
      const bool got_keep = ((kept >> j) & 1u) != 0;
      const float coef = got.coef[s];
      INFO("group " << l.groups[static_cast<size_t>(i)] << " neuron " << j << " coef " << coef
                    << " A " << o.act[s] << " u " << o.up[s] << " threshold " << c.threshold);
      if (!predicted) {
        REQUIRE(!got_keep);
        REQUIRE(coef == 0.0f);
        continue;
      }
      const NeuronError e = GpuNeuron(L, l, o, c, x, i, j);
      const bool ref_keep = ((o.kept[static_cast<size_t>(i)] >> j) & 1u) != 0;
      // A decision may differ from the oracle's only within rounding of the cut.
      if (got_keep != ref_keep && !e.near_jump) {
        REQUIRE(std::fabs(std::fabs(o.act[s]) - c.threshold) <= e.da);
      }
      if (!got_keep) {
        REQUIRE(coef == 0.0f);
        continue;
      }
      ++n_kept;
      REQUIRE(std::fabs(coef - o.act[s] * o.up[s]) <= e.dc);
    }
  }
  return n_kept;
}

struct Shape {
  GgmlType wt;
  int64_t n_embd;
  int gs;
};

// The emulator runs a real thread per CUDA thread (a warp per row here), so the layers are
// small: n_ff 32, one to eight groups, every row type and width the kernel has.
TEST_CASE("sparse_up_gate equals the float64 oracle for every type and activation",
          "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8101);
  // F16 at n_embd 36 and F32 at 37: rows not 16-byte aligned (one element per load).
  const Shape shapes[] = {
      {GgmlType::kQ4_1, 576, 32}, {GgmlType::kQ4_1, 64, 4}, {GgmlType::kQ8_0, 256, 16},
      {GgmlType::kQ4_K, 256, 8},  {GgmlType::kF16, 64, 32}, {GgmlType::kF16, 36, 4},
      {GgmlType::kF32, 64, 8},    {GgmlType::kF32, 37, 16}, {GgmlType::kBF16, 64, 16},
      {GgmlType::kQ4_0, 96, 8},   {GgmlType::kQ5_0, 64, 4}, {GgmlType::kQ5_1, 96, 16},
      {GgmlType::kQ5_K, 256, 32}, {GgmlType::kQ6_K, 256, 8}};
  constexpr int kNumActs = sizeof kActivations / sizeof kActivations[0];
  int64_t kept = 0, cut = 0, shape_index = 0;
  for (const Shape& sh : shapes) {
    const int64_t n_ff = 32;  // the model's Q4_1 ffn_down rows need whole 32-blocks
    const SlotLayer L = MakeSlotLayer(sh.n_embd, n_ff, sh.gs, sh.wt, GgmlType::kF16,
                                      sparse::DownLayout::kRows, rng);
    const std::vector<float> x = RandomInput(sh.n_embd, rng);
    const Listed all = PickGroups(L, Pick::kAll, 1.0, rng);
    // Two activations per shape, in rotation: each activation meets four shapes.
    for (int pass = 0; pass < 2; ++pass) {
      Call c;
      c.act = kActivations[(2 * shape_index + pass) % kNumActs];
      if (c.act == FfnActivation::kFatRelu) {
        c.act_threshold = MedianAbs(RunOracle(L, all, x, c, nullptr).act, all, sh.gs);
      }
      const float median = MedianAbs(RunOracle(L, all, x, c, nullptr).act, all, sh.gs);
      // Pass 0: masks NULL (every neuron), the cut at the median |A| (about half kept).
      // Pass 1: 60 % of the neurons predicted, the cut at 0 (FATReLU: its t, as the sidecar
      // stores it), which keeps every nonzero A. Half of the groups each time (one of few).
      c.masks = pass == 1;
      c.threshold = pass == 0 ? median : c.act_threshold;
      const Pick pick = L.layout.n_groups >= 4 ? Pick::kHalf : Pick::kOne;
      const Listed l = PickGroups(L, pick, pass == 0 ? 1.0 : 0.6, rng);
      INFO(TypeName(sh.wt) << " n_embd " << sh.n_embd << " GS " << sh.gs << " act "
                           << FfnActivationName(c.act) << " threshold " << c.threshold << " groups "
                           << l.n());
      const int64_t k = CheckUpGate(L, l, x, c);
      kept += k;
      if (pass == 0) cut += static_cast<int64_t>(l.n()) * sh.gs - k;
    }
    ++shape_index;
  }
  // Both sides of the cut were exercised.
  CHECK(kept > 40);
  CHECK(cut > 40);
}

// The GPU pipeline (sparse_up_gate → sparse_down_*) against the CPU SparseFfn on the same
// groups: |y_gpu − y_cpu| ≤ the GPU's and the CPU's distances to the exact FFN, neuron by
// neuron, plus the whole term of a neuron the two decided differently (only allowed within
// both rounding bounds of the cut).
void CheckPipeline(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                   const Call& c) {
  const sparse::BundleLayout& lay = L.layout;
  const int gs = lay.group_size;
  const int64_t n = lay.n_embd;
  const bool blocks = lay.down == sparse::DownLayout::kBlocks;

  // GPU: y starts at 0 (the hybrid's device partial), the workspace poisoned.
  const UpGateOut up = RunUpGate(L, l, x, c);
  std::vector<float> y_gpu(static_cast<size_t>(n) + kGuard, 0.0f);
  Poison(y_gpu);
  std::fill(y_gpu.begin(), y_gpu.begin() + n, 0.0f);
  const uint64_t ws_bytes = blocks ? kx_cuda_sparse_down_blocks_workspace_bytes(n, l.n())
                                   : kx_cuda_sparse_down_rows_workspace_bytes(n, l.n(), gs);
  std::vector<float> ws(ws_bytes / sizeof(float) + 1);
  Poison(ws);
  if (blocks) {
    kx_cuda_sparse_down_blocks_args a{};
    a.struct_size = sizeof a;
    a.arena = L.arena;
    a.slot_stride = L.slot_stride;
    a.down_offset = lay.down_offset();
    a.slots = l.slots.data();
    a.n_listed = l.n();
    a.n_embd = n;
    a.coef = up.coef.data();
    a.y = y_gpu.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws_bytes;
    REQUIRE(FindOpOrFail<DownBlocksFn>("sparse_down_blocks")(&a, nullptr) == KX_CUDA_OK);
  } else {
    kx_cuda_sparse_down_rows_args a{};
    a.struct_size = sizeof a;
    a.arena = L.arena;
    a.slot_stride = L.slot_stride;
    a.down_offset = lay.down_offset();
    a.slots = l.slots.data();
    a.n_listed = l.n();
    a.group_size = gs;
    a.down_type = static_cast<int32_t>(lay.down_type);
    a.n_embd = n;
    a.coef = up.coef.data();
    a.y = y_gpu.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws_bytes;
    REQUIRE(FindOpOrFail<DownRowsFn>("sparse_down_rows")(&a, nullptr) == KX_CUDA_OK);
  }
  for (size_t k = 0; k < kGuard; ++k) REQUIRE(IsPoison(y_gpu[static_cast<size_t>(n) + k]));

  // CPU: the library's SparseFfn with the selected ISA's kernels.
  std::vector<float> y_cpu(static_cast<size_t>(n));
  std::vector<uint32_t> kept_cpu(static_cast<size_t>(l.n()) + 1);
  sparse::SparseFfnArgs a;
  a.layout = &lay;
  a.bundles = L.bundles.data();
  a.groups = l.groups.data();
  a.n_groups = l.n();
  a.masks = l.masks.data();
  a.x = x.data();
  a.act = c.act;
  a.threshold = c.threshold;
  a.act_threshold = c.act_threshold;
  a.y = y_cpu.data();
  a.kept = kept_cpu.data();
  sparse::SparseFfn ffn(cpu::Kernels(), n, lay.n_groups * gs, 1);
  ThreadPool pool(1);
  ffn.Run(a, pool);

  const Oracle o = RunOracle(L, l, x, c, up.kept.data());
  const std::vector<double> xq_gate = PreparedInput(lay.gate_type, x);
  const std::vector<double> xq_up = PreparedInput(lay.up_type, x);
  std::vector<double> bound(static_cast<size_t>(n), 0.0), gpu_bound(bound.size(), 0.0);
  std::vector<double> abs_terms(bound.size(), 0.0);
  int64_t n_kept_cpu = 0;
  for (int i = 0; i < l.n(); ++i) {
    const uint8_t* bundle = L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])];
    const uint32_t kg = up.kept[static_cast<size_t>(i)], kc = kept_cpu[static_cast<size_t>(i)];
    // The CPU's down_blocks quantizes the group's coefficients to 16 bits: ≤ half a step,
    // max|c|/32767/2, per coefficient (the step itself rounded: 1 + 4u).
    double half_step = 0.0;
    std::vector<NeuronError> eg(static_cast<size_t>(gs)), ec(static_cast<size_t>(gs));
    for (int j = 0; j < gs; ++j) {
      if (((l.masks[static_cast<size_t>(i)] >> j) & 1u) == 0) continue;
      const size_t s = static_cast<size_t>(i) * gs + j;
      eg[j] = GpuNeuron(L, l, o, c, x, i, j);
      ec[j] = BoundNeuron(c.act, c.act_threshold, o.act[s], o.up[s],
                          ExactDot(lay.gate_type, GateRow(L, l, i, j), x.data(), n),
                          CpuDotBound(lay.gate_type, GateRow(L, l, i, j), x, xq_gate),
                          CpuDotBound(lay.up_type, UpRow(L, l, i, j), x, xq_up));
      const bool g_keep = (kg >> j) & 1u, c_keep = (kc >> j) & 1u;
      if (g_keep != c_keep && !eg[j].near_jump && !ec[j].near_jump) {
        INFO("group " << l.groups[static_cast<size_t>(i)] << " neuron " << j << " A " << o.act[s]
                      << " threshold " << c.threshold);
        REQUIRE(std::fabs(std::fabs(o.act[s]) - c.threshold) <= eg[j].da + ec[j].da);
      }
      if (blocks && c_keep) {
        half_step = std::max(half_step, (std::fabs(o.act[s] * o.up[s]) + ec[j].dc) / 32767.0 * 0.5 *
                                            (1.0 + 4.0 * kF32Eps));
      }
    }
    for (int j = 0; j < gs; ++j) {
      const bool g_keep = (kg >> j) & 1u, c_keep = (kc >> j) & 1u;
      if (!g_keep && !c_keep) continue;
      n_kept_cpu += c_keep;
      const size_t s = static_cast<size_t>(i) * gs + j;
      const double term = std::fabs(o.act[s] * o.up[s]);
      const double dc = eg[j].dc + ec[j].dc + half_step;
      // Kept on one side only: that side carries the whole term.
      const double diff = g_keep && c_keep ? dc : term + dc;
      for (int64_t e = 0; e < n; ++e) {
        const double w = AbsDownWeight(lay, bundle, j, e);
        bound[static_cast<size_t>(e)] += diff * w;
        abs_terms[static_cast<size_t>(e)] += (term + dc) * w;
        if (g_keep) gpu_bound[static_cast<size_t>(e)] += eg[j].dc * w;
      }
    }
  }
  // Down chains, each ≤ 2ku·Σ|terms|: the GPU's (GpuDownChain); the CPU's ≤ 2 roundings into
  // y per kept neuron (rows: one axpy each; blocks: two FMAs per group with a kept neuron),
  // ≤ 4 of the term itself (d·q + m, ·c; blocks: d_w·d_c, s_c) and ≤ 4 of chunk partials.
  const double gpu_chain = 2.0 * kF32Eps * GpuDownChain(lay, l.n());
  const double cpu_chain = 2.0 * kF32Eps * static_cast<double>(2 * n_kept_cpu + 8);
  for (int64_t e = 0; e < n; ++e) {
    const auto k = static_cast<size_t>(e);
    INFO("e " << e << " gpu " << y_gpu[k] << " cpu " << y_cpu[k] << " oracle " << o.y[k]);
    const double tol =
        bound[k] + (gpu_chain + cpu_chain) * abs_terms[k] + kF32Eps * std::fabs(y_cpu[k]) + 1e-30;
    REQUIRE(std::fabs(static_cast<double>(y_gpu[k]) - y_cpu[k]) <= tol);
    // And the GPU alone against the oracle with the GPU's decisions.
    const double gpu_tol = gpu_bound[k] + gpu_chain * abs_terms[k] + 1e-30;
    REQUIRE(std::fabs(static_cast<double>(y_gpu[k]) - o.y[k]) <= gpu_tol);
  }
  if (l.n() == 0) {
    for (int64_t e = 0; e < n; ++e) REQUIRE(y_gpu[static_cast<size_t>(e)] == 0.0f);
  }
}

TEST_CASE("sparse_up_gate then sparse_down_* equals the CPU SparseFfn", "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8102);
  struct Config {
    GgmlType wt, down;
    sparse::DownLayout layout;
    int64_t n_embd, n_ff;
    int gs;
  };
  // Small layers (the emulator's cost is a thread per CUDA thread); the multi-chunk
  // reductions are left to test_emu_sparse_down.cc.
  const Config configs[] = {
      {GgmlType::kQ4_1, GgmlType::kQ4_1, sparse::DownLayout::kBlocks, 576, 64, 32},
      {GgmlType::kQ8_0, GgmlType::kQ8_0, sparse::DownLayout::kRows, 256, 32, 16},
      {GgmlType::kQ4_K, GgmlType::kF16, sparse::DownLayout::kRows, 256, 32, 8},
      {GgmlType::kF16, GgmlType::kF32, sparse::DownLayout::kRows, 64, 32, 4},
  };
  bool first = true;
  for (const Config& cf : configs) {
    const SlotLayer L = MakeSlotLayer(cf.n_embd, cf.n_ff, cf.gs, cf.wt, cf.down, cf.layout, rng);
    struct Run {
      Pick pick;
      FfnActivation act;
    };
    std::vector<Run> runs = {{Pick::kAll, FfnActivation::kSilu},
                             {Pick::kHalf, FfnActivation::kGeluTanh}};
    if (first) {
      runs.push_back({Pick::kNone, FfnActivation::kSilu});
      runs.push_back({Pick::kOne, FfnActivation::kRelu});
    }
    first = false;
    for (const Run& run : runs) {
      const Listed l = PickGroups(L, run.pick, run.pick == Pick::kAll ? 1.0 : 0.7, rng);
      const std::vector<float> x = RandomInput(cf.n_embd, rng);
      Call c;
      c.act = run.act;
      c.threshold = run.act == FfnActivation::kRelu
                        ? 0.0f
                        : MedianAbs(RunOracle(L, l, x, c, nullptr).act, l, cf.gs);
      INFO(TypeName(cf.wt) << " down " << TypeName(cf.down) << " "
                           << sparse::DownLayoutName(cf.layout) << " n_embd " << cf.n_embd << " GS "
                           << cf.gs << " listed " << l.n() << " act " << FfnActivationName(run.act)
                           << " threshold " << c.threshold);
      CheckPipeline(L, l, x, c);
    }
  }
}

TEST_CASE("sparse_up_gate: no listed group is a no-op, bad arguments are refused",
          "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8103);
  const SlotLayer L =
      MakeSlotLayer(64, 32, 8, GgmlType::kQ4_1, GgmlType::kQ8_0, sparse::DownLayout::kRows, rng);
  const Listed l = PickGroups(L, Pick::kAll, 1.0, rng);
  const std::vector<float> x = RandomInput(64, rng);
  std::vector<float> coef(static_cast<size_t>(l.n()) * 8);
  Poison(coef);
  kx_cuda_sparse_up_gate_args a{};
  a.struct_size = sizeof a;
  a.arena = L.arena;
  a.slot_stride = L.slot_stride;
  a.slots = l.slots.data();
  a.n_embd = 64;
  a.group_size = 8;
  a.up_type = a.gate_type = static_cast<int32_t>(GgmlType::kQ4_1);
  a.x = x.data();
  a.coef = coef.data();
  a.n_listed = 0;
  REQUIRE(kx_cuda_sparse_up_gate(&a, nullptr) == KX_CUDA_OK);
  for (float f : coef) REQUIRE(IsPoison(f));
  a.n_listed = l.n();
  REQUIRE(kx_cuda_sparse_up_gate(&a, nullptr) == KX_CUDA_OK);
  const auto refused = [&](kx_cuda_sparse_up_gate_args bad, kx_cuda_status want) {
    REQUIRE(kx_cuda_sparse_up_gate(&bad, nullptr) == want);
    REQUIRE(std::string(cuda::LastError()).find("sparse_up_gate") != std::string::npos);
  };
  REQUIRE(kx_cuda_sparse_up_gate(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_sparse_up_gate_args bad = a;
  bad.struct_size = 4;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.group_size = 12;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.up_type = static_cast<int32_t>(GgmlType::kQ2_K);  // a ggml type without a GPU decoder
  refused(bad, KX_CUDA_ERROR_UNSUPPORTED);
  bad = a;
  bad.gate_type = 99;  // not a ggml type
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.n_embd = 48;  // not whole Q4_1 blocks
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.x = x.data() + 1;  // misaligned
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.slot_stride = L.slot_stride + 8;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.activation = 7;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad = a;
  bad.coef = nullptr;
  refused(bad, KX_CUDA_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kx::test
