// The sparse FFN (lib/sparse/sparse_ffn.h) against its float64 oracle on
// random bundles, with a rounding bound derived per output element, and
// against the dense FFN computed with the existing kernels.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernel_test_util.h"
#include "model/llama_ffn_activation.h"
#include "sparse/bundle.h"
#include "sparse/sparse_ffn.h"
#include "test_util.h"

namespace kx::test {
namespace {

using sparse::BundleLayout;
using sparse::SparseFfn;
using sparse::SparseFfnArgs;

constexpr float kPoison = -7.77e33f;
constexpr uint32_t kPoisonBits = 0xDEADBEEFu;
constexpr int kGuard = 16;
// |act'| ≤ 1.1 (SiLU), 1.13 (GELU tanh), 1 (ReLU).
constexpr double kActLipschitz = 1.2;

// A random layer: weights, packed bundles placed in scrambled order.
struct Layer {
  BundleLayout layout;
  std::vector<uint8_t> up, gate, down, packed;
  std::vector<const uint8_t*> bundles;  // by group id
};

WeightRef Ref(const std::vector<uint8_t>& data, GgmlType t, int64_t n_in, int64_t n_out) {
  WeightRef w;
  w.data = data.data();
  w.type = t;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = RowBytes(t, n_in);
  return w;
}

// kBlocks: GS 32, down_t = wt = Q4_1, the block permutation (groups = the
// down blocks); kRows: a random permutation.
Layer MakeLayer(int64_t n_embd, int64_t n_ff, int gs, GgmlType wt, GgmlType down_t,
                std::mt19937_64& rng, sparse::DownLayout down = sparse::DownLayout::kRows) {
  Layer L;
  auto l = sparse::MakeBundleLayout(n_embd, n_ff, gs, wt, wt, down_t, down);
  REQUIRE(l.ok());
  L.layout = *l;
  L.up = RandomRows(wt, n_embd, n_ff, rng);
  L.gate = RandomRows(wt, n_embd, n_ff, rng);
  L.down = RandomRows(wt, n_ff, n_embd, rng);
  std::vector<int32_t> perm = sparse::BlockPermutation(n_ff);
  if (down == sparse::DownLayout::kRows) std::shuffle(perm.begin(), perm.end(), rng);
  L.packed.resize(L.layout.bundle_stride * L.layout.n_groups);
  REQUIRE(sparse::PackBundles(Ref(L.up, wt, n_embd, n_ff), Ref(L.gate, wt, n_embd, n_ff),
                              Ref(L.down, wt, n_ff, n_embd), perm, L.layout, L.packed.data())
              .ok());
  // Bundle g lives at slot place[g]: the kernel must index by group id only.
  std::vector<int> place(static_cast<size_t>(L.layout.n_groups));
  std::iota(place.begin(), place.end(), 0);
  std::shuffle(place.begin(), place.end(), rng);
  for (int g = 0; g < L.layout.n_groups; ++g) {
    L.bundles.push_back(L.packed.data() + place[static_cast<size_t>(g)] * L.layout.bundle_stride);
  }
  // Moving a bundle's bytes is not needed for the pointer test: the placement
  // permutes which bytes each group id reads; the oracle reads the same pointers.
  return L;
}

// Float random FFN input with a few large channels, as real hidden states have.
std::vector<float> RandomInput(int64_t n, std::mt19937_64& rng) {
  std::vector<float> x = RandomActs(n, rng);
  for (int k = 0; k < 3; ++k) x[static_cast<size_t>(rng() % n)] *= 8.0f;
  return x;
}

// The activation values the kernels multiply: x after the weight type's
// activation preparation (16-bit blocks for quantized types, x itself for
// float types), decoded in double.
std::vector<double> PreparedInput(GgmlType t, const std::vector<float>& x) {
  const cpu::TypeKernels* k = cpu::KernelsFor(Isa::kScalar)->For(t);
  std::vector<uint8_t> act(k->act_bytes(static_cast<int64_t>(x.size())));
  k->quantize_act(x.data(), static_cast<int64_t>(x.size()), act.data());
  std::vector<double> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = ActAt(t, act.data(), static_cast<int64_t>(i));
  return xq;
}

// Bound on |kernel(w·x) − w·x| for one row: the exact effect of preparing x
// (|Σ w·(x̃ − x)|, computed in double) plus the float rounding of the
// kernel's dot product over x̃ (DotErrorBound's chain-length argument).
double DotError(GgmlType t, const uint8_t* row, const std::vector<float>& x,
                const std::vector<double>& xq) {
  double prep = 0, abs_sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const auto e = static_cast<int64_t>(i);
    prep += WeightAt(t, row, e) * (xq[i] - x[i]);
    abs_sum += AbsTermWeight(t, row, e) * std::fabs(xq[i]);
  }
  const int64_t block = IsQuantized(t) ? 32 : 1;
  const double k = static_cast<double>(static_cast<int64_t>(x.size()) / block + 16 + 4);
  return std::fabs(prep) + 2.0 * k * kF32Eps * abs_sum;
}

struct Predicted {
  std::vector<int32_t> groups;
  std::vector<uint32_t> masks;
};

// Each neuron predicted with probability `frac`; groups = the non-empty ones.
Predicted Predict(const BundleLayout& l, double frac, std::mt19937_64& rng) {
  Predicted p;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int g = 0; g < l.n_groups; ++g) {
    uint32_t m = 0;
    for (int j = 0; j < l.group_size; ++j) {
      if (frac >= 1.0 || u(rng) < frac) m |= 1u << j;
    }
    if (m != 0) {
      p.groups.push_back(g);
      // Bits above GS must be ignored: set some when GS < 32.
      p.masks.push_back(l.group_size < 32 ? m | (0xA5A5A5A5u << l.group_size) : m);
    }
  }
  return p;
}

