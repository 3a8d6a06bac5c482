// Shared by the sparse FFN's emulated-op tests (test_emu_sparse_ffn.cc, test_emu_sparse_down.cc):
// random layers packed into bundles by the library's own PackBundles and placed in device
// slots, picks of listed groups, and the rounding bounds the tolerances are derived from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cuda/sparse_down_blocks.cuh"
#include "kernels/cuda/sparse_down_rows.cuh"
#include "kernels/kernel_test_util.h"
#include "model/llama.h"
#include "sparse/bundle.h"

namespace kx::test {

// A layer's bundles in an arena of "device" slots, scrambled, with a stride larger than the
// bundle stride (as a GPU tier places them): group g lives in slot slot_of[g]; the unused
// slots and the padding hold random bytes.
struct SlotLayer {
  sparse::BundleLayout layout;
  std::vector<uint8_t> up, gate, down;  // the model's weights (ffn_down: n_embd rows of n_ff)
  std::vector<uint8_t> storage;         // the arena, 64-byte aligned inside
  uint8_t* arena = nullptr;
  uint64_t slot_stride = 0;
  std::vector<int32_t> slot_of;         // by group id
  std::vector<const uint8_t*> bundles;  // by group id: arena + slot·stride (what the CPU reads)
};

inline WeightRef RefOf(const std::vector<uint8_t>& data, GgmlType t, int64_t n_in, int64_t n_out) {
  WeightRef w;
  w.data = data.data();
  w.type = t;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = RowBytes(t, n_in);
  return w;
}

// Up/gate of `wt`, the model's ffn_down Q4_1 (kBlocks keeps it; kRows re-quantizes it to
// down_t). kBlocks groups are the down blocks, in activity order; kRows a random permutation.
inline SlotLayer MakeSlotLayer(int64_t n_embd, int64_t n_ff, int gs, GgmlType wt, GgmlType down_t,
                               sparse::DownLayout down, std::mt19937_64& rng) {
  constexpr GgmlType kModelDown = GgmlType::kQ4_1;
  constexpr int kExtraSlots = 3;
  constexpr uint64_t kExtraStride = 48;  // a multiple of 16, not of the bundle alignment
  constexpr size_t kArenaAlign = 64;
  SlotLayer L;
  auto layout = sparse::MakeBundleLayout(n_embd, n_ff, gs, wt, wt, down_t, down);
  REQUIRE(layout.ok());
  L.layout = *layout;
  L.up = RandomRows(wt, n_embd, n_ff, rng);
  L.gate = RandomRows(wt, n_embd, n_ff, rng);
  L.down = RandomRows(kModelDown, n_ff, n_embd, rng);
  std::vector<int32_t> perm = sparse::BlockPermutation(n_ff);
  if (down == sparse::DownLayout::kRows) std::shuffle(perm.begin(), perm.end(), rng);
  const int n_groups = L.layout.n_groups;
  std::vector<uint8_t> packed(L.layout.bundle_stride * n_groups);
  REQUIRE(sparse::PackBundles(RefOf(L.up, wt, n_embd, n_ff), RefOf(L.gate, wt, n_embd, n_ff),
                              RefOf(L.down, kModelDown, n_ff, n_embd), perm, L.layout,
                              packed.data())
              .ok());
  const int n_slots = n_groups + kExtraSlots;
  L.slot_stride = L.layout.bundle_stride + kExtraStride;
  L.storage.resize(L.slot_stride * n_slots + kArenaAlign);
  for (uint8_t& b : L.storage) b = static_cast<uint8_t>(rng());
  L.arena =
      L.storage.data() +
      (kArenaAlign - reinterpret_cast<uintptr_t>(L.storage.data()) % kArenaAlign) % kArenaAlign;
  std::vector<int32_t> order(n_slots);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int g = 0; g < n_groups; ++g) {
    L.slot_of.push_back(order[g]);
    uint8_t* dst = L.arena + L.slot_stride * static_cast<uint64_t>(order[g]);
    std::memcpy(dst, packed.data() + L.layout.bundle_stride * g, L.layout.bundle_bytes);
    L.bundles.push_back(dst);
  }
  return L;
}

// The groups one call computes: ascending ids and predicted masks (the CPU's SparseFfnArgs),
// and their slots (the GPU's list).
struct Listed {
  std::vector<int32_t> groups;
  std::vector<uint32_t> masks;
  std::vector<int32_t> slots;
  int n() const { return static_cast<int>(groups.size()); }
};

enum class Pick { kNone, kOne, kAll, kHalf };

