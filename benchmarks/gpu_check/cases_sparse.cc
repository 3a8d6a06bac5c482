// Sparse FFN ops: sparse_up_gate, sparse_down_blocks and sparse_down_rows over an arena of
// neuron bundles (lib/sparse/bundle.h's layout), sparse_ffn_merge, and axpy_rows_f16 over a
// plain F16 down_t.
// Half of the FFN's groups are listed (CATS s = 0.5 keeps about half the neurons), in a
// shuffled slot order.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "benchmarks/gpu_check/cases.h"
#include "kernels/cuda/axpy_rows_f16.cuh"
#include "kernels/cuda/sparse_down_blocks.cuh"
#include "kernels/cuda/sparse_down_rows.cuh"
#include "kernels/cuda/sparse_ffn_merge.cuh"
#include "kernels/cuda/sparse_up_gate.cuh"

namespace kx::gpu_check {
namespace {

constexpr int32_t kGroupSize = 32;  // the default layout's group: one Q4_1 block of ffn_down
constexpr int64_t kListedDivisor = 2;
constexpr uint64_t kBundleAlign = 64;  // bundle strides are multiples of 64 (bundle.h)
// A listed group's neurons predicted active: about 3 in 4.
constexpr uint32_t kPredictedPercent = 75;
// The CATS cut on |act(g)|: drops a fair share of the predicted neurons at these magnitudes.
constexpr float kThreshold = 0.1f;
// Down-blocks tiles (kernels/cpu/down_blocks.h): 16 output rows, 16 half d, 16 half m, 8
// chunks of 16 rows × 2 quant bytes.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileBytes = 320;
constexpr int64_t kTileScaleBytes = 64;
// axpy_rows_f16: the hot quarter of the FFN's rows that the GPU tier holds.
constexpr int64_t kActiveDivisor = 4;
constexpr float kCoeffScale = 1.0f;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// An arena of n_groups bundles: [GS up rows][GS gate rows][down part], each slot
// slot_stride bytes. The down part is the down-blocks layout (Q4_1 tiles) or GS down_t rows
// of down_type.
struct Arena {
  std::vector<uint8_t> bytes;
  uint64_t slot_stride = 0;
  uint64_t down_offset = 0;
  uint64_t up_row_bytes = 0;
  uint64_t gate_row_bytes = 0;
  uint64_t down_row_bytes = 0;  // rows layout; the blocks layout's share is n_embd·20
};

enum class DownLayout { kBlocks, kRows };

// Random Q4_1 down-block tiles for n_embd output rows.
void FillDownBlocks(std::mt19937_64& rng, int64_t n_embd, uint8_t* dst) {
  for (int64_t t = 0; t < n_embd / kTileRows; ++t) {
    uint8_t* tile = dst + t * kTileBytes;
    // d (positive) and m (negative) halves as a Q4_1 block's, then random quant bytes.
    const std::vector<uint8_t> q41 = RandomWeights(rng, kTypeQ4_1, kTileRows, 32);
    for (int64_t r = 0; r < kTileRows; ++r) {
      std::memcpy(tile + 2 * r, q41.data() + r * 20, 2);
      std::memcpy(tile + 32 + 2 * r, q41.data() + r * 20 + 2, 2);
    }
    for (int64_t k = kTileScaleBytes; k < kTileBytes; ++k) tile[k] = static_cast<uint8_t>(rng());
  }
}

Arena MakeArena(std::mt19937_64& rng, const ModelShapes& m, int32_t up_type, int32_t gate_type,
                DownLayout layout, int32_t down_type) {
  Arena a;
  const int64_t n_groups = m.n_ff / kGroupSize;
  a.up_row_bytes = RowBytes(up_type, m.n_embd);
  a.gate_row_bytes = RowBytes(gate_type, m.n_embd);
  a.down_offset = kGroupSize * (a.up_row_bytes + a.gate_row_bytes);
  a.down_row_bytes = RowBytes(down_type, m.n_embd);
  const uint64_t down_bytes = layout == DownLayout::kBlocks
                                  ? static_cast<uint64_t>(m.n_embd / kTileRows * kTileBytes)
                                  : kGroupSize * a.down_row_bytes;
  a.slot_stride = RoundUp(a.down_offset + down_bytes, kBundleAlign);
  a.bytes.assign(static_cast<size_t>(a.slot_stride * n_groups), 0);
  for (int64_t g = 0; g < n_groups; ++g) {
    uint8_t* b = a.bytes.data() + g * a.slot_stride;
    const std::vector<uint8_t> up = RandomWeights(rng, up_type, kGroupSize, m.n_embd);
    const std::vector<uint8_t> gate = RandomWeights(rng, gate_type, kGroupSize, m.n_embd);
    std::memcpy(b, up.data(), up.size());
    std::memcpy(b + up.size(), gate.data(), gate.size());
    if (layout == DownLayout::kBlocks) {
      FillDownBlocks(rng, m.n_embd, b + a.down_offset);
    } else {
      const std::vector<uint8_t> down = RandomWeights(rng, down_type, kGroupSize, m.n_embd);
      std::memcpy(b + a.down_offset, down.data(), down.size());
    }
  }
  return a;
}

// Half of the groups, as slots in shuffled order.
std::vector<int32_t> ListedSlots(std::mt19937_64& rng, int64_t n_groups) {
  std::vector<int32_t> slots(static_cast<size_t>(n_groups));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(std::max<int64_t>(1, n_groups / kListedDivisor)));
  return slots;
}

// Coefficients as sparse_up_gate leaves them: A·u for kept neurons, zeros for the others,
// and one listed group in eight with none kept (the down ops skip such groups).
std::vector<float> SparseCoefficients(std::mt19937_64& rng, int64_t n_listed) {
  std::vector<float> coef = RandomFloats(rng, n_listed * kGroupSize, kCoeffScale);
  for (int64_t i = 0; i < n_listed; ++i) {
    const bool none_kept = i % 8 == 7;
    for (int64_t j = 0; j < kGroupSize; ++j) {
      if (none_kept || rng() % 100 >= kPredictedPercent) coef[i * kGroupSize + j] = 0.0f;
    }
  }
  return coef;
}

std::string GroupsShape(int64_t n_listed, int64_t n_groups, int64_t n_embd) {
  return std::to_string(n_listed) + "/" + std::to_string(n_groups) + " groups x " +
         std::to_string(n_embd);
}

// ---- sparse_up_gate ---------------------------------------------------------------------------

void AddSparseUpGate(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  const ModelShapes& m = config.model;
  const int32_t type = m.weight_type;
  const Arena arena = MakeArena(rng, m, type, type, DownLayout::kRows, kTypeQ8_0);
  const int64_t n_groups = m.n_ff / kGroupSize;
  const std::vector<int32_t> slots = ListedSlots(rng, n_groups);
  const int64_t n_listed = static_cast<int64_t>(slots.size());
  std::vector<uint32_t> masks(slots.size());
  uint64_t rows_read = 0;
  for (uint32_t& mask : masks) {
    for (int j = 0; j < kGroupSize; ++j) {
      if (rng() % 100 < kPredictedPercent) mask |= 1u << j;
    }
    if (mask == 0) mask = 1;
    rows_read += static_cast<uint64_t>(__builtin_popcount(mask));
  }

  Case c;
  c.op = "sparse_up_gate";
  c.shape = GroupsShape(n_listed, n_groups, m.n_embd);
  c.type = TypeName(type);
  const int ar = AddBuffer(&c, "arena", Role::kInput, Elem::kU8, arena.bytes);
  const int sl = AddBuffer(&c, "slots", Role::kInput, Elem::kI32, AsBytes(slots));
  const int mk = AddBuffer(&c, "masks", Role::kInput, Elem::kI32, AsBytes(masks));
  const int x =
      AddBuffer(&c, "x", Role::kInput, Elem::kF32, AsBytes(RandomFloats(rng, m.n_embd, kActScale)));
  const int coef = AddOutput(&c, "coef", Elem::kF32, n_listed * kGroupSize, kGroupSize);
  // kept is a bit mask: poisoned all-ones, compared exactly as an integer.
  const int kept = AddOutput(&c, "kept", Elem::kI32, n_listed, 1);
  const uint64_t stride = arena.slot_stride;
  const int64_t n_embd = m.n_embd;
  c.launch = [=](void* fn, void* const* buf, RowWindow r, void* stream) {
    kx_cuda_sparse_up_gate_args a{};
    a.struct_size = sizeof a;
    a.arena = static_cast<const uint8_t*>(buf[ar]);
    a.slot_stride = stride;
    a.slots = static_cast<const int32_t*>(buf[sl]) + r.begin;
    a.masks = static_cast<const uint32_t*>(buf[mk]) + r.begin;
    a.n_listed = r.end - r.begin;
    a.n_embd = n_embd;
    a.group_size = kGroupSize;
    a.up_type = type;
    a.gate_type = type;
    a.activation = KX_CUDA_FFN_ACT_SILU;
    a.threshold = kThreshold;
    a.act_threshold = 0.0f;
    a.x = static_cast<const float*>(buf[x]);
    a.coef = static_cast<float*>(buf[coef]) + r.begin * kGroupSize;
    a.kept = static_cast<uint32_t*>(buf[kept]) + r.begin;
    return reinterpret_cast<decltype(&kx_cuda_sparse_up_gate)>(fn)(&a, stream);
  };
  // coef = act(g)·u of two n_embd-term dot products (|u|, |act(g)| up to ~2 each). A neuron
  // at the cut's edge could flip between kept and dropped only if g moved across it: the two
  // sides compute the same sums in the same order, so this does not happen in practice.
  c.tol = DotTolerance(m.n_embd, kWeightScale * kActScale, 4.0);
  c.n_rows = n_listed;
  c.emu_rows = config.small ? 1 : 16;  // 256 emulated threads per 4 neurons: slow
  c.bytes_moved = rows_read * (arena.up_row_bytes + arena.gate_row_bytes) +
                  static_cast<uint64_t>(n_listed) * (kGroupSize * 4 + 4 + 4 + 4) +
                  static_cast<uint64_t>(m.n_embd) * 4;
  cases->push_back(std::move(c));
}

// ---- sparse_down_blocks / sparse_down_rows ------------------------------------------------------

// y += the listed groups' down projection. Blocks: the default layout for a Q4_1 ffn_down
// (SmolLM2; Qwen's shapes run it as if its ffn_down were Q4_1). Rows: down_t rows in Q8_0
// (what bundle.h widens 4-6-bit ffn_down types to).
void AddSparseDown(const CaseConfig& config, std::mt19937_64& rng, DownLayout layout,
                   std::vector<Case>* cases) {
  const ModelShapes& m = config.model;
  const bool blocks = layout == DownLayout::kBlocks;
  const int32_t down_type = blocks ? kTypeQ4_1 : kTypeQ8_0;
  const Arena arena = MakeArena(rng, m, m.weight_type, m.weight_type, layout, down_type);
  const int64_t n_groups = m.n_ff / kGroupSize;
  const std::vector<int32_t> slots = ListedSlots(rng, n_groups);
  const int64_t n_listed = static_cast<int64_t>(slots.size());
  const std::vector<float> coef_v = SparseCoefficients(rng, n_listed);
  uint64_t nonzero = 0;
  uint64_t groups_read = 0;
  for (int64_t i = 0; i < n_listed; ++i) {
    uint64_t in_group = 0;
    for (int64_t j = 0; j < kGroupSize; ++j) in_group += coef_v[i * kGroupSize + j] != 0.0f;
    nonzero += in_group;
    groups_read += in_group > 0;
  }
  const uint64_t ws_bytes =
      blocks ? kx_cuda_sparse_down_blocks_workspace_bytes(m.n_embd, n_listed)
             : kx_cuda_sparse_down_rows_workspace_bytes(m.n_embd, n_listed, kGroupSize);

  Case c;
  c.op = blocks ? "sparse_down_blocks" : "sparse_down_rows";
  c.shape = GroupsShape(n_listed, n_groups, m.n_embd);
  c.type = TypeName(down_type);
  const int ar = AddBuffer(&c, "arena", Role::kInput, Elem::kU8, arena.bytes);
  const int sl = AddBuffer(&c, "slots", Role::kInput, Elem::kI32, AsBytes(slots));
  const int co = AddBuffer(&c, "coef", Role::kInput, Elem::kF32, AsBytes(coef_v));
  const int ws = AddBuffer(&c, "workspace", Role::kInput, Elem::kU8,
                           std::vector<uint8_t>(static_cast<size_t>(ws_bytes)));
  const int y =
      AddBuffer(&c, "y", Role::kInOut, Elem::kF32, AsBytes(RandomFloats(rng, m.n_embd, kActScale)));
  const uint64_t stride = arena.slot_stride;
  const uint64_t down_offset = arena.down_offset;
  const int64_t n_embd = m.n_embd;
  c.launch = [=](void* fn, void* const* buf, RowWindow, void* stream) {
    if (blocks) {
      kx_cuda_sparse_down_blocks_args a{};
      a.struct_size = sizeof a;
      a.arena = static_cast<const uint8_t*>(buf[ar]);
      a.slot_stride = stride;
      a.down_offset = down_offset;
      a.slots = static_cast<const int32_t*>(buf[sl]);
      a.n_listed = n_listed;
      a.n_embd = n_embd;
      a.coef = static_cast<const float*>(buf[co]);
      a.y = static_cast<float*>(buf[y]);
      a.workspace = ws_bytes > 0 ? buf[ws] : nullptr;
      a.workspace_bytes = ws_bytes;
      return reinterpret_cast<decltype(&kx_cuda_sparse_down_blocks)>(fn)(&a, stream);
    }
    kx_cuda_sparse_down_rows_args a{};
    a.struct_size = sizeof a;
    a.arena = static_cast<const uint8_t*>(buf[ar]);
    a.slot_stride = stride;
    a.down_offset = down_offset;
    a.slots = static_cast<const int32_t*>(buf[sl]);
    a.n_listed = n_listed;
    a.group_size = kGroupSize;
    a.down_type = down_type;
    a.n_embd = n_embd;
    a.coef = static_cast<const float*>(buf[co]);
    a.y = static_cast<float*>(buf[y]);
    a.workspace = ws_bytes > 0 ? buf[ws] : nullptr;
    a.workspace_bytes = ws_bytes;
    return reinterpret_cast<decltype(&kx_cuda_sparse_down_rows)>(fn)(&a, stream);
  };
  // Deterministic chunked sums (the same order on both sides) of n_listed·GS products.
  c.tol = DotTolerance(n_listed * kGroupSize, kWeightScale * kCoeffScale, 2.0);
  const uint64_t chunks = ws_bytes > 0 ? ws_bytes / (static_cast<uint64_t>(m.n_embd) * 4) : 0;
  c.bytes_moved = (blocks ? groups_read * static_cast<uint64_t>(m.n_embd) * 20
                          : nonzero * arena.down_row_bytes) +
                  static_cast<uint64_t>(n_listed) * kGroupSize * 4 +
                  static_cast<uint64_t>(m.n_embd) * 8 * (1 + chunks);
  cases->push_back(std::move(c));
}

// ---- sparse_ffn_merge ------------------------------------------------------------------------

// The hybrid FFN's merge for one decode token: residual + (GPU half + CPU half).
void AddMerge(const ModelShapes& m, std::mt19937_64& rng, std::vector<Case>* cases) {
  const int64_t n = m.n_embd;
  Case c;
  c.op = "sparse_ffn_merge";
  c.shape = std::to_string(n);
  c.type = "f32";
  const int res =
      AddBuffer(&c, "residual", Role::kInput, Elem::kF32, AsBytes(RandomFloats(rng, n, kActScale)));
  const int dev = AddBuffer(&c, "device_partial", Role::kInput, Elem::kF32,
                            AsBytes(RandomFloats(rng, n, kActScale)));
  const int host = AddBuffer(&c, "host_partial", Role::kInput, Elem::kF32,
                             AsBytes(RandomFloats(rng, n, kActScale)));
  const int dst = AddOutput(&c, "dst", Elem::kF32, n);
  c.launch = [=](void* fn, void* const* buf, RowWindow, void* stream) {
    kx_cuda_sparse_ffn_merge_args a{};
    a.struct_size = sizeof a;
    a.n = n;
    a.residual = static_cast<const float*>(buf[res]);
    a.device_partial = static_cast<const float*>(buf[dev]);
    a.host_partial = static_cast<const float*>(buf[host]);
    a.dst = static_cast<float*>(buf[dst]);
    return reinterpret_cast<decltype(&kx_cuda_sparse_ffn_merge)>(fn)(&a, stream);
  };
  c.tol = Tolerance{0.0, 0.0};  // two float adds in a fixed order: exact
  c.bytes_moved = static_cast<uint64_t>(n) * 4 * 4;
  cases->push_back(std::move(c));
}

// ---- axpy_rows_f16 ----------------------------------------------------------------------------

// dst[j] += Σ_k coeff[k]·w[rows[k]][j] over a quarter of the FFN's down_t rows.
void AddAxpyRows(const ModelShapes& m, std::mt19937_64& rng, std::vector<Case>* cases) {
  const int64_t n_rows = m.n_ff;
  const int64_t n_cols = m.n_embd;
  const int64_t n_active = n_rows / kActiveDivisor;
  std::vector<int32_t> rows(static_cast<size_t>(n_rows));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(static_cast<size_t>(n_active));

  Case c;
  c.op = "axpy_rows_f16";
  c.shape =
      std::to_string(n_active) + "/" + std::to_string(n_rows) + " rows x " + std::to_string(n_cols);
  c.type = "f16";
  const int w = AddBuffer(&c, "w", Role::kInput, Elem::kF16,
                          AsBytes(RandomHalves(rng, n_rows * n_cols, kWeightScale)));
  const int r = AddBuffer(&c, "rows", Role::kInput, Elem::kI32, AsBytes(rows));
  const int k = AddBuffer(&c, "coeff", Role::kInput, Elem::kF32,
                          AsBytes(RandomFloats(rng, n_active, kCoeffScale)));
  const int d = AddBuffer(&c, "dst", Role::kInOut, Elem::kF32,
                          AsBytes(RandomFloats(rng, n_cols, kCoeffScale)));
  c.launch = [=](void* fn, void* const* buf, RowWindow, void* stream) {
    kx_cuda_axpy_rows_f16_args a{};
    a.struct_size = sizeof a;
    a.w = static_cast<const uint16_t*>(buf[w]);
    a.n_rows = n_rows;
    a.n_cols = n_cols;
    a.w_row_stride = n_cols;
    a.rows = static_cast<const int32_t*>(buf[r]);
    a.coeff = static_cast<const float*>(buf[k]);
    a.n_active = n_active;
    a.dst = static_cast<float*>(buf[d]);
    return reinterpret_cast<decltype(&kx_cuda_axpy_rows_f16)>(fn)(&a, stream);
  };
  // Float atomics: the summation order differs between runs and between grids (the row
  // split follows the SM count).
  c.tol = DotTolerance(n_active, kWeightScale * kCoeffScale);
  c.bytes_moved = static_cast<uint64_t>(n_active) * (n_cols * 2 + 4 + 4) +
                  static_cast<uint64_t>(n_cols) * 4 * 2;
  cases->push_back(std::move(c));
}

}  // namespace

void AddSparseCases(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  AddSparseUpGate(config, rng, cases);
  AddSparseDown(config, rng, DownLayout::kBlocks, cases);
  AddSparseDown(config, rng, DownLayout::kRows, cases);
  AddMerge(config.model, rng, cases);
  AddAxpyRows(config.model, rng, cases);
}

}  // namespace kx::gpu_check