// Predicted neurons that the ReLU-family rule itself zeroed (FATReLU:
// 0 < g <= t; dReLU: g > 0 and u <= 0): CheckAgainstOracle counts them so
// the tests can assert the rule's own case was exercised.
struct OracleCounts {
  int64_t rule_zeroed = 0;
};

// gate·x in double over the dequantized row and the float x.
double GateDot(GgmlType t, const uint8_t* row, const std::vector<float>& x) {
  double s = 0.0;
  for (size_t e = 0; e < x.size(); ++e) s += WeightAt(t, row, static_cast<int64_t>(e)) * x[e];
  return s;
}

// Runs the kernel and checks it against the oracle with derived bounds.
// act_threshold: FATReLU's t.
OracleCounts CheckAgainstOracle(const Layer& L, const Predicted& p, const std::vector<float>& x,
                                FfnActivation act, float threshold,
                                const cpu::KernelTable& table, float act_threshold = 0.0f) {
  OracleCounts counts;
  const BundleLayout& l = L.layout;
  const int gs = l.group_size;
  const auto n = static_cast<size_t>(l.n_embd);
  const int ng = static_cast<int>(p.groups.size());
  SparseFfnArgs a;
  a.layout = &l;
  a.bundles = L.bundles.data();
  a.groups = p.groups.data();
  a.n_groups = ng;
  a.masks = p.masks.data();
  a.x = x.data();
  a.act = act;
  a.threshold = threshold;
  a.act_threshold = act_threshold;

  // Kernel on 1, 2 and 3 threads: bit-identical y and kept; guards intact.
  constexpr int kThreadCounts = 3;
  const int64_t n_ff = static_cast<int64_t>(l.n_groups) * gs;
  SparseFfn ffn(table, l.n_embd, static_cast<int>(n_ff), kThreadCounts);
  std::vector<float> y_buf[kThreadCounts];
  std::vector<uint32_t> kept_buf[kThreadCounts];
  for (int t = 0; t < kThreadCounts; ++t) {
    ThreadPool pool(t + 1);
    y_buf[t].assign(n + 2 * kGuard, kPoison);
    kept_buf[t].assign(static_cast<size_t>(ng) + kGuard, kPoisonBits);
    a.y = y_buf[t].data() + kGuard;
    a.kept = kept_buf[t].data();
    ffn.Run(a, pool);
    for (int k = 0; k < kGuard; ++k) {
      REQUIRE(y_buf[t][static_cast<size_t>(k)] == kPoison);
      REQUIRE(y_buf[t][n + kGuard + static_cast<size_t>(k)] == kPoison);
      REQUIRE(kept_buf[t][static_cast<size_t>(ng + k)] == kPoisonBits);
    }
    for (size_t e = 0; e < n; ++e) REQUIRE(std::isfinite(y_buf[t][e + kGuard]));
  }
  for (int t = 1; t < kThreadCounts; ++t) {
    INFO("threads " << t + 1);
    REQUIRE(std::memcmp(y_buf[0].data(), y_buf[t].data(), y_buf[0].size() * sizeof(float)) == 0);
    REQUIRE(kept_buf[0] == kept_buf[t]);
  }
  const uint32_t* kept = kept_buf[0].data();
  const float* y = y_buf[0].data() + kGuard;

  // Oracle, first deciding by itself, to compare the decisions.
  std::vector<double> act_v(static_cast<size_t>(ng) * gs), up_v(act_v.size());
  std::vector<float> y_ref(n);
  std::vector<uint32_t> kept_ref(static_cast<size_t>(ng));
  a.y = y_ref.data();
  a.kept = kept_ref.data();
  sparse::SparseFfnReference(a, nullptr, act_v.data(), up_v.data());

  // Per-neuron error bounds of the kernel's act(g) and u.
  const std::vector<double> xq_gate = PreparedInput(l.gate_type, x);
  const std::vector<double> xq_up = PreparedInput(l.up_type, x);
  std::vector<double> coef_err(act_v.size(), 0.0);
  for (int i = 0; i < ng; ++i) {
    const uint8_t* b = L.bundles[static_cast<size_t>(p.groups[static_cast<size_t>(i)])];
    for (int j = 0; j < gs; ++j) {
      const size_t s = static_cast<size_t>(i) * gs + j;
      const bool predicted = (p.masks[static_cast<size_t>(i)] >> j) & 1u;
      if (!predicted) {
        REQUIRE(((kept[i] >> j) & 1u) == 0);
        continue;
      }
      const double dg =
          DotError(l.gate_type, b + l.gate_offset() + j * l.gate_row_bytes, x, xq_gate);
      const double du = DotError(l.up_type, b + j * l.up_row_bytes, x, xq_up);
      const double av = act_v[s], uv = up_v[s];
      // g itself is within |act| + a bit of the activation's input; bound its rounding loosely.
      const double da = kActLipschitz * dg + 16 * kF32Eps * (std::fabs(av) + 1.0);
      // FATReLU (at g = t) and dReLU (at u = 0) jump: near the jump the
      // kernel may decide the other way, off by the jump's size.
      const double gv = GateDot(l.gate_type, b + l.gate_offset() + j * l.gate_row_bytes, x);
      bool near_jump = false;
      if (act == FfnActivation::kFatRelu) {
        near_jump = std::fabs(gv - act_threshold) <= dg;
        counts.rule_zeroed += gv > 0.0 && gv <= act_threshold;
      } else if (act == FfnActivation::kDRelu) {
        near_jump = std::fabs(uv) <= du || std::fabs(gv) <= dg;
        counts.rule_zeroed += gv > 0.0 && uv <= 0.0;
      }
      const bool ref_keep = (kept_ref[static_cast<size_t>(i)] >> j) & 1u;
      const bool got_keep = (kept[i] >> j) & 1u;
      if (ref_keep != got_keep && !near_jump) {
        INFO("group " << i << " slot " << j << " |act| " << std::fabs(av) << " threshold "
                      << threshold << " tol " << da);
        REQUIRE(std::fabs(std::fabs(av) - threshold) <= da);
      }
      coef_err[s] = std::fabs(av) * du + std::fabs(uv) * da + da * du +
                    4 * kF32Eps * std::fabs(av * uv);
      if (near_jump) coef_err[s] += (std::fabs(gv) + dg) * (std::fabs(uv) + du);
    }
  }
  // Oracle again with the kernel's decisions (they agree except at the margin).
  sparse::SparseFfnReference(a, kept, nullptr, nullptr);

  // y bound: Σ δcoef·|down| + the down chain's float rounding.
  const double chain = 2.0 * 8.0 * kF32Eps;  // per term; times chain length below
  // kBlocks also quantizes each group's coefficients to 16 bits: at most
  // half a step, max|c|/32767/2, per coefficient.
  const bool blocks = l.down == sparse::DownLayout::kBlocks;
  std::vector<double> bound(n, 0.0), abs_terms(n, 0.0);
  int64_t n_kept = 0;
  for (int i = 0; i < ng; ++i) {
    const int gid = p.groups[static_cast<size_t>(i)];
    const uint8_t* b = L.bundles[static_cast<size_t>(gid)];
    const auto block = static_cast<int64_t>(static_cast<uint64_t>(b - L.packed.data()) /
                                            l.bundle_stride);
    double half_step = 0.0;
    for (int j = 0; j < gs && blocks; ++j) {
      const size_t s = static_cast<size_t>(i) * gs + j;
      if (((kept[i] >> j) & 1u) == 0) continue;
      half_step = std::max(half_step, (std::fabs(act_v[s] * up_v[s]) + coef_err[s]) / 32767.0 *
                                          0.5 * (1.0 + 4.0 * kF32Eps));
    }
    for (int j = 0; j < gs; ++j) {
      if (((kept[i] >> j) & 1u) == 0) continue;
      ++n_kept;
      const size_t s = static_cast<size_t>(i) * gs + j;
      const double c = std::fabs(act_v[s] * up_v[s]) + coef_err[s] + half_step;
      for (size_t e = 0; e < n; ++e) {
        // kBlocks keeps ffn_down as it is: the bundle at packed slot k
        // (MakeLayer places bundles in scrambled order) holds block k.
        const double w =
            blocks ? AbsTermWeight(l.down_type,
                                   L.down.data() + e * RowBytes(l.down_type, gs * l.n_groups),
                                   block * gs + j)
                   : AbsTermWeight(l.down_type, b + l.down_offset() + j * l.down_row_bytes,
                                   static_cast<int64_t>(e));
        bound[e] += (coef_err[s] + half_step) * w;
        abs_terms[e] += c * w;
      }
    }
  }
  for (size_t e = 0; e < n; ++e) {
    const double tol = bound[e] + (chain * static_cast<double>(n_kept + 4) / 8.0) * abs_terms[e] +
                       kF32Eps * std::fabs(y_ref[e]) + 1e-30;
    INFO("e=" << e << " got " << y[e] << " want " << y_ref[e] << " tol " << tol);
    REQUIRE(std::fabs(static_cast<double>(y[e]) - y_ref[e]) <= tol);
  }
  if (ng == 0 || n_kept == 0) {
    for (size_t e = 0; e < n; ++e) REQUIRE(y[e] == 0.0f);
  }
  return counts;
}