// Each neuron of a picked group predicted with probability frac (1: all); bits above GS are
// set as garbage the ops must ignore.
inline Listed PickGroups(const SlotLayer& L, Pick pick, double frac, std::mt19937_64& rng) {
  const int n_groups = L.layout.n_groups;
  const int gs = L.layout.group_size;
  std::vector<int32_t> ids;
  if (pick == Pick::kOne) ids.push_back(static_cast<int32_t>(rng() % n_groups));
  for (int g = 0; g < n_groups && (pick == Pick::kAll || pick == Pick::kHalf); ++g) {
    if (pick == Pick::kAll || rng() % 2 == 0) ids.push_back(g);
  }
  Listed l;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int32_t g : ids) {
    uint32_t m = 0;
    for (int j = 0; j < gs; ++j) m |= static_cast<uint32_t>(frac >= 1.0 || u(rng) < frac) << j;
    if (gs < 32) m |= 0x5A5A5A5Au << gs;
    l.groups.push_back(g);
    l.masks.push_back(m);
    l.slots.push_back(L.slot_of[static_cast<size_t>(g)]);
  }
  return l;
}

// A float FFN input with a few large channels, as real hidden states have.
inline std::vector<float> RandomInput(int64_t n, std::mt19937_64& rng) {
  std::vector<float> x = RandomActs(n, rng);
  for (int k = 0; k < 3; ++k) x[rng() % static_cast<uint64_t>(n)] *= 8.0f;
  return x;
}

// Σ_e (|scale part| + |min part|)·|x_e|: what a dot product's rounding errors scale with.
inline double AbsDot(GgmlType t, const uint8_t* row, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t e = 0; e < n; ++e) s += AbsTermWeight(t, row, e) * std::fabs(x[e]);
  return s;
}

// row·x in double over the exactly decoded weights.
inline double ExactDot(GgmlType t, const uint8_t* row, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t e = 0; e < n; ++e) s += WeightAt(t, row, e) * x[e];
  return s;
}

// The shortest run of consecutive elements kernels/cuda/quant_decode.cuh decodes for rows of
// type t and n elements: 8 for the quant types (Q6_K, legacy), whole 16-byte loads for float
// rows when n allows, single elements otherwise.
inline int64_t MinRunLen(GgmlType t, int64_t n) {
  if (IsQuantized(t)) return 8;
  const int64_t wide = t == GgmlType::kF32 ? 4 : 8;
  return n % wide == 0 ? wide : 1;
}

// |sparse_up_gate's row·x − the oracle's|. The op sums over float x as given (quant_decode.cuh
// SliceDot): a weight's term passes through ≤ 16 roundings in its run's sum of products, 2
// applying the run's scale and offset, 2 per later run the lane adds (a lane takes every 32nd
// slice: ≤ n/(32·min run) + 4 runs) and 5 in the butterfly; the oracle (SparseFfnReference)
// dequantizes each weight to float first, ≤ 3 more. So |err| ≤ γ_k·Σ|terms| with
// γ_k = ku/(1 − ku) ≤ 2ku.
inline double GpuDotBound(GgmlType t, const uint8_t* row, const float* x, int64_t n) {
  const int64_t lane_runs = (n + 32 * MinRunLen(t, n) - 1) / (32 * MinRunLen(t, n)) + 4;
  const double k = 16 + 2 + 2 * static_cast<double>(lane_runs) + 5 + 3;
  return 2.0 * k * kF32Eps * AbsDot(t, row, x, n) + 1e-30;
}

// The CPU kernels' x as they multiply it: 16-bit blocks for quantized types (BlockQ16A), x
// itself for float types, decoded in double.
inline std::vector<double> PreparedInput(GgmlType t, const std::vector<float>& x) {
  const cpu::TypeKernels* k = cpu::KernelsFor(Isa::kScalar)->For(t);
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> act(k->act_bytes(n));
  k->quantize_act(x.data(), n, act.data());
  std::vector<double> xq(x.size());
  for (int64_t i = 0; i < n; ++i) xq[static_cast<size_t>(i)] = ActAt(t, act.data(), i);
  return xq;
}

// |CPU kernel row·x − the oracle's| (tests/sparse/test_sparse_ffn.cc's DotError): the exact
// effect of preparing x, |Σ w·(x̃ − x)|, plus the kernels' float chains of n/block + 20
// roundings (DotErrorBound, kernel_test_util.h; K-quants count 16-element sub-blocks), plus
// the oracle's float dequantization (3).
inline double CpuDotBound(GgmlType t, const uint8_t* row, const std::vector<float>& x,
                          const std::vector<double>& xq) {
  double prep = 0.0, abs_sum = 0.0;
  const auto n = static_cast<int64_t>(x.size());
  for (int64_t e = 0; e < n; ++e) {
    const auto i = static_cast<size_t>(e);
    prep += WeightAt(t, row, e) * (xq[i] - x[i]);
    abs_sum += AbsTermWeight(t, row, e) * std::max(std::fabs(xq[i]), std::fabs(double{x[i]}));
  }
  const int64_t block = IsKQuant(t) ? 16 : IsQuantized(t) ? 32 : 1;
  const double k = static_cast<double>(n / block + 20 + 3);
  return std::fabs(prep) + 2.0 * k * kF32Eps * abs_sum + 1e-30;
}

