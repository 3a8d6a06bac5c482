// The sparse FFN's down projections (sparse_down_blocks, sparse_down_rows) and its merge
// (sparse_ffn_merge) under the emulator: the down ops against the scalar CPU kernels
// (DownBlocksFn, AxpyRowsFn) and a float64 sum, on bundles packed by lib/sparse and placed in
// scrambled device slots, with the same float coefficients; tolerances derived from both
// sides' arithmetic (sparse_emu_util.h). The merge is a fixed pair of float additions: exact.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sparse_ffn_merge.cuh"
#include "sparse_emu_util.h"

namespace kx::test {
namespace {

using DownBlocksFn = kx_cuda_status (*)(const kx_cuda_sparse_down_blocks_args*, void*);
using DownRowsFn = kx_cuda_status (*)(const kx_cuda_sparse_down_rows_args*, void*);
using MergeFn = kx_cuda_status (*)(const kx_cuda_sparse_ffn_merge_args*, void*);

constexpr size_t kGuard = 4;  // floats past y the ops must leave alone

// Coefficients as sparse_up_gate leaves them: about a quarter of the groups cut entirely,
// a third of the other neurons zero, the rest random of either sign.
std::vector<float> RandomCoefficients(int n_listed, int gs, std::mt19937_64& rng) {
  std::vector<float> c = RandomFloats(rng, static_cast<size_t>(n_listed) * gs, 0.5f);
  for (int i = 0; i < n_listed; ++i) {
    const bool cut_group = rng() % 4 == 0;
    for (int j = 0; j < gs; ++j) {
      if (cut_group || rng() % 3 == 0) c[static_cast<size_t>(i) * gs + j] = 0.0f;
    }
  }
  return c;
}

// y0 plus guards holding poison; the guards are checked by CheckGuards.
std::vector<float> StartY(const std::vector<float>& y0) {
  std::vector<float> y(y0.size() + kGuard);
  Poison(y);
  std::copy(y0.begin(), y0.end(), y.begin());
  return y;
}

void CheckGuards(const std::vector<float>& y, size_t n) {
  for (size_t k = n; k < y.size(); ++k) {
    uint32_t bits;
    std::memcpy(&bits, &y[k], sizeof bits);
    REQUIRE(bits == 0xffffffffu);
  }
}

kx_cuda_sparse_down_blocks_args BlocksArgs(const SlotLayer& L, const Listed& l,
                                           const std::vector<float>& coef, float* y,
                                           std::vector<float>* ws) {
  kx_cuda_sparse_down_blocks_args a{};
  a.struct_size = sizeof a;
  a.arena = L.arena;
  a.slot_stride = L.slot_stride;
  a.down_offset = L.layout.down_offset();
  a.slots = l.slots.data();
  a.n_listed = l.n();
  a.n_embd = L.layout.n_embd;
  a.coef = coef.data();
  a.y = y;
  a.workspace_bytes = kx_cuda_sparse_down_blocks_workspace_bytes(a.n_embd, a.n_listed);
  ws->assign(a.workspace_bytes / sizeof(float) + 1, 0.0f);
  Poison(*ws);
  a.workspace = ws->data();
  return a;
}

kx_cuda_sparse_down_rows_args RowsArgs(const SlotLayer& L, const Listed& l,
                                       const std::vector<float>& coef, float* y,
                                       std::vector<float>* ws) {
  kx_cuda_sparse_down_rows_args a{};
  a.struct_size = sizeof a;
  a.arena = L.arena;
  a.slot_stride = L.slot_stride;
  a.down_offset = L.layout.down_offset();
  a.slots = l.slots.data();
  a.n_listed = l.n();
  a.group_size = L.layout.group_size;
  a.down_type = static_cast<int32_t>(L.layout.down_type);
  a.n_embd = L.layout.n_embd;
  a.coef = coef.data();
  a.y = y;
  a.workspace_bytes = kx_cuda_sparse_down_rows_workspace_bytes(a.n_embd, a.n_listed, a.group_size);
  ws->assign(a.workspace_bytes / sizeof(float) + 1, 0.0f);
  Poison(*ws);
  a.workspace = ws->data();
  return a;
}

// Runs the GPU op and the scalar CPU kernel from the same random y0 and coefficients, and
// checks both against the float64 sum:
//   GPU:  |y − y64| ≤ 2·k_gpu·u·(|y0| + Σ|c|·|W|)                    (GpuDownChain)
//   CPU:  |y − y64| ≤ Σ δc·|W| + 2·k_cpu·u·(|y0| + Σ(|c| + δc)·|W|)
// where the CPU's down_blocks quantizes each group's coefficients to 16 bits (δc ≤ half a
// step d_c/2, d_c = max|c|/32767, plus the rounding of c/d_c: 32767u steps) and rounds ≤ 4
// times per term and twice per group into y (k_cpu = 4 + 2·groups); axpy_rows has δc = 0 and
// rounds d·q, + m, ·c and the add into y, rows in sequence (k_cpu = 4 + rows). Then
// |GPU − CPU| ≤ the sum of both bounds.
void CheckDown(const SlotLayer& L, const Listed& l, std::mt19937_64& rng) {
  const sparse::BundleLayout& lay = L.layout;
  const bool blocks = lay.down == sparse::DownLayout::kBlocks;
  const int gs = lay.group_size;
  const int64_t n = lay.n_embd;
  const std::vector<float> coef = RandomCoefficients(l.n(), gs, rng);
  const std::vector<float> y0 = RandomFloats(rng, static_cast<size_t>(n));

  std::vector<float> y_gpu = StartY(y0), ws;
  if (blocks) {
    const kx_cuda_sparse_down_blocks_args a = BlocksArgs(L, l, coef, y_gpu.data(), &ws);
    REQUIRE(FindOpOrFail<DownBlocksFn>("sparse_down_blocks")(&a, nullptr) == KX_CUDA_OK);
  } else {
    const kx_cuda_sparse_down_rows_args a = RowsArgs(L, l, coef, y_gpu.data(), &ws);
    REQUIRE(FindOpOrFail<DownRowsFn>("sparse_down_rows")(&a, nullptr) == KX_CUDA_OK);
  }
  CheckGuards(y_gpu, static_cast<size_t>(n));

  // The CPU kernel: one part per group (blocks) or one row per listed neuron (rows).
  const cpu::KernelTable& scalar = *cpu::KernelsFor(Isa::kScalar);
  std::vector<float> y_cpu = y0;
  std::vector<const uint8_t*> parts;
  for (int i = 0; i < l.n(); ++i) {
    const uint8_t* down =
        L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])] + lay.down_offset();
    for (int j = 0; j < (blocks ? 1 : gs); ++j) parts.push_back(down + j * lay.down_row_bytes);
  }
  if (blocks) {
    scalar.DownBlocks(lay.down_type)(parts.data(), coef.data(), l.n(), 0, n, y_cpu.data());
  } else {
    scalar.AxpyRows(lay.down_type)(parts.data(), coef.data(), static_cast<int64_t>(parts.size()), 0,
                                   n, y_cpu.data());
  }

  const double k_gpu = GpuDownChain(lay, l.n());
  const double k_cpu = blocks ? 4.0 + 2.0 * l.n() : 4.0 + static_cast<double>(parts.size());
  for (int64_t e = 0; e < n; ++e) {
    const auto k = static_cast<size_t>(e);
    double y64 = y0[k], abs_terms = std::fabs(y0[k]), quant = 0.0;
    for (int i = 0; i < l.n(); ++i) {
      const uint8_t* down =
          L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])] + lay.down_offset();
      double max_c = 0.0;
      for (int j = 0; j < gs; ++j) {
        max_c = std::max(max_c, std::fabs(double{coef[static_cast<size_t>(i) * gs + j]}));
      }
      const double dc = blocks ? max_c / 32767.0 * (0.5 + 32768.0 * kF32Eps) : 0.0;
      for (int j = 0; j < gs; ++j) {
        const double c = coef[static_cast<size_t>(i) * gs + j];
        double w_abs = 0.0, w = 0.0;
        if (blocks) {
          w = DownBlockWeight(down, e, j, &w_abs);
        } else {
          const uint8_t* row = down + static_cast<uint64_t>(j) * lay.down_row_bytes;
          w = WeightAt(lay.down_type, row, e);
          w_abs = AbsTermWeight(lay.down_type, row, e);
        }
        y64 += c * w;
        abs_terms += (std::fabs(c) + dc) * w_abs;
        quant += dc * w_abs;
      }
    }
    const double gpu_tol = 2.0 * k_gpu * kF32Eps * abs_terms + 1e-30;
    const double cpu_tol = quant + 2.0 * k_cpu * kF32Eps * abs_terms + 1e-30;
    INFO("e " << e << " gpu " << y_gpu[k] << " cpu " << y_cpu[k] << " f64 " << y64);
    REQUIRE(std::fabs(y_gpu[k] - y64) <= gpu_tol);
    REQUIRE(std::fabs(y_cpu[k] - y64) <= cpu_tol);
    REQUIRE(std::fabs(static_cast<double>(y_gpu[k]) - y_cpu[k]) <= gpu_tol + cpu_tol);
  }
  if (l.n() == 0) REQUIRE(std::memcmp(y_gpu.data(), y0.data(), y0.size() * sizeof(float)) == 0);
}