TEST_CASE("sparse FFN matches the oracle across group sizes, sparsities, activations",
          "[sparse][ffn]") {
  auto rng = SeededRng(7301);
  const int64_t n_embd = 256, n_ff = 512;
  const FfnActivation acts[] = {FfnActivation::kSilu, FfnActivation::kGeluTanh,
                                FfnActivation::kRelu};
  struct Types {
    GgmlType w, down;
  };
  const Types types[] = {{GgmlType::kQ4_1, GgmlType::kQ4_1},
                         {GgmlType::kQ4_1, GgmlType::kQ8_0},
                         {GgmlType::kF32, GgmlType::kF32}};
  for (const Types& ty : types) {
    for (int gs : {4, 8, 16, 32}) {
      const Layer L = MakeLayer(n_embd, n_ff, gs, ty.w, ty.down, rng);
      for (double frac : {0.0, 0.01, 0.5, 0.9, 1.0}) {
        const Predicted p = Predict(L.layout, frac, rng);
        for (FfnActivation act : acts) {
          for (float threshold : {0.0f, 0.05f}) {
            INFO(TypeName(ty.w) << "/" << TypeName(ty.down) << " GS " << gs << " active "
                                << frac << " act " << static_cast<int>(act) << " threshold "
                                << threshold);
            CheckAgainstOracle(L, p, RandomInput(n_embd, rng), act, threshold, cpu::Kernels());
          }
        }
      }
    }
  }
  // The model's own Q4_1 down blocks (GS 32, groups = blocks).
  const Layer L = MakeLayer(n_embd, n_ff, 32, GgmlType::kQ4_1, GgmlType::kQ4_1, rng,
                            sparse::DownLayout::kBlocks);
  for (double frac : {0.0, 0.01, 0.5, 0.9, 1.0}) {
    const Predicted p = Predict(L.layout, frac, rng);
    for (FfnActivation act : acts) {
      for (float threshold : {0.0f, 0.05f}) {
        INFO("down blocks active " << frac << " act " << static_cast<int>(act) << " threshold "
                                   << threshold);
        CheckAgainstOracle(L, p, RandomInput(n_embd, rng), act, threshold, cpu::Kernels());
      }
    }
  }
}

