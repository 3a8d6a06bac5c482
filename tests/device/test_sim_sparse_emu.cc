// The sim device's sparse ops against the CUDA kernels themselves, run by the CUDA emulator
// (kx_cuda_emu) on the same inputs: sparse_up_gate's coefficients and decisions, and the down
// ops fed the same coefficients (so the only difference left is the two reductions' rounding:
// a tight check of the chunked sums). The sim is meant to agree with the kernels within float
// rounding; these bounds say how far that is.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/sparse_down_blocks.cuh"
#include "kernels/cuda/sparse_down_rows.cuh"
#include "sim_sparse_util.h"

namespace kx::test {
namespace {

// The emulated sparse_up_gate on host memory.
UpGateOut EmuUpGate(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                    const Call& c) {
  UpGateOut out;
  out.coef.resize(static_cast<size_t>(l.n()) * L.layout.group_size);
  out.kept.resize(static_cast<size_t>(l.n()));
  Poison(out.coef);
  kx_cuda_sparse_up_gate_args a{};
  a.struct_size = sizeof a;
  a.arena = L.arena;
  a.slot_stride = L.slot_stride;
  a.slots = l.slots.data();
  a.masks = c.masks ? l.masks.data() : nullptr;
  a.n_listed = l.n();
  a.n_embd = L.layout.n_embd;
  a.group_size = L.layout.group_size;
  a.up_type = static_cast<int32_t>(L.layout.up_type);
  a.gate_type = static_cast<int32_t>(L.layout.gate_type);
  a.activation = static_cast<int32_t>(c.act);
  a.threshold = c.threshold;
  a.act_threshold = c.act_threshold;
  a.x = x.data();
  a.coef = out.coef.data();
  a.kept = out.kept.data();
  REQUIRE(kx_cuda_sparse_up_gate(&a, nullptr) == KX_CUDA_OK);
  return out;
}

// The emulated down op (by the layout) adding coef's projection into y (host memory).
void EmuDown(const SlotLayer& L, const Listed& l, const std::vector<float>& coef,
             std::vector<float>& y) {
  const sparse::BundleLayout& lay = L.layout;
  const int64_t n = lay.n_embd;
  if (lay.down == sparse::DownLayout::kBlocks) {
    std::vector<float> ws(kx_cuda_sparse_down_blocks_workspace_bytes(n, l.n()) / 4 + 1);
    kx_cuda_sparse_down_blocks_args a{};
    a.struct_size = sizeof a;
    a.arena = L.arena;
    a.slot_stride = L.slot_stride;
    a.down_offset = lay.down_offset();
    a.slots = l.slots.data();
    a.n_listed = l.n();
    a.n_embd = n;
    a.coef = coef.data();
    a.y = y.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.size() * sizeof(float);
    REQUIRE(kx_cuda_sparse_down_blocks(&a, nullptr) == KX_CUDA_OK);
    return;
  }
  std::vector<float> ws(kx_cuda_sparse_down_rows_workspace_bytes(n, l.n(), lay.group_size) / 4 + 1);
  kx_cuda_sparse_down_rows_args a{};
  a.struct_size = sizeof a;
  a.arena = L.arena;
  a.slot_stride = L.slot_stride;
  a.down_offset = lay.down_offset();
  a.slots = l.slots.data();
  a.n_listed = l.n();
  a.group_size = lay.group_size;
  a.down_type = static_cast<int32_t>(lay.down_type);
  a.n_embd = n;
  a.coef = coef.data();
  a.y = y.data();
  a.workspace = ws.data();
  a.workspace_bytes = ws.size() * sizeof(float);
  REQUIRE(kx_cuda_sparse_down_rows(&a, nullptr) == KX_CUDA_OK);
}

void CheckAgainstEmu(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                     const Call& c, std::mt19937_64& rng) {
  const sparse::BundleLayout& lay = L.layout;
  const int gs = lay.group_size;
  const int64_t n = lay.n_embd;
  Rig rig;
  const uint8_t* arena = UploadArena(rig, L);
  const UpGateOut sim = RunUpGate(rig, arena, L, l, rig.Upload(x), c);
  const UpGateOut emu = EmuUpGate(L, l, x, c);
  const Oracle o = RunOracle(L, c.masks ? l : AllPredicted(l, gs), x, c, nullptr);
  for (int i = 0; i < l.n(); ++i) {
    for (int j = 0; j < gs; ++j) {
      const size_t s = static_cast<size_t>(i) * gs + j;
      const bool s_keep = (sim.kept[static_cast<size_t>(i)] >> j) & 1u;
      const bool e_keep = (emu.kept[static_cast<size_t>(i)] >> j) & 1u;
      INFO("group " << l.groups[static_cast<size_t>(i)] << " neuron " << j << " sim " << sim.coef[s]
                    << " emu " << emu.coef[s] << " A " << o.act[s]);
      const uint8_t* gate = GateRow(L, l, i, j);
      const uint8_t* up = UpRow(L, l, i, j);
      const double g_exact = ExactDot(lay.gate_type, gate, x.data(), n);
      const NeuronError es = BoundNeuron(c.act, c.act_threshold, o.act[s], o.up[s], g_exact,
                                         SimDotBound(lay.gate_type, gate, x.data(), n),
                                         SimDotBound(lay.up_type, up, x.data(), n));
      const NeuronError eg = BoundNeuron(c.act, c.act_threshold, o.act[s], o.up[s], g_exact,
                                         GpuDotBound(lay.gate_type, gate, x.data(), n),
                                         GpuDotBound(lay.up_type, up, x.data(), n));
      NeuronError both;
      both.da = es.da + eg.da;
      both.dc = es.dc + eg.dc;
      both.near_jump = es.near_jump || eg.near_jump;
      if (s_keep != e_keep) {
        // Only within both bounds of the cut (or at FATReLU's / dReLU's jump).
        if (!both.near_jump) REQUIRE(std::fabs(std::fabs(o.act[s]) - c.threshold) <= both.da);
        continue;
      }
      if (!s_keep) {
        REQUIRE(sim.coef[s] == 0.0f);
        REQUIRE(emu.coef[s] == 0.0f);
        continue;
      }
      REQUIRE(std::fabs(static_cast<double>(sim.coef[s]) - emu.coef[s]) <= both.dc);
    }
  }

  // The down op with the emulator's coefficients on both sides, y0 the same random start.
  const std::vector<float> y0 = RandomFloats(rng, static_cast<size_t>(n), 0.5f);
  std::vector<float> y_emu = y0;
  EmuDown(L, l, emu.coef, y_emu);
  const std::vector<float> y_sim = RunDown(rig, arena, L, l, rig.Upload(emu.coef), y0);
  const double chain = 2.0 * kF32Eps * GpuDownChain(lay, l.n()) + SimDownChain(lay, l.n());
  for (int64_t e = 0; e < n; ++e) {
    double abs_terms = 0.0;
    for (int i = 0; i < l.n(); ++i) {
      const uint8_t* bundle = L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])];
      for (int j = 0; j < gs; ++j) {
        const double cf = std::fabs(emu.coef[static_cast<size_t>(i) * gs + j]);
        if (cf != 0.0) abs_terms += cf * AbsDownWeight(lay, bundle, j, e);
      }
    }
    const auto k = static_cast<size_t>(e);
    const double tol = chain * abs_terms + 4.0 * kF32Eps * std::fabs(y0[k]) + 1e-30;
    INFO("e " << e << " sim " << y_sim[k] << " emu " << y_emu[k]);
    REQUIRE(std::fabs(static_cast<double>(y_sim[k]) - y_emu[k]) <= tol);
  }
}

