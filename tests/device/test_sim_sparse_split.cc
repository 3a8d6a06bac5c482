// The split FFN on the sim device, as the hybrid pipeline runs it: the device computes some
// listed groups from its resident bundles (sparse_up_gate, sparse_down_*), the CPU SparseFfn
// the rest into a pinned host partial, and sparse_ffn_merge adds both to the residual in place;
// the result against the residual plus SparseFfn over all the groups, within tolerances
// derived neuron by neuron.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cuda/sparse_ffn_merge.cuh"
#include "sim_sparse_util.h"

namespace kx::test {
namespace {

// The listed groups whose index in l has parity `hot` (the device's half: 1; the CPU's: 0).
Listed Half(const Listed& l, int hot) {
  Listed h;
  for (int i = 0; i < l.n(); ++i) {
    if (i % 2 != hot) continue;
    h.groups.push_back(l.groups[static_cast<size_t>(i)]);
    h.masks.push_back(l.masks[static_cast<size_t>(i)]);
    h.slots.push_back(l.slots[static_cast<size_t>(i)]);
  }
  return h;
}

// The CPU SparseFfn over l (y overwritten, kept per group).
std::vector<float> CpuFfn(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                          const Call& c, std::vector<uint32_t>* kept) {
  const sparse::BundleLayout& lay = L.layout;
  std::vector<float> y(static_cast<size_t>(lay.n_embd));
  kept->assign(static_cast<size_t>(l.n()) + 1, 0);
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
  a.y = y.data();
  a.kept = kept->data();
  sparse::SparseFfn ffn(cpu::Kernels(), lay.n_embd, lay.n_groups * lay.group_size, 1);
  ThreadPool pool(1);
  ffn.Run(a, pool);
  return y;
}

// The hybrid layer: the device computes the odd-indexed listed groups (sparse_up_gate, then
// sparse_down_* into a zeroed device partial), the CPU SparseFfn the others into a pinned
// host partial, and sparse_ffn_merge adds both to the residual in place. Against the residual
// plus SparseFfn over all listed groups: the CPU's groups differ only in the down sums'
// rounding (their coefficients are the same bits: each row's dot does not depend on which
// rows run beside it); the device's groups by both sides' coefficient bounds, or a whole term
// where the two decided differently (allowed only within both bounds of the cut).
void CheckSplit(const SlotLayer& L, const Listed& l, const std::vector<float>& x, const Call& c,
                std::mt19937_64& rng) {
  const sparse::BundleLayout& lay = L.layout;
  const int gs = lay.group_size;
  const int64_t n = lay.n_embd;
  const auto nz = static_cast<size_t>(n);
  const bool blocks = lay.down == sparse::DownLayout::kBlocks;
  const Listed hot = Half(l, 1), cold = Half(l, 0);
  const std::vector<float> residual = RandomFloats(rng, nz, 2.0f);

  Rig rig;
  const uint8_t* arena = UploadArena(rig, L);
  const UpGateOut up = RunUpGate(rig, arena, L, hot, rig.Upload(x), c);
  std::vector<uint32_t> kept_cold;
  const std::vector<float> y_cold = CpuFfn(L, cold, x, c, &kept_cold);
  const std::vector<float> y_hot =
      RunDown(rig, arena, L, hot, up.dev_coef, std::vector<float>(nz, 0.0f));
  DeviceBuffer pinned = ValueOrFail(rig.dev->AllocPinned("host_partial", nz * sizeof(float)));
  std::memcpy(pinned.data(), y_cold.data(), nz * sizeof(float));
  kx_cuda_sparse_ffn_merge_args m{};
  m.struct_size = sizeof m;
  m.n = n;
  float* x_dev = rig.Upload(residual);
  m.residual = x_dev;
  m.device_partial = rig.Upload(y_hot);
  m.host_partial = pinned.as<const float>();
  m.dst = x_dev;
  REQUIRE_OK(rig.Run("sparse_ffn_merge", &m));
  const std::vector<float> got = rig.Download(x_dev, nz);

  std::vector<uint32_t> kept_all;
  const std::vector<float> y_all = CpuFfn(L, l, x, c, &kept_all);
  const Oracle o = RunOracle(L, l, x, c, nullptr);
  const std::vector<double> xq_gate = PreparedInput(lay.gate_type, x);
  const std::vector<double> xq_up = PreparedInput(lay.up_type, x);
  std::vector<double> bound(nz, 0.0), abs_terms(nz, 0.0);
  int64_t n_kept = 0;
  for (int i = 0; i < l.n(); ++i) {
    const uint8_t* bundle = L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])];
    const bool on_device = i % 2 == 1;
    const uint32_t k_cpu = kept_all[static_cast<size_t>(i)];
    const uint32_t k_split =
        on_device ? up.kept[static_cast<size_t>(i / 2)] : kept_cold[static_cast<size_t>(i / 2)];
    if (!on_device) REQUIRE(k_split == k_cpu);  // the same rows, the same decisions
    std::vector<double> diff(static_cast<size_t>(gs), 0.0), term(diff.size(), 0.0);
    double half_step = 0.0;  // the CPU's 16-bit coefficients (blocks), per group
    for (int j = 0; j < gs; ++j) {
      const bool s_keep = (k_split >> j) & 1u, c_keep = (k_cpu >> j) & 1u;
      if (!s_keep && !c_keep) continue;
      const size_t s = static_cast<size_t>(i) * gs + j;
      const NeuronError ec =
          BoundNeuron(c.act, c.act_threshold, o.act[s], o.up[s],
                      ExactDot(lay.gate_type, GateRow(L, l, i, j), x.data(), n),
                      CpuDotBound(lay.gate_type, GateRow(L, l, i, j), x, xq_gate),
                      CpuDotBound(lay.up_type, UpRow(L, l, i, j), x, xq_up));
      NeuronError es;
      if (on_device) es = SimNeuron(L, l, o, c, x, i, j);
      if (on_device && s_keep != c_keep && !es.near_jump && !ec.near_jump) {
        INFO("group " << l.groups[static_cast<size_t>(i)] << " neuron " << j << " A " << o.act[s]
                      << " threshold " << c.threshold);
        REQUIRE(std::fabs(std::fabs(o.act[s]) - c.threshold) <= es.da + ec.da);
      }
      term[static_cast<size_t>(j)] = std::fabs(o.act[s] * o.up[s]) + es.dc + ec.dc;
      if (on_device) {
        diff[static_cast<size_t>(j)] =
            s_keep && c_keep ? es.dc + ec.dc : term[static_cast<size_t>(j)];
      }
      if (blocks && c_keep) {
        half_step = std::max(half_step, (std::fabs(o.act[s] * o.up[s]) + ec.dc) / 32767.0 * 0.5 *
                                            (1.0 + 4.0 * kF32Eps));
      }
      n_kept += c_keep + s_keep;
    }
    for (int j = 0; j < gs; ++j) {
      if (term[static_cast<size_t>(j)] == 0.0) continue;
      const double d = diff[static_cast<size_t>(j)] + (on_device ? half_step : 0.0);
      for (int64_t e = 0; e < n; ++e) {
        const double w = AbsDownWeight(lay, bundle, j, e);
        bound[static_cast<size_t>(e)] += d * w;
        abs_terms[static_cast<size_t>(e)] += term[static_cast<size_t>(j)] * w;
      }
    }
  }
  // Down chains as in tests/cuda_emu (each ≤ 2ku·Σ|terms|): the sim's, and the CPU's two runs
  // (≤ 2 roundings per kept neuron, 4 of a term, 4 of chunk partials); then the merge's two
  // adds and the whole side's one (x + y).
  const double chain =
      SimDownChain(lay, hot.n()) + 2.0 * 2.0 * kF32Eps * static_cast<double>(2 * n_kept + 8);
  for (size_t k = 0; k < nz; ++k) {
    const float want = residual[k] + y_all[k];
    const double merge =
        2.0 * kF32Eps *
        (std::fabs(residual[k]) + std::fabs(y_hot[k]) + std::fabs(y_cold[k]) + std::fabs(want));
    const double tol = bound[k] + chain * abs_terms[k] + merge + 1e-30;
    INFO("e " << k << " split " << got[k] << " whole " << want << " device " << y_hot[k] << " host "
              << y_cold[k]);
    REQUIRE(std::fabs(static_cast<double>(got[k]) - want) <= tol);
  }
}