TEST_CASE("sparse_down_blocks equals the CPU down_blocks kernel and a float64 sum",
          "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8201);
  struct Shape {
    int64_t n_embd, n_ff;
  };
  // 32 / 64 / 256 outputs (2, 4, 16 tiles: partial and whole blocks of 8 tiles); 2, 8 and 18
  // groups (one chunk: straight into y; three, the last partial: through the workspace).
  for (const Shape sh : {Shape{64, 256}, Shape{256, 576}, Shape{32, 64}}) {
    const SlotLayer L = MakeSlotLayer(sh.n_embd, sh.n_ff, 32, GgmlType::kQ4_1, GgmlType::kQ4_1,
                                      sparse::DownLayout::kBlocks, rng);
    for (Pick pick : {Pick::kNone, Pick::kOne, Pick::kAll, Pick::kHalf}) {
      const Listed l = PickGroups(L, pick, 1.0, rng);
      INFO("n_embd " << sh.n_embd << " groups " << l.n());
      CheckDown(L, l, rng);
    }
  }
}

TEST_CASE("sparse_down_rows equals the CPU axpy_rows kernel and a float64 sum",
          "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8202);
  struct Shape {
    GgmlType wt, down;
    int64_t n_embd, n_ff;
    int gs;
  };
  // F16/BF16/F32 rows 16-byte aligned (16-byte loads) and not (n_embd 37: one element per
  // load); groups of 4 to 32 neurons: from one listed group to 4 chunks of 128 neurons.
  const Shape shapes[] = {
      {GgmlType::kQ4_1, GgmlType::kQ8_0, 256, 512, 16},
      {GgmlType::kQ4_1, GgmlType::kF16, 64, 256, 4},
      {GgmlType::kF32, GgmlType::kF16, 37, 128, 8},
      {GgmlType::kF32, GgmlType::kBF16, 64, 256, 32},
      {GgmlType::kF32, GgmlType::kBF16, 37, 64, 4},
      {GgmlType::kF32, GgmlType::kF32, 64, 128, 8},
      {GgmlType::kF32, GgmlType::kF32, 37, 128, 16},
      {GgmlType::kQ8_0, GgmlType::kQ4_1, 96, 256, 32},
      {GgmlType::kQ8_0, GgmlType::kQ4_0, 96, 128, 8},
      {GgmlType::kF32, GgmlType::kQ5_0, 64, 128, 16},
      {GgmlType::kF32, GgmlType::kQ5_1, 64, 64, 4},
  };
  for (const Shape& sh : shapes) {
    const SlotLayer L =
        MakeSlotLayer(sh.n_embd, sh.n_ff, sh.gs, sh.wt, sh.down, sparse::DownLayout::kRows, rng);
    // Every shape with all and half of its groups; no group and one group on two of them.
    std::vector<Pick> picks = {Pick::kAll, Pick::kHalf};
    if (&sh == &shapes[0] || &sh == &shapes[2])
      picks.insert(picks.end(), {Pick::kNone, Pick::kOne});
    for (Pick pick : picks) {
      const Listed l = PickGroups(L, pick, 1.0, rng);
      INFO(TypeName(sh.down) << " n_embd " << sh.n_embd << " GS " << sh.gs << " groups " << l.n());
      CheckDown(L, l, rng);
    }
  }
}