// The median of the positive values of gate·x over a layer's neurons: a
// FATReLU t that zeroes about half of the otherwise-active neurons.
float MedianPositiveGate(const Layer& L, GgmlType wt, int64_t n_embd, int64_t n_ff,
                         const std::vector<float>& x) {
  std::vector<double> pos;
  for (int64_t r = 0; r < n_ff; ++r) {
    const double g = GateDot(wt, L.gate.data() + r * RowBytes(wt, n_embd), x);
    if (g > 0.0) pos.push_back(g);
  }
  REQUIRE(!pos.empty());
  std::nth_element(pos.begin(), pos.begin() + pos.size() / 2, pos.end());
  return static_cast<float>(pos[pos.size() / 2]);
}

TEST_CASE("sparse FFN matches the oracle for FATReLU and dReLU", "[sparse][ffn]") {
  auto rng = SeededRng(7304);
  const int64_t n_embd = 256, n_ff = 512;
  struct Types {
    GgmlType w, down;
  };
  const Types types[] = {{GgmlType::kQ4_1, GgmlType::kQ4_1},
                         {GgmlType::kQ4_1, GgmlType::kQ8_0},
                         {GgmlType::kF32, GgmlType::kF32}};
  OracleCounts fat, drelu;
  for (const Types& ty : types) {
    for (int gs : {4, 16, 32}) {
      const Layer L = MakeLayer(n_embd, n_ff, gs, ty.w, ty.down, rng);
      for (double frac : {0.0, 0.5, 1.0}) {
        const Predicted p = Predict(L.layout, frac, rng);
        const std::vector<float> x = RandomInput(n_embd, rng);
        const float t = MedianPositiveGate(L, ty.w, n_embd, n_ff, x);
        // The sidecar's threshold for FATReLU is t itself; 0 must work too.
        for (float threshold : {0.0f, t}) {
          INFO(TypeName(ty.w) << "/" << TypeName(ty.down) << " GS " << gs << " active " << frac
                              << " t " << t << " threshold " << threshold);
          const OracleCounts c = CheckAgainstOracle(L, p, x, FfnActivation::kFatRelu, threshold,
                                                    cpu::Kernels(), t);
          fat.rule_zeroed += c.rule_zeroed;
        }
        INFO(TypeName(ty.w) << "/" << TypeName(ty.down) << " GS " << gs << " active " << frac
                            << " dReLU");
        drelu.rule_zeroed +=
            CheckAgainstOracle(L, p, x, FfnActivation::kDRelu, 0.0f, cpu::Kernels()).rule_zeroed;
      }
    }
  }
  // The rules' own zeros were exercised (not only ReLU's g <= 0).
  CHECK(fat.rule_zeroed > 100);
  CHECK(drelu.rule_zeroed > 100);
}

