// down_blocks (kernels.h, down_blocks.h) on every ISA the CPU runs: the
// packed parts against the model's own ffn_down blocks, the scalar kernel
// against a float64 oracle, every SIMD kernel against the scalar one bit for
// bit, elements outside [i0, i1) untouched, all-zero groups skipped, and
// splitting the output rows changes no bit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/down_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace kx::test {
namespace {

constexpr GgmlType kQ4_1 = GgmlType::kQ4_1;
constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr Isa kSimdIsas[] = {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr int kGroup = cpu::kDownBlocksGroup;
constexpr int kTile = cpu::kDownBlocksTile;
constexpr float kPoison = -7.77e33f;
constexpr int kGuard = 16;          // poisoned floats on each side of y
constexpr size_t kGuardBytes = 64;  // guard bytes on each side of a packed part
constexpr uint8_t kGuardByte = 0xa5;
constexpr double kQ16AMax = 32767.0;  // the coefficient quantizer's largest |q|
constexpr double kOutlier = 1000.0;   // scale of the rare large coefficients

// Gives about one block in kEdgeEvery an unusual scale or min, as real
// models hold: a subnormal half, a negative d, ±0 (HalfToFloat and F16C
// conversions must agree on all of them).
constexpr int kEdgeEvery = 8;
void AddEdgeScales(std::vector<uint8_t>* w, std::mt19937_64& rng) {
  constexpr size_t kBlock = sizeof(uint16_t) * 2 + 16;  // BlockQ4_1
  constexpr uint16_t kSign = 0x8000, kSubnormalMant = 0x03ff;
  for (size_t off = 0; off < w->size(); off += kBlock) {
    if (rng() % kEdgeEvery != 0) continue;
    const uint16_t sub = static_cast<uint16_t>((rng() & kSubnormalMant) | 1);
    const uint16_t sign = rng() % 2 ? kSign : 0;
    switch (rng() % 4) {
      case 0:  // d subnormal, either sign
        PutU16(&(*w)[off], static_cast<uint16_t>(sub | sign));
        break;
      case 1:  // m subnormal, either sign
        PutU16(&(*w)[off + 2], static_cast<uint16_t>(sub | sign));
        break;
      case 2:  // d negative
        PutU16(&(*w)[off], static_cast<uint16_t>(GetU16(&(*w)[off]) | kSign));
        break;
      default:  // m = ±0
        PutU16(&(*w)[off + 2], sign);
        break;
    }
  }
}

// A random Q4_1 ffn_down (n_embd rows of n_ff elements) and its parts, one
// per block k, each in its own buffer like bundles scattered in memory.
struct Down {
  int64_t n_embd = 0, n_ff = 0;
  std::vector<uint8_t> w;
  std::vector<std::vector<uint8_t>> parts;
  const uint8_t* Row(int64_t e) const { return w.data() + e * RowBytes(kQ4_1, n_ff); }
};

Down MakeDown(int64_t n_embd, int64_t n_ff, std::mt19937_64& rng) {
  Down d;
  d.n_embd = n_embd;
  d.n_ff = n_ff;
  d.w = RandomRows(kQ4_1, n_ff, n_embd, rng);
  AddEdgeScales(&d.w, rng);
  const uint64_t bytes = cpu::DownBlocksBytes(kQ4_1, n_embd);
  for (int64_t k = 0; k < n_ff / kGroup; ++k) {
    d.parts.emplace_back(bytes);
    cpu::PackDownBlocks(kQ4_1, d.w.data(), RowBytes(kQ4_1, n_ff), n_embd, k, d.parts.back().data());
  }
  return d;
}

// One kernel call's inputs: group g is block blocks[g] of the ffn_down.
struct Groups {
  std::vector<int64_t> blocks;
  std::vector<const uint8_t*> ptrs;
  std::vector<float> coef;  // 32 per group
  int64_t n() const { return static_cast<int64_t>(blocks.size()); }
};

// n_groups groups over distinct blocks while there are enough (then repeated),
// in shuffled order. Coefficients: normal of mixed scales, ~30% exact zeros
// (partly kept groups), rare outliers of ±kOutlier scale, and the group at
// zero_group (if ≥ 0) all zeros.
Groups MakeGroups(const Down& d, int64_t n_groups, int64_t zero_group, std::mt19937_64& rng) {
  Groups gr;
  std::vector<int64_t> order(d.parts.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pct(0, 99);
  for (int64_t g = 0; g < n_groups; ++g) {
    const int64_t k = order[static_cast<size_t>(g) % order.size()];
    gr.blocks.push_back(k);
    gr.ptrs.push_back(d.parts[static_cast<size_t>(k)].data());
    const float scale = 1.0f + static_cast<float>(rng() % 4);
    for (int j = 0; j < kGroup; ++j) {
      const int p = pct(rng);
      float v = normal(rng) * scale;
      if (p < 30 || g == zero_group) v = 0.0f;
      if (p >= 98 && g != zero_group) v = static_cast<float>(kOutlier) * normal(rng);
      gr.coef.push_back(v);
    }
  }
  return gr;
}

// y of n_embd elements between poisoned guards; [i0, i1) random, some -0.0.
std::vector<float> MakeY(int64_t n_embd, int64_t i0, int64_t i1, std::mt19937_64& rng) {
  std::vector<float> y(static_cast<size_t>(n_embd + 2 * kGuard), kPoison);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = i0; i < i1; ++i) {
    y[static_cast<size_t>(kGuard + i)] = rng() % 8 == 0 ? -0.0f : normal(rng);
  }
  return y;
}

void Run(cpu::DownBlocksFn fn, const Groups& gr, int64_t i0, int64_t i1, std::vector<float>* y) {
  fn(gr.ptrs.data(), gr.coef.data(), gr.n(), i0, i1, y->data() + kGuard);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("PackDownBlocks keeps every block byte for byte", "[sparse][down_blocks]") {
  auto rng = SeededRng(7301);
  const cpu::TypeKernels* deq = cpu::KernelsFor(Isa::kScalar)->For(kQ4_1);
  REQUIRE(deq != nullptr);
  const int64_t shapes[][2] = {{576, 128}, {16, 64}, {48, 96}};
  for (const auto& s : shapes) {
    const int64_t n_embd = s[0], n_ff = s[1];
    INFO("n_embd=" << n_embd << " n_ff=" << n_ff);
    REQUIRE(cpu::HasDownBlocksLayout(kQ4_1, n_embd));
    const uint64_t bytes = cpu::DownBlocksBytes(kQ4_1, n_embd);
    // The same bytes as the blocks it holds: no padding, no copies.
    CHECK(bytes == static_cast<uint64_t>(n_embd) * GetTypeInfo(kQ4_1).block_bytes);
    std::vector<uint8_t> w = RandomRows(kQ4_1, n_ff, n_embd, rng);
    AddEdgeScales(&w, rng);
    const size_t row_bytes = RowBytes(kQ4_1, n_ff);
    std::vector<float> dense(static_cast<size_t>(n_embd * n_ff));
    for (int64_t e = 0; e < n_embd; ++e) {
      deq->dequantize(w.data() + e * row_bytes, dense.data() + e * n_ff, n_ff);
    }
    for (int64_t k = 0; k < n_ff / kGroup; ++k) {
      INFO("block " << k);
      std::vector<uint8_t> buf(bytes + 2 * kGuardBytes, kGuardByte);
      uint8_t* part = buf.data() + kGuardBytes;
      cpu::PackDownBlocks(kQ4_1, w.data(), row_bytes, n_embd, k, part);
      for (size_t i = 0; i < kGuardBytes; ++i) {
        REQUIRE(buf[i] == kGuardByte);
        REQUIRE(buf[kGuardBytes + bytes + i] == kGuardByte);
      }
      for (int64_t e = 0; e < n_embd; ++e) {
        for (int j = 0; j < kGroup; ++j) {
          const float want = dense[static_cast<size_t>(e * n_ff + k * kGroup + j)];
          const float got = cpu::DownBlocksAt(kQ4_1, part, e, j);
          INFO("e=" << e << " j=" << j << " got " << got << " want " << want);
          REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
          // And the independent float64 decoder (rounded once, as DownBlocksAt does).
          REQUIRE(got ==
                  static_cast<float>(WeightAt(kQ4_1, w.data() + e * row_bytes, k * kGroup + j)));
        }
      }
      // A permutation of the blocks' bytes: the multiset of bytes is the same.
      std::vector<uint8_t> src;
      for (int64_t e = 0; e < n_embd; ++e) {
        const uint8_t* b = w.data() + e * row_bytes + k * GetTypeInfo(kQ4_1).block_bytes;
        src.insert(src.end(), b, b + GetTypeInfo(kQ4_1).block_bytes);
      }
      std::vector<uint8_t> got(part, part + bytes);
      std::sort(src.begin(), src.end());
      std::sort(got.begin(), got.end());
      REQUIRE(src == got);
    }
  }
}

TEST_CASE("HasDownBlocksLayout accepts only Q4_1 with whole tiles", "[sparse][down_blocks]") {
  CHECK(cpu::HasDownBlocksLayout(kQ4_1, kTile));
  CHECK(cpu::HasDownBlocksLayout(kQ4_1, 576));
  CHECK_FALSE(cpu::HasDownBlocksLayout(kQ4_1, 0));
  CHECK_FALSE(cpu::HasDownBlocksLayout(kQ4_1, -16));
  CHECK_FALSE(cpu::HasDownBlocksLayout(kQ4_1, 8));
  CHECK_FALSE(cpu::HasDownBlocksLayout(kQ4_1, 584));
  CHECK_FALSE(cpu::HasDownBlocksLayout(kQ4_1, 577));
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                     GgmlType::kF16, GgmlType::kF32}) {
    CHECK_FALSE(cpu::HasDownBlocksLayout(t, 576));
  }
}

struct KernelCase {
  int64_t n_embd, n_ff, n_groups, zero_group;
};
constexpr KernelCase kCases[] = {{576, 1536, 0, -1},  {576, 1536, 1, -1}, {576, 1536, 5, 2},
                                 {576, 1536, 48, 24}, {16, 64, 1, -1},    {16, 64, 5, 0},
                                 {48, 256, 5, 4},     {48, 256, 9, -1}};

// Output ranges (multiples of the tile) for n_embd: the whole, and parts.
std::vector<std::pair<int64_t, int64_t>> Ranges(int64_t n_embd) {
  std::vector<std::pair<int64_t, int64_t>> r = {{0, n_embd}, {kTile, kTile}};
  if (n_embd >= 3 * kTile) {
    r.push_back({kTile, n_embd - kTile});
    r.push_back({0, kTile});
    r.push_back({n_embd - kTile, n_embd});
  }
  if (n_embd == 576) {
    r.push_back({64, 512});
    r.push_back({288, 576});
    r.push_back({16, 48});
  }
  return r;
}

TEST_CASE("scalar down_blocks matches a float64 oracle", "[sparse][down_blocks]") {
  auto rng = SeededRng(7302);
  const cpu::DownBlocksFn fn = cpu::KernelsFor(Isa::kScalar)->DownBlocks(kQ4_1);
  REQUIRE(fn != nullptr);
  for (const KernelCase& c : kCases) {
    const Down d = MakeDown(c.n_embd, c.n_ff, rng);
    const Groups gr = MakeGroups(d, c.n_groups, c.zero_group, rng);
    for (const auto& [i0, i1] : Ranges(c.n_embd)) {
      INFO("n_embd=" << c.n_embd << " groups=" << c.n_groups << " [" << i0 << "," << i1 << ")");
      const std::vector<float> y0 = MakeY(c.n_embd, i0, i1, rng);
      std::vector<float> y = y0;
      Run(fn, gr, i0, i1, &y);
      for (int64_t i = -kGuard; i < c.n_embd + kGuard; ++i) {
        const auto k = static_cast<size_t>(kGuard + i);
        if (i < i0 || i >= i1) {
          INFO("outside i=" << i);
          REQUIRE(std::memcmp(&y[k], &y0[k], sizeof(float)) == 0);
          continue;
        }
        // Float64 with the unquantized coefficients. Error sources: the
        // coefficients' int16 quantization (|Δc| ≤ step/2, step = amax/32767
        // rounded to float) and float rounding (per group ≤ 4 roundings of
        // the partial terms d·Σq·q_c and m·s, which may cancel, in a chain
        // of 2 fmas per group: ≤ 2·(2G + 4)·u of their magnitude).
        double want = y0[k], mag = std::fabs(y0[k]), quant = 0;
        for (int64_t g = 0; g < gr.n(); ++g) {
          const float* cg = gr.coef.data() + g * kGroup;
          double amax = 0;
          for (int j = 0; j < kGroup; ++j) amax = std::max(amax, std::fabs(double{cg[j]}));
          const double step = amax / kQ16AMax * (1 + 4 * kF32Eps);
          const int64_t blk = gr.blocks[static_cast<size_t>(g)];
          for (int j = 0; j < kGroup; ++j) {
            const double w = cpu::DownBlocksAt(kQ4_1, gr.ptrs[static_cast<size_t>(g)], i, j);
            const double wabs = AbsTermWeight(kQ4_1, d.Row(i), blk * kGroup + j);
            want += double{cg[j]} * w;
            mag += (std::fabs(double{cg[j]}) + step) * wabs;
            quant += 0.5 * step * wabs;
          }
        }
        const double bound =
            quant + 2.0 * static_cast<double>(2 * gr.n() + 4) * kF32Eps * mag + 1e-30;
        INFO("i=" << i << " got " << y[k] << " want " << want << " bound " << bound);
        REQUIRE(std::fabs(y[k] - want) <= bound);
        if (gr.n() == 0) REQUIRE(std::memcmp(&y[k], &y0[k], sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("every SIMD down_blocks equals the scalar one bit for bit", "[sparse][down_blocks]") {
  auto rng = SeededRng(7303);
  const cpu::DownBlocksFn scalar = cpu::KernelsFor(Isa::kScalar)->DownBlocks(kQ4_1);
  REQUIRE(scalar != nullptr);
  int tables = 0;
  for (const KernelCase& c : kCases) {
    const Down d = MakeDown(c.n_embd, c.n_ff, rng);
    const Groups gr = MakeGroups(d, c.n_groups, c.zero_group, rng);
    for (const auto& [i0, i1] : Ranges(c.n_embd)) {
      const std::vector<float> y0 = MakeY(c.n_embd, i0, i1, rng);
      std::vector<float> y_ref = y0;
      Run(scalar, gr, i0, i1, &y_ref);
      for (Isa isa : kSimdIsas) {
        const cpu::KernelTable* table = cpu::KernelsFor(isa);
        if (table == nullptr) continue;
        ++tables;
        INFO(IsaName(isa) << " n_embd=" << c.n_embd << " groups=" << c.n_groups << " [" << i0 << ","
                          << i1 << ")");
        const cpu::DownBlocksFn fn = table->DownBlocks(kQ4_1);
        REQUIRE(fn != nullptr);
        std::vector<float> y = y0;
        Run(fn, gr, i0, i1, &y);
        // Covers the guards and the elements outside [i0, i1) too (poison in y0).
        for (size_t k = 0; k < y.size(); ++k) {
          INFO("i=" << static_cast<int64_t>(k) - kGuard << " got " << y[k] << " scalar "
                    << y_ref[k]);
          REQUIRE(std::memcmp(&y[k], &y_ref[k], sizeof(float)) == 0);
        }
        // Any split at tile boundaries, as threads do, gives the same bits.
        for (int64_t mid = i0; mid <= i1; mid += kTile) {
          std::vector<float> y2 = y0;
          Run(fn, gr, i0, mid, &y2);
          Run(fn, gr, mid, i1, &y2);
          INFO("split at " << mid);
          REQUIRE(SameBits(y2, y));
        }
      }
    }
  }
  INFO("SIMD tables run: " << tables);
  CHECK(tables > 0);  // this machine runs at least AVX2; otherwise nothing was compared
}

TEST_CASE("down_blocks skips all-zero groups on every ISA", "[sparse][down_blocks]") {
  auto rng = SeededRng(7304);
  const Down d = MakeDown(576, 512, rng);
  const Groups gr = MakeGroups(d, 7, 3, rng);  // group 3 is all zeros
  Groups without;                              // the same minus group 3
  for (int64_t g = 0; g < gr.n(); ++g) {
    if (g == 3) continue;
    without.blocks.push_back(gr.blocks[static_cast<size_t>(g)]);
    without.ptrs.push_back(gr.ptrs[static_cast<size_t>(g)]);
    without.coef.insert(without.coef.end(), gr.coef.begin() + g * kGroup,
                        gr.coef.begin() + (g + 1) * kGroup);
  }
  Groups zero;  // only the zero group
  zero.blocks = {gr.blocks[3]};
  zero.ptrs = {gr.ptrs[3]};
  zero.coef.assign(gr.coef.begin() + 3 * kGroup, gr.coef.begin() + 4 * kGroup);
  for (Isa isa : kIsas) {
    const cpu::KernelTable* table = cpu::KernelsFor(isa);
    if (table == nullptr) continue;
    INFO(IsaName(isa));
    const cpu::DownBlocksFn fn = table->DownBlocks(kQ4_1);
    REQUIRE(fn != nullptr);
    // y0 holds -0.0 in places: fma(0, w, -0.0) would give +0.0 if not skipped.
    const std::vector<float> y0 = MakeY(576, 0, 576, rng);
    std::vector<float> y = y0;
    Run(fn, zero, 0, 576, &y);
    REQUIRE(SameBits(y, y0));
    std::vector<float> y_all = y0, y_without = y0;
    Run(fn, gr, 0, 576, &y_all);
    Run(fn, without, 0, 576, &y_without);
    REQUIRE(SameBits(y_all, y_without));
    REQUIRE_FALSE(SameBits(y_all, y0));  // the other groups did change y
  }
}

TEST_CASE("every table has down_blocks for Q4_1 only", "[sparse][down_blocks]") {
  for (Isa isa : kIsas) {
    const cpu::KernelTable* table = cpu::KernelsFor(isa);
    if (table == nullptr) continue;
    INFO(IsaName(isa));
    CHECK(table->DownBlocks(kQ4_1) != nullptr);
    CHECK(table->DownBlocks(GgmlType::kQ8_0) == nullptr);
    CHECK(table->DownBlocks(GgmlType::kF32) == nullptr);
    CHECK(table->DownBlocks(GgmlType::kQ4_K) == nullptr);
    CHECK(table->DownBlocks(static_cast<GgmlType>(1000)) == nullptr);
  }
}

}  // namespace
}  // namespace kx::test