TEST_CASE("sparse_down_*: bad arguments are refused", "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8203);
  const SlotLayer B = MakeSlotLayer(64, 512, 32, GgmlType::kQ4_1, GgmlType::kQ4_1,
                                    sparse::DownLayout::kBlocks, rng);
  const Listed lb = PickGroups(B, Pick::kAll, 1.0, rng);  // 16 groups: a workspace is needed
  const std::vector<float> coef = RandomCoefficients(lb.n(), 32, rng);
  std::vector<float> y(64, 1.0f), ws;
  const kx_cuda_sparse_down_blocks_args ok_b = BlocksArgs(B, lb, coef, y.data(), &ws);
  REQUIRE(ok_b.workspace_bytes > 0);
  const auto refused_b = [&](kx_cuda_sparse_down_blocks_args bad) {
    REQUIRE(kx_cuda_sparse_down_blocks(&bad, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
    REQUIRE(std::string(cuda::LastError()).find("sparse_down_blocks") != std::string::npos);
  };
  REQUIRE(kx_cuda_sparse_down_blocks(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_sparse_down_blocks_args bad_b = ok_b;
  bad_b.workspace = nullptr;
  refused_b(bad_b);
  bad_b = ok_b;
  bad_b.workspace_bytes = ok_b.workspace_bytes - 4;
  refused_b(bad_b);
  bad_b = ok_b;
  bad_b.n_embd = 40;
  refused_b(bad_b);
  bad_b = ok_b;
  bad_b.coef = coef.data() + 1;
  refused_b(bad_b);
  bad_b = ok_b;
  bad_b.struct_size = 8;
  refused_b(bad_b);

  const SlotLayer R =
      MakeSlotLayer(64, 256, 8, GgmlType::kQ4_1, GgmlType::kQ8_0, sparse::DownLayout::kRows, rng);
  const Listed lr = PickGroups(R, Pick::kAll, 1.0, rng);
  const std::vector<float> coef_r = RandomCoefficients(lr.n(), 8, rng);
  const kx_cuda_sparse_down_rows_args ok_r = RowsArgs(R, lr, coef_r, y.data(), &ws);
  const auto refused_r = [&](kx_cuda_sparse_down_rows_args bad, kx_cuda_status want) {
    REQUIRE(kx_cuda_sparse_down_rows(&bad, nullptr) == want);
    REQUIRE(std::string(cuda::LastError()).find("sparse_down_rows") != std::string::npos);
  };
  REQUIRE(kx_cuda_sparse_down_rows(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_sparse_down_rows_args bad_r = ok_r;
  bad_r.workspace_bytes = 0;
  refused_r(bad_r, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad_r = ok_r;
  bad_r.group_size = 6;
  refused_r(bad_r, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad_r = ok_r;
  bad_r.down_type = static_cast<int32_t>(GgmlType::kQ4_K);
  refused_r(bad_r, KX_CUDA_ERROR_UNSUPPORTED);
  bad_r = ok_r;
  bad_r.n_embd = 48;  // not whole Q8_0 blocks
  refused_r(bad_r, KX_CUDA_ERROR_INVALID_ARGUMENT);
  bad_r = ok_r;
  bad_r.slots = nullptr;
  refused_r(bad_r, KX_CUDA_ERROR_INVALID_ARGUMENT);
  // Nothing above touched y.
  for (float v : y) REQUIRE(v == 1.0f);
}

// The merge's contract in float, as the host computes it: the same two IEEE additions.
float MergeRef(const float* r, const float* d, const float* h, size_t i) {
  float ffn = 0.0f;
  if (d != nullptr && h != nullptr) {
    ffn = d[i] + h[i];
  } else if (d != nullptr) {
    ffn = d[i];
  } else if (h != nullptr) {
    ffn = h[i];
  }
  if (r == nullptr) return ffn;
  if (d == nullptr && h == nullptr) return r[i];
  return r[i] + ffn;
}

TEST_CASE("sparse_ffn_merge adds both partials to the residual, bit for bit",
          "[cuda_emu][sparse]") {
  std::mt19937_64 rng = SeededRng(8204);
  const MergeFn merge = FindOpOrFail<MergeFn>("sparse_ffn_merge");
  // Every combination of present inputs at n = 64 aligned (float4 path), n = 64 one float
  // off and n = 37 (per element); in place with all three inputs.
  struct Shape {
    size_t n, offset;
  };
  for (const Shape sh : {Shape{64, 0}, Shape{64, 1}, Shape{37, 0}}) {
    for (int present = 0; present < 8; ++present) {
      for (bool in_place : {false, true}) {
        if (in_place && present != 7) continue;
        const size_t n = sh.n, off = sh.offset;
        std::vector<float> r = RandomFloats(rng, n + off, 4.0f);
        const std::vector<float> d = RandomFloats(rng, n + off);
        const std::vector<float> h = RandomFloats(rng, n + off);
        const float* rp = (present & 1) != 0 ? r.data() + off : nullptr;
        const float* dp = (present & 2) != 0 ? d.data() + off : nullptr;
        const float* hp = (present & 4) != 0 ? h.data() + off : nullptr;
        std::vector<float> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = MergeRef(rp, dp, hp, i);
        std::vector<float> dst(n + off + kGuard);
        Poison(dst);
        kx_cuda_sparse_ffn_merge_args a{};
        a.struct_size = sizeof a;
        a.n = static_cast<int64_t>(n);
        a.residual = rp;
        a.device_partial = dp;
        a.host_partial = hp;
        a.dst = in_place ? r.data() + off : dst.data() + off;
        INFO("n " << n << " offset " << off << " inputs " << present << " in place " << in_place);
        REQUIRE(merge(&a, nullptr) == KX_CUDA_OK);
        REQUIRE(std::memcmp(a.dst, want.data(), n * sizeof(float)) == 0);
        if (!in_place) CheckGuards(dst, n + off);
      }
    }
  }
  kx_cuda_sparse_ffn_merge_args a{};
  a.struct_size = sizeof a;
  a.n = 0;
  REQUIRE(merge(&a, nullptr) == KX_CUDA_OK);  // n = 0: nothing to do, dst may be NULL
  a.n = 4;
  REQUIRE(merge(&a, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  a.n = -1;
  REQUIRE(merge(&a, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  REQUIRE(merge(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kx::test