TEST_CASE("sparse FFN matches the oracle on every ISA's kernels", "[sparse][ffn]") {
  auto rng = SeededRng(7302);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const cpu::KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (GgmlType down : {GgmlType::kQ4_1, GgmlType::kQ8_0}) {
      INFO(IsaName(isa) << " down " << TypeName(down));
      const Layer L = MakeLayer(576, 1536, 16, GgmlType::kQ4_1, down, rng);
      const Predicted p = Predict(L.layout, 0.3, rng);
      CheckAgainstOracle(L, p, RandomInput(576, rng), FfnActivation::kSilu, 0.02f, *t);
    }
    INFO(IsaName(isa) << " down blocks");
    const Layer L = MakeLayer(576, 1536, 32, GgmlType::kQ4_1, GgmlType::kQ4_1, rng,
                              sparse::DownLayout::kBlocks);
    const Predicted p = Predict(L.layout, 0.3, rng);
    CheckAgainstOracle(L, p, RandomInput(576, rng), FfnActivation::kSilu, 0.02f, *t);
  }
}

// The dense FFN of forward.cc on L's weights (matvec gate/up, act·up, h
// prepared to 16 bits, matvec down over the original ffn_down): y, and h as
// the down matvec saw it (hq, decoded) beside h itself.
struct DenseRef {
  std::vector<float> y, h;
  std::vector<double> hq;
};
DenseRef DenseFfn(const Layer& L, GgmlType wt, int64_t n_embd, int64_t n_ff,
                  const std::vector<float>& x, FfnActivation act, float t) {
  const cpu::TypeKernels* tk = cpu::Kernels().For(wt);
  std::vector<uint8_t> ax(tk->act_bytes(n_embd)), ah(tk->act_bytes(n_ff));
  tk->quantize_act(x.data(), n_embd, ax.data());
  std::vector<float> g(static_cast<size_t>(n_ff)), u(g.size()), h(g.size());
  tk->matvec(L.gate.data(), RowBytes(wt, n_embd), n_embd, n_ff, ax.data(), g.data());
  tk->matvec(L.up.data(), RowBytes(wt, n_embd), n_embd, n_ff, ax.data(), u.data());
  for (size_t i = 0; i < h.size(); ++i) h[i] = ActivatedValue(act, t, g[i], u[i]) * u[i];
  tk->quantize_act(h.data(), n_ff, ah.data());
  DenseRef r;
  r.y.resize(static_cast<size_t>(n_embd));
  tk->matvec(L.down.data(), RowBytes(wt, n_ff), n_ff, n_embd, ah.data(), r.y.data());
  r.hq.resize(h.size());
  for (size_t i = 0; i < h.size(); ++i) r.hq[i] = ActAt(wt, ah.data(), static_cast<int64_t>(i));
  r.h = std::move(h);
  return r;
}