TEST_CASE("sim: the split FFN (device groups + CPU groups, merged) equals SparseFfn over all",
          "[device][sparse]") {
  std::mt19937_64 rng = SeededRng(9105);
  struct Config {
    GgmlType wt, down;
    sparse::DownLayout layout;
    int64_t n_embd, n_ff;
    int gs;
  };
  const Config configs[] = {
      {GgmlType::kQ4_1, GgmlType::kQ4_1, sparse::DownLayout::kBlocks, 256, 1024, 32},
      {GgmlType::kQ8_0, GgmlType::kQ8_0, sparse::DownLayout::kRows, 256, 512, 16},
  };
  for (const Config& cf : configs) {
    const SlotLayer L = MakeSlotLayer(cf.n_embd, cf.n_ff, cf.gs, cf.wt, cf.down, cf.layout, rng);
    for (const FfnActivation act : {FfnActivation::kSilu, FfnActivation::kRelu}) {
      const Listed l = PickGroups(L, Pick::kAll, 0.7, rng);
      const std::vector<float> x = RandomInput(cf.n_embd, rng);
      Call c;
      c.act = act;
      c.threshold = act == FfnActivation::kRelu
                        ? 0.0f
                        : MedianAbs(RunOracle(L, l, x, c, nullptr).act, l, cf.gs);
      INFO(TypeName(cf.wt) << " " << sparse::DownLayoutName(cf.layout) << " listed " << l.n()
                           << " act " << FfnActivationName(act));
      CheckSplit(L, l, x, c, rng);
    }
  }
}

}  // namespace
}  // namespace kx::test