TEST_CASE("sim: the sparse ops agree with the emulated CUDA kernels", "[device][sparse]") {
  std::mt19937_64 rng = SeededRng(9106);
  struct Config {
    GgmlType wt, down;
    sparse::DownLayout layout;
    int64_t n_embd, n_ff;
    int gs;
  };
  // The emulator runs a thread per CUDA thread: small layers, but several chunks in the down
  // ops (9 groups of 32: 2 chunks of 8; 10 groups of 16: 2 chunks of 128 neuron slots). Two
  // activations per layer, all four in turn; masks NULL and partial in turn.
  const Config configs[] = {
      {GgmlType::kQ4_1, GgmlType::kQ4_1, sparse::DownLayout::kBlocks, 64, 288, 32},
      {GgmlType::kQ8_0, GgmlType::kQ8_0, sparse::DownLayout::kRows, 64, 160, 16},
      {GgmlType::kQ4_K, GgmlType::kF16, sparse::DownLayout::kRows, 256, 64, 8},
  };
  int run = 0;
  for (const Config& cf : configs) {
    const SlotLayer L = MakeSlotLayer(cf.n_embd, cf.n_ff, cf.gs, cf.wt, cf.down, cf.layout, rng);
    constexpr FfnActivation kActs[] = {FfnActivation::kSilu, FfnActivation::kGeluTanh,
                                       FfnActivation::kFatRelu, FfnActivation::kDRelu};
    for (int pass = 0; pass < 2; ++pass) {
      const FfnActivation act = kActs[run % 4];
      const Listed l = PickGroups(L, Pick::kAll, run % 2 == 0 ? 1.0 : 0.6, rng);
      const std::vector<float> x = RandomInput(cf.n_embd, rng);
      Call c;
      c.act = act;
      c.masks = run % 2 == 1;
      if (act == FfnActivation::kFatRelu) {
        c.act_threshold = MedianAbs(RunOracle(L, l, x, c, nullptr).act, l, cf.gs);
      }
      c.threshold = act == FfnActivation::kFatRelu || act == FfnActivation::kDRelu
                        ? c.act_threshold
                        : MedianAbs(RunOracle(L, l, x, c, nullptr).act, l, cf.gs);
      INFO(TypeName(cf.wt) << " " << sparse::DownLayoutName(cf.layout) << " listed " << l.n()
                           << " act " << FfnActivationName(act) << " masks " << c.masks);
      CheckAgainstEmu(L, l, x, c, rng);
      ++run;
    }
  }
}

}  // namespace
}  // namespace kx::test