// The sparse FFN with every neuron of every group predicted, on 2 threads;
// y's guard past n_embd checked.
std::vector<float> SparseAllActive(const Layer& L, int64_t n_embd, int64_t n_ff,
                                   const std::vector<float>& x, FfnActivation act, float t,
                                   std::mt19937_64& rng) {
  const Predicted p = Predict(L.layout, 1.0, rng);
  std::vector<float> y(static_cast<size_t>(n_embd) + kGuard, kPoison);
  SparseFfnArgs a;
  a.layout = &L.layout;
  a.bundles = L.bundles.data();
  a.groups = p.groups.data();
  a.n_groups = static_cast<int>(p.groups.size());
  a.masks = p.masks.data();
  a.x = x.data();
  a.act = act;
  a.threshold = 0.0f;
  a.act_threshold = t;
  a.y = y.data();
  SparseFfn ffn(cpu::Kernels(), n_embd, static_cast<int>(n_ff), 2);
  ThreadPool pool(2);
  ffn.Run(a, pool);
  for (int e = 0; e < kGuard; ++e) REQUIRE(y[static_cast<size_t>(n_embd + e)] == kPoison);
  y.resize(static_cast<size_t>(n_embd));
  return y;
}

// All neurons active and F32 down_t (an exact transpose): the result is the
// dense FFN of forward.cc (matvec gate/up, act·up, matvec down over the
// original ffn_down) up to the dense path's 16-bit quantization of h and
// both paths' float rounding.
TEST_CASE("sparse FFN with every neuron active equals the dense FFN", "[sparse][ffn]") {
  auto rng = SeededRng(7303);
  const int64_t n_embd = 576, n_ff = 1536;
  const GgmlType wt = GgmlType::kQ4_1;
  for (FfnActivation act : {FfnActivation::kSilu, FfnActivation::kGeluTanh, FfnActivation::kRelu,
                            FfnActivation::kFatRelu, FfnActivation::kDRelu}) {
    INFO("activation " << FfnActivationName(act));
    const Layer L = MakeLayer(n_embd, n_ff, 16, wt, GgmlType::kF32, rng);
    const std::vector<float> x = RandomInput(n_embd, rng);
    const float t =
        act == FfnActivation::kFatRelu ? MedianPositiveGate(L, wt, n_embd, n_ff, x) : 0.0f;
    const DenseRef dense = DenseFfn(L, wt, n_embd, n_ff, x, act, t);
    const std::vector<float> y = SparseAllActive(L, n_embd, n_ff, x, act, t, rng);
    const std::vector<float>& h = dense.h;
    const std::vector<double>& hq = dense.hq;
    // The dense down multiplies h̃ (h prepared to 16 bits per 32 neurons):
    // the paths differ by exactly Σ w·(h̃ − h) (computed in double) plus the
    // float rounding of both (dense: n_ff/32-block chains; sparse: n_ff F32
    // axpys in sequence).
    for (int64_t e = 0; e < n_embd; ++e) {
      const uint8_t* row = L.down.data() + e * RowBytes(wt, n_ff);
      double prep = 0, abs_sum = 0;
      for (int64_t i = 0; i < n_ff; ++i) {
        const auto k = static_cast<size_t>(i);
        prep += WeightAt(wt, row, i) * (hq[k] - h[k]);
        abs_sum += AbsTermWeight(wt, row, i) * std::max(std::fabs(hq[k]), std::fabs(static_cast<double>(h[k])));
      }
      const double tol =
          std::fabs(prep) + 2.0 * static_cast<double>(n_ff + n_ff / 32 + 24) * kF32Eps * abs_sum;
      INFO("e=" << e << " sparse " << y[static_cast<size_t>(e)] << " dense "
                << dense.y[static_cast<size_t>(e)] << " tol " << tol);
      REQUIRE(std::fabs(static_cast<double>(y[static_cast<size_t>(e)]) -
                        dense.y[static_cast<size_t>(e)]) <= tol);
    }
  }
}