// The largest |A'(g)|: SiLU 1.0998, GELU-tanh 1.129, the ReLU family 1 (where continuous).
inline constexpr double kActLipschitz = 1.2;

// A neuron as the oracle sees it, and how far a float computation of it may stray.
struct NeuronError {
  double da = 0;           // |A_float − A|: the gate dot's error through A, plus A's own rounding
  double dc = 0;           // |fl(A·u) − A·u| for a kept neuron
  bool near_jump = false;  // FATReLU/dReLU near their discontinuity: A may take either side
};

// dg, du: the gate and up dots' error bounds; a, u, g: the oracle's A, up·x, gate·x.
// A's own float rounding: ≤ 8 roundings of values bounded by |A| or, in GELU's 1 + tanh(·)
// near −1 (which cancels), by |g|: 16u(|A| + |g|).
inline NeuronError BoundNeuron(FfnActivation act, float act_threshold, double a, double u, double g,
                               double dg, double du) {
  NeuronError r;
  r.da = kActLipschitz * dg + 16.0 * kF32Eps * (std::fabs(a) + std::fabs(g));
  r.dc = std::fabs(a) * du + std::fabs(u) * r.da + r.da * du + 4.0 * kF32Eps * std::fabs(a * u);
  if (act == FfnActivation::kFatRelu) r.near_jump = std::fabs(g - act_threshold) <= dg;
  if (act == FfnActivation::kDRelu) r.near_jump = std::fabs(u) <= du || std::fabs(g) <= dg;
  // Across a jump A changes by up to |g|: the coefficient by (|g| + dg)(|u| + du).
  if (r.near_jump) r.dc += (std::fabs(g) + dg) * (std::fabs(u) + du);
  return r;
}

// Keeps the neurons with |A| above the median over the predicted ones: a CATS threshold that
// cuts about half of them.
inline float MedianAbs(const std::vector<double>& act, const Listed& l, int gs) {
  std::vector<double> v;
  for (int i = 0; i < l.n(); ++i) {
    for (int j = 0; j < gs; ++j) {
      if ((l.masks[static_cast<size_t>(i)] >> j) & 1u) {
        v.push_back(std::fabs(act[static_cast<size_t>(i) * gs + j]));
      }
    }
  }
  if (v.empty()) return 0.0f;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return static_cast<float>(v[v.size() / 2]);
}

// The roundings a term of the GPU's down projection passes through (the ops' reduction
// order, sparse_down_*.cu): blocks — one group's output row (two 8-element halves of products
// and sums, joined, then d and m·Σc: 24), the chunk's 8 warps, the chunk partials, y; rows —
// the term's c·scale and FMA (and the offset's FMA beside it, added once: 4), the ≤ 128/8 rows
// of one warp, the 8 warps, the chunk partials, y. |err| ≤ 2k·u·Σ|terms|.
inline double GpuDownChain(const sparse::BundleLayout& l, int64_t n_listed) {
  const bool blocks = l.down == sparse::DownLayout::kBlocks;
  const int64_t per_chunk = blocks ? KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK
                                   : KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK / l.group_size;
  const double chunks = static_cast<double>((n_listed + per_chunk - 1) / per_chunk);
  if (blocks) return 24 + 8 + chunks + 1;
  return 4 + KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK / 8 + 8 + chunks + 1;
}

// Element j of output row e of a down-blocks part (kernels/cpu/down_blocks.h) in double,
// decoded from the bytes independently of the library: w = d·q + m; *abs_w = |d·q| + |m|.
inline double DownBlockWeight(const uint8_t* part, int64_t e, int j, double* abs_w) {
  constexpr int kTile = 16;
  constexpr uint64_t kTileBytes = 320;
  const uint8_t* tile = part + static_cast<uint64_t>(e / kTile) * kTileBytes;
  const int r = static_cast<int>(e % kTile);
  const double d = cpu::HalfToFloat(GetU16(tile + 2 * r));
  const double m = cpu::HalfToFloat(GetU16(tile + 2 * kTile + 2 * r));
  const int i = j % 16;
  const uint8_t byte = tile[4 * kTile + (i / 2) * 2 * kTile + 2 * r + i % 2];
  const int q = j < 16 ? byte & 0x0f : byte >> 4;
  if (abs_w != nullptr) *abs_w = std::fabs(d * q) + std::fabs(m);
  return d * q + m;
}

// |W| of neuron j's down column at output e as rounding errors see it (|d·q| + |m|).
inline double AbsDownWeight(const sparse::BundleLayout& l, const uint8_t* bundle, int j,
                            int64_t e) {
  const uint8_t* down = bundle + l.down_offset();
  if (l.down == sparse::DownLayout::kRows) {
    return AbsTermWeight(l.down_type, down + static_cast<uint64_t>(j) * l.down_row_bytes, e);
  }
  double abs_w = 0.0;
  DownBlockWeight(down, e, j, &abs_w);
  return abs_w;
}

}  // namespace kx::test
