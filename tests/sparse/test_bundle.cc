// Bundle layout and packing (lib/sparse/bundle.h).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quantize.h"
#include "kernels/kernel_test_util.h"
#include "sparse/bundle.h"
#include "test_util.h"

namespace kx::test {
namespace {

using sparse::BundleLayout;
using sparse::MakeBundleLayout;

constexpr uint8_t kPoisonByte = 0xCD;

WeightRef Ref(const std::vector<uint8_t>& data, GgmlType t, int64_t n_in, int64_t n_out,
              const char* name) {
  WeightRef w;
  w.data = data.data();
  w.type = t;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = RowBytes(t, n_in);
  w.name = name;
  return w;
}

TEST_CASE("MakeBundleLayout sizes SmolLM2's layer", "[sparse][bundle]") {
  auto l = MakeBundleLayout(576, 1536, 16, GgmlType::kQ4_1, GgmlType::kQ4_1, GgmlType::kQ4_1);
  REQUIRE(l.ok());
  CHECK(l->n_groups == 96);
  CHECK(l->up_row_bytes == 360);
  CHECK(l->down_row_bytes == 360);
  CHECK(l->gate_offset() == 16 * 360);
  CHECK(l->down_offset() == 32 * 360);
  CHECK(l->bundle_bytes == 48 * 360);
  CHECK(l->bundle_stride == 17280);  // already whole cache lines
  auto q8 = MakeBundleLayout(576, 1536, 4, GgmlType::kQ4_1, GgmlType::kQ4_1, GgmlType::kQ8_0);
  REQUIRE(q8.ok());
  CHECK(q8->down_row_bytes == 612);
  CHECK(q8->bundle_bytes == 4 * (360 + 360 + 612));
  CHECK(q8->bundle_stride == 5376);  // 5328 rounded up to 64
  CHECK(q8->n_groups == 384);
}

TEST_CASE("MakeBundleLayout refuses bad shapes and types by name", "[sparse][bundle]") {
  const GgmlType q41 = GgmlType::kQ4_1;
  struct Bad {
    int64_t n_embd, n_ff;
    int gs;
    GgmlType up, down;
    const char* says;
  };
  const Bad bad[] = {
      {576, 1536, 12, q41, q41, "group size 12"},
      {576, 1544, 16, q41, q41, "n_ff 1544"},
      {576, 4100, 4, q41, q41, "1025 groups"},
      {576, 1536, 16, GgmlType::kQ8_1, q41, "Q8_1"},
      {576, 1536, 16, q41, GgmlType::kQ4_K, "Q4_K"},
      {100, 1536, 16, q41, q41, "n_embd 100"},
      {576, 1536, 16, q41, GgmlType::kQ8_0, ""},  // fine: the control
  };
  for (const Bad& b : bad) {
    auto l = MakeBundleLayout(b.n_embd, b.n_ff, b.gs, b.up, q41, b.down);
    INFO(b.says);
    if (b.says[0] == '\0') {
      CHECK(l.ok());
      continue;
    }
    REQUIRE_FALSE(l.ok());
    CHECK_THAT(std::string(l.status().message()), Catch::Contains(b.says));
  }
}

TEST_CASE("DefaultDownType keeps 8-bit and float types, widens 4/5-bit ones", "[sparse][bundle]") {
  CHECK(sparse::DefaultDownType(GgmlType::kQ4_1, 576) == GgmlType::kQ8_0);
  CHECK(sparse::DefaultDownType(GgmlType::kQ5_0, 640) == GgmlType::kQ8_0);
  CHECK(sparse::DefaultDownType(GgmlType::kBF16, 576) == GgmlType::kBF16);
  CHECK(sparse::DefaultDownType(GgmlType::kQ8_0, 576) == GgmlType::kQ8_0);
  CHECK(sparse::DefaultDownType(GgmlType::kQ4_K, 2048) == GgmlType::kQ8_0);  // no quantizer
  CHECK(sparse::DefaultDownType(GgmlType::kQ6_K, 640) == GgmlType::kQ8_0);
  CHECK(sparse::DefaultDownType(GgmlType::kF16, 100) == GgmlType::kF16);
  CHECK(sparse::DefaultDownType(GgmlType::kQ4_0, 100) == GgmlType::kF16);  // not whole blocks
}

TEST_CASE("PackBundles copies up/gate rows and re-quantizes down columns", "[sparse][bundle]") {
  auto rng = SeededRng(7201);
  const int64_t n_embd = 64, n_ff = 64;
  for (GgmlType down_t : {GgmlType::kQ8_0, GgmlType::kF32, GgmlType::kQ4_1}) {
    for (int gs : {4, 8, 32}) {
      INFO(TypeName(down_t) << " GS " << gs);
      const auto up_d = RandomRows(GgmlType::kQ4_1, n_embd, n_ff, rng);
      const auto gate_d = RandomRows(GgmlType::kQ4_1, n_embd, n_ff, rng);
      const auto down_d = RandomRows(GgmlType::kQ8_0, n_ff, n_embd, rng);
      const WeightRef up = Ref(up_d, GgmlType::kQ4_1, n_embd, n_ff, "up");
      const WeightRef gate = Ref(gate_d, GgmlType::kQ4_1, n_embd, n_ff, "gate");
      const WeightRef down = Ref(down_d, GgmlType::kQ8_0, n_ff, n_embd, "down");
      auto l = MakeBundleLayout(n_embd, n_ff, gs, up.type, gate.type, down_t);
      REQUIRE(l.ok());
      std::vector<int32_t> perm(static_cast<size_t>(n_ff));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      const size_t total = l->bundle_stride * static_cast<size_t>(l->n_groups);
      std::vector<uint8_t> dst(total + 64, kPoisonByte);
      REQUIRE(sparse::PackBundles(up, gate, down, perm, *l, dst.data()).ok());
      for (size_t i = total; i < dst.size(); ++i) REQUIRE(dst[i] == kPoisonByte);
      std::vector<float> col(static_cast<size_t>(n_embd));
      std::vector<uint8_t> want(l->down_row_bytes);
      for (int g = 0; g < l->n_groups; ++g) {
        const uint8_t* b = dst.data() + g * l->bundle_stride;
        for (uint64_t p = l->bundle_bytes; p < l->bundle_stride; ++p) REQUIRE(b[p] == 0);
        for (int j = 0; j < gs; ++j) {
          const int32_t n = perm[static_cast<size_t>(g * gs + j)];
          REQUIRE(std::memcmp(b + j * l->up_row_bytes, up.row(n), l->up_row_bytes) == 0);
          REQUIRE(std::memcmp(b + l->gate_offset() + j * l->gate_row_bytes, gate.row(n),
                              l->gate_row_bytes) == 0);
          for (int64_t e = 0; e < n_embd; ++e) {
            col[static_cast<size_t>(e)] = static_cast<float>(WeightAt(down.type, down.row(e), n));
          }
          REQUIRE(cpu::QuantizeRow(down_t, col.data(), n_embd, want.data()).ok());
          REQUIRE(std::memcmp(b + l->down_offset() + j * l->down_row_bytes, want.data(),
                              want.size()) == 0);
        }
      }
    }
  }
}

TEST_CASE("PackBundles refuses a perm that is not a permutation", "[sparse][bundle]") {
  auto rng = SeededRng(7202);
  const int64_t n_embd = 32, n_ff = 32;
  const auto w_d = RandomRows(GgmlType::kQ8_0, n_embd, n_ff, rng);
  const auto d_d = RandomRows(GgmlType::kQ8_0, n_ff, n_embd, rng);
  const WeightRef w = Ref(w_d, GgmlType::kQ8_0, n_embd, n_ff, "w");
  const WeightRef d = Ref(d_d, GgmlType::kQ8_0, n_ff, n_embd, "d");
  auto l = MakeBundleLayout(n_embd, n_ff, 4, w.type, w.type, GgmlType::kQ8_0);
  REQUIRE(l.ok());
  std::vector<uint8_t> dst(l->bundle_stride * l->n_groups);
  std::vector<int32_t> perm(static_cast<size_t>(n_ff));
  std::iota(perm.begin(), perm.end(), 0);
  REQUIRE(sparse::PackBundles(w, w, d, perm, *l, dst.data()).ok());
  auto dup = perm;
  dup[5] = 3;
  CHECK_THAT(std::string(sparse::PackBundles(w, w, d, dup, *l, dst.data()).message()),
             Catch::Contains("neuron 3 appears twice"));
  auto out = perm;
  out[2] = 32;
  CHECK_THAT(std::string(sparse::PackBundles(w, w, d, out, *l, dst.data()).message()),
             Catch::Contains("outside"));
  auto small = perm;
  small.pop_back();
  CHECK_FALSE(sparse::PackBundles(w, w, d, small, *l, dst.data()).ok());
  WeightRef short_up = w;
  short_up.n_out = n_ff / 2;
  CHECK_THAT(std::string(sparse::PackBundles(short_up, w, d, perm, *l, dst.data()).message()),
             Catch::Contains("ffn_up"));
  WeightRef f32_gate = w;
  f32_gate.type = GgmlType::kF32;
  CHECK_THAT(std::string(sparse::PackBundles(w, f32_gate, d, perm, *l, dst.data()).message()),
             Catch::Contains("F32"));
}

TEST_CASE("down blocks: block permutations by activity, packing, refusals", "[sparse][bundle]") {
  auto rng = SeededRng(7401);
  const int64_t n_embd = 64, n_ff = 128;  // 4 blocks of 32
  // Block sums 1, 5, 3, 5: descending, ties to the lower block.
  std::vector<double> act(static_cast<size_t>(n_ff), 0.0);
  const double sums[] = {1, 5, 3, 5};
  for (int k = 0; k < 4; ++k) act[static_cast<size_t>(32 * k + 7)] = sums[k];
  const std::vector<int32_t> perm = sparse::BlockPermutation(n_ff, act);
  REQUIRE(perm.size() == static_cast<size_t>(n_ff));
  const int want_blocks[] = {1, 3, 2, 0};
  for (int g = 0; g < 4; ++g) {
    for (int j = 0; j < 32; ++j) CHECK(perm[static_cast<size_t>(32 * g + j)] == 32 * want_blocks[g] + j);
  }
  const std::vector<int32_t> identity = sparse::BlockPermutation(n_ff);
  for (int i = 0; i < n_ff; ++i) CHECK(identity[static_cast<size_t>(i)] == i);

  const std::vector<uint8_t> up = RandomRows(GgmlType::kQ4_1, n_embd, n_ff, rng);
  const std::vector<uint8_t> down = RandomRows(GgmlType::kQ4_1, n_ff, n_embd, rng);
  const WeightRef u = Ref(up, GgmlType::kQ4_1, n_embd, n_ff, "up");
  const WeightRef d = Ref(down, GgmlType::kQ4_1, n_ff, n_embd, "down");
  auto l = MakeBundleLayout(n_embd, n_ff, 32, GgmlType::kQ4_1, GgmlType::kQ4_1, GgmlType::kQ4_1,
                            sparse::DownLayout::kBlocks);
  REQUIRE(l.ok());
  CHECK(l->down_bytes == static_cast<uint64_t>(n_embd) * 20);
  CHECK(l->bundle_bytes == 32 * (l->up_row_bytes + l->gate_row_bytes) + l->down_bytes);
  std::vector<uint8_t> dst(l->bundle_stride * l->n_groups, kPoisonByte);
  REQUIRE(sparse::PackBundles(u, u, d, perm, *l, dst.data()).ok());
  // Group g's down share is block want_blocks[g] of every row, as stored.
  std::vector<float> col(static_cast<size_t>(n_embd));
  for (int g = 0; g < 4; ++g) {
    const uint8_t* b = dst.data() + l->bundle_stride * static_cast<uint64_t>(g);
    for (int j = 0; j < 32; j += 5) {
      sparse::DequantizeDownColumn(*l, b, j, col.data());
      for (int64_t e = 0; e < n_embd; ++e) {
        const double w = WeightAt(GgmlType::kQ4_1, d.row(e), 32 * want_blocks[g] + j);
        REQUIRE(col[static_cast<size_t>(e)] == Approx(w).margin(1e-6));
      }
    }
  }
  // A group that is not one whole block, in order, is refused.
  auto split = perm;
  std::swap(split[0], split[1]);
  CHECK_THAT(std::string(sparse::PackBundles(u, u, d, split, *l, dst.data()).message()),
             Catch::Contains("one block"));
  // The layout itself: GS 32 and a Q4_1 ffn_down only.
  CHECK_FALSE(MakeBundleLayout(n_embd, n_ff, 16, GgmlType::kQ4_1, GgmlType::kQ4_1,
                               GgmlType::kQ4_1, sparse::DownLayout::kBlocks)
                  .ok());
  CHECK_FALSE(MakeBundleLayout(n_embd, n_ff, 32, GgmlType::kQ4_1, GgmlType::kQ4_1,
                               GgmlType::kQ8_0, sparse::DownLayout::kBlocks)
                  .ok());
  CHECK_FALSE(MakeBundleLayout(40, n_ff, 32, GgmlType::kF32, GgmlType::kF32, GgmlType::kQ4_1,
                               sparse::DownLayout::kBlocks)
                  .ok());
}

}  // namespace
}  // namespace kx::test