// Down blocks with every neuron active: the dense FFN's arithmetic exactly
// (h quantized per block of 32 neurons, the same integer dots with the same
// ffn_down bytes), summed in another order: only float rounding differs.
TEST_CASE("sparse FFN over down blocks with every neuron active equals the dense FFN",
          "[sparse][ffn][down_blocks]") {
  auto rng = SeededRng(7305);
  const int64_t n_embd = 576, n_ff = 1536;
  const GgmlType wt = GgmlType::kQ4_1;
  const Layer L = MakeLayer(n_embd, n_ff, 32, wt, wt, rng, sparse::DownLayout::kBlocks);
  for (FfnActivation act : {FfnActivation::kSilu, FfnActivation::kGeluTanh, FfnActivation::kRelu}) {
    INFO("activation " << FfnActivationName(act));
    const std::vector<float> x = RandomInput(n_embd, rng);
    const DenseRef dense = DenseFfn(L, wt, n_embd, n_ff, x, act, 0.0f);
    const std::vector<float> y = SparseAllActive(L, n_embd, n_ff, x, act, 0.0f, rng);
    const std::vector<double>& hq = dense.hq;
    int64_t differ = 0;
    for (int64_t e = 0; e < n_embd; ++e) {
      const uint8_t* row = L.down.data() + e * RowBytes(wt, n_ff);
      double abs_sum = 0;
      for (int64_t i = 0; i < n_ff; ++i) {
        abs_sum += AbsTermWeight(wt, row, i) * std::fabs(hq[static_cast<size_t>(i)]);
      }
      // Dense: lanes of n_ff/32-block chains; blocks: 2 fmas per group in sequence.
      const double tol = 2.0 * static_cast<double>(2 * n_ff / 32 + 24) * kF32Eps * abs_sum;
      const double d = std::fabs(static_cast<double>(y[static_cast<size_t>(e)]) -
                                 dense.y[static_cast<size_t>(e)]);
      INFO("e=" << e << " blocks " << y[static_cast<size_t>(e)] << " dense "
                << dense.y[static_cast<size_t>(e)] << " tol " << tol);
      REQUIRE(d <= tol);
      differ += d > 0.0 ? 1 : 0;
    }
    // Not a tautology: the two paths sum in different orders somewhere.
    CHECK(differ > 0);
  }
}

}  // namespace
}  // namespace kx::test
