// The sim device's sparse FFN ops: sparse_up_gate, sparse_down_blocks, sparse_down_rows and
// sparse_ffn_merge, with the contracts of kernels/cuda/<op>.cuh, over bundles that sit in
// device slots (arena + slots[i]·slot_stride), so the split FFN (hot groups on the device,
// the rest on the CPU, merged on the device) runs on sim as it will on cuda.
//
// Arithmetic: the contracts' float math, not the CPU kernels' (the GPU does not quantize x or
// coef to 16 bits). Rows are dequantized by the kernel table (what SparseFfnReference reads)
// and every dot product and down-projection chunk is summed in double, then rounded once to
// float; the down ops keep the GPU's fixed chunks (GROUPS_PER_CHUNK groups, ROWS_PER_CHUNK
// neuron slots), write the chunk partials to the caller's workspace and add them to y in
// chunk order, as sparse_down_common.cuh does. So the results are deterministic and within
// the emulated kernels' own rounding bounds of them (tests/device/test_sim_sparse_ops.cc).
//
// Checks: the launchers' argument checks (types, shapes, alignment, workspace size), so a
// call sim accepts is one the module accepts; then every range the op reads or writes must be
// live device memory (SimMemory), the slot list and masks checked before they are read and
// each listed group's bundle part (arena + slot·stride + the bytes the op may read) before
// any output is written. A bad slot is an error here; on a GPU it would read garbage or fault.
//
// Layering: lib/device sits below lib/sparse, so bundle offsets come from the args and the
// type table (tensor/dtype.h, as sparse/bundle.h computes them), not from BundleLayout.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/sim_ops.h"
#include "kernels/cpu/down_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/sparse_down_blocks.cuh"
#include "kernels/cuda/sparse_down_rows.cuh"
#include "kernels/cuda/sparse_ffn_merge.cuh"
#include "kernels/cuda/sparse_up_gate.cuh"
#include "model/llama_ffn_activation.h"
#include "tensor/dtype.h"

namespace kx {
namespace {

constexpr uint64_t kF32 = sizeof(float);
constexpr uint64_t kWord = sizeof(uint32_t);
constexpr uint64_t kArenaAlign = 16;  // arena, x, coef; slot_stride a multiple of it
constexpr uint32_t kNoTypeAlign = 0;
// The launchers' grid limits: more work is refused (which also keeps byte counts far from
// overflowing). sparse_up_gate runs a block per 4 neurons, the down ops a grid row per chunk.
constexpr int64_t kMaxUpGateBlocks = 0x7fffffff;
constexpr int64_t kUpGateNeuronsPerBlock = 4;
constexpr int64_t kMaxChunks = 65535;

absl::Status Invalid(std::string_view op, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(absl::string_view(op.data(), op.size()), ": ",
                                                 absl::string_view(what.data(), what.size())));
}

template <typename Args>
absl::Status CheckStruct(const void* raw, std::string_view op) {
  if (static_cast<const Args*>(raw)->struct_size < sizeof(Args)) {
    return Invalid(op, "args->struct_size is too small");
  }
  return absl::OkStatus();
}

bool Aligned(const void* p, uint64_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

bool ValidGroupSize(int32_t gs) { return gs == 4 || gs == 8 || gs == 16 || gs == 32; }

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (null b: never).
bool Overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  if (a == nullptr || b == nullptr) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// The byte alignment kernels/cuda/quant_decode.cuh's decoder for `type` needs of a row's start
// and of row_bytes (its CheckRows; float rows element by element when not 16-byte multiples),
// or kNoTypeAlign for a type the CUDA decoders do not read. The sim reads any alignment; it
// refuses what the module refuses.
uint32_t DecoderAlign(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ6_K:
      return 2;
    case GgmlType::kQ4_1:
      return 4;
    case GgmlType::kQ5_1:
      return 8;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return 16;
    default:
      return kNoTypeAlign;
  }
}

bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

// Rows of n elements of ggml type `type_id` starting `first` bytes into a 16-byte aligned
// bundle, back to back: their bytes and the kernel that dequantizes them. As the module:
// InvalidArgument for an id that is no ggml type, Unimplemented for a type the CUDA decoders
// (or, with k_quants false, the down_t decoders) do not read.
struct Rows {
  uint64_t row_bytes = 0;
  const cpu::TypeKernels* kernels = nullptr;
};
absl::StatusOr<Rows> PickRows(std::string_view op, std::string_view arg, int32_t type_id, int64_t n,
                              uint64_t first, bool k_quants) {
  const auto type = static_cast<GgmlType>(type_id);
  if (type_id < 0 || FindTypeInfo(static_cast<uint32_t>(type_id)) == nullptr) {
    return Invalid(op, absl::StrCat(absl::string_view(arg.data(), arg.size()), " ", type_id,
                                    " is not a ggml type"));
  }
  const uint32_t align = DecoderAlign(type);
  const cpu::TypeKernels* tk = align != kNoTypeAlign ? cpu::Kernels().For(type) : nullptr;
  if (tk == nullptr || (!k_quants && IsKQuant(type))) {
    return absl::UnimplementedError(absl::StrCat(
        absl::string_view(op.data(), op.size()), ": ", absl::string_view(arg.data(), arg.size()),
        " ", type_id, " (", TypeName(type), ") is not a type this op decodes"));
  }
  absl::StatusOr<uint64_t> bytes = TypeBytes(type, n);
  if (!bytes.ok()) {
    return Invalid(op,
                   absl::StrCat("n_embd = ", n, " is not whole blocks of ",
                                absl::string_view(arg.data(), arg.size()), " ", TypeName(type)));
  }
  if (first % align != 0 || *bytes % align != 0) {
    return Invalid(
        op, absl::StrCat(TypeName(type), " rows must start at multiples of ", align, " bytes"));
  }
  return Rows{*bytes, tk};
}

// Checks slots[0 .. n) and, for each listed group, that its bundle's first `part_bytes` bytes
// from `part_offset` (arena + slot·stride + part_offset) are live device memory: the slot
// list's own range first, then the values read from it.
absl::Status CheckSlots(std::string_view op, const SimMemory& mem, const uint8_t* arena,
                        uint64_t slot_stride, const int32_t* slots, int64_t n, uint64_t part_offset,
                        uint64_t part_bytes) {
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(op, "slots", slots, static_cast<uint64_t>(n) * kWord));
  const auto base = reinterpret_cast<uintptr_t>(arena);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = slots[i];
    const std::string arg = absl::StrCat("the bundle of slots[", i, "] = ", slot);
    if (slot < 0) return Invalid(op, absl::StrCat(arg, ": a negative slot"));
    const auto s = static_cast<uint64_t>(slot);
    uint64_t offset = 0, addr = 0;
    if (__builtin_mul_overflow(s, slot_stride, &offset) ||
        __builtin_add_overflow(offset, part_offset, &offset) ||
        __builtin_add_overflow(static_cast<uint64_t>(base), offset, &addr)) {
      return Invalid(op, absl::StrCat(arg, ": its address overflows"));
    }
    KX_RETURN_IF_ERROR(
        mem.CheckDeviceRange(op, arg, reinterpret_cast<const void*>(addr), part_bytes));
  }
  return absl::OkStatus();
}

const uint8_t* Bundle(const uint8_t* arena, uint64_t slot_stride, int32_t slot) {
  return arena + static_cast<uint64_t>(slot) * slot_stride;
}

double DotF64(const float* w, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t e = 0; e < n; ++e) s += static_cast<double>(w[e]) * x[e];
  return s;
}

// ---- sparse_up_gate --------------------------------------------------------------------------

absl::Status RunSparseUpGate(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "sparse_up_gate";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_sparse_up_gate_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_sparse_up_gate_args*>(raw);
  if (a->n_listed < 0) return Invalid(kOp, "n_listed < 0");
  if (a->n_listed == 0) return absl::OkStatus();
  const int32_t gs = a->group_size;
  if (!ValidGroupSize(gs)) return Invalid(kOp, "group_size must be 4, 8, 16 or 32");
  if (a->n_listed > kMaxUpGateBlocks / (gs / kUpGateNeuronsPerBlock)) {
    return Invalid(kOp, "too many listed groups");
  }
  if (a->arena == nullptr || a->slots == nullptr || a->x == nullptr || a->coef == nullptr) {
    return Invalid(kOp, "arena, slots, x and coef must be non-NULL");
  }
  if (!Aligned(a->arena, kArenaAlign) || a->slot_stride % kArenaAlign != 0 ||
      !Aligned(a->x, kArenaAlign)) {
    return Invalid(kOp, "arena and x must be 16-byte aligned, slot_stride a multiple of 16");
  }
  if (a->activation < KX_CUDA_FFN_ACT_SILU || a->activation > KX_CUDA_FFN_ACT_DRELU) {
    return Invalid(kOp, "unknown activation");
  }
  if (a->n_embd <= 0) return Invalid(kOp, "n_embd must be positive");
  const int64_t n = a->n_embd;
  KX_ASSIGN_OR_RETURN(const Rows up, PickRows(kOp, "up_type", a->up_type, n, 0, true));
  const uint64_t gate_offset = static_cast<uint64_t>(gs) * up.row_bytes;
  KX_ASSIGN_OR_RETURN(const Rows gate,
                      PickRows(kOp, "gate_type", a->gate_type, n, gate_offset, true));

  const auto n_listed = static_cast<uint64_t>(a->n_listed);
  const uint64_t n_coef = n_listed * static_cast<uint64_t>(gs);
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "x", a->x, static_cast<uint64_t>(n) * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "coef", a->coef, n_coef * kF32));
  if (a->masks != nullptr) {
    KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "masks", a->masks, n_listed * kWord));
  }
  if (a->kept != nullptr) {
    KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "kept", a->kept, n_listed * kWord));
  }
  const uint64_t part_bytes = gate_offset + static_cast<uint64_t>(gs) * gate.row_bytes;
  KX_RETURN_IF_ERROR(
      CheckSlots(kOp, mem, a->arena, a->slot_stride, a->slots, a->n_listed, 0, part_bytes));

  const auto act = static_cast<FfnActivation>(a->activation);
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < a->n_listed; ++i) {
    const uint8_t* bundle = Bundle(a->arena, a->slot_stride, a->slots[i]);
    const uint32_t predicted = a->masks != nullptr ? a->masks[i] : ~0u;
    uint32_t kept = 0;
    for (int j = 0; j < gs; ++j) {
      float c = 0.0f;
      if ((predicted >> j) & 1u) {  // unpredicted rows are not read
        up.kernels->dequantize(bundle + static_cast<uint64_t>(j) * up.row_bytes, w.data(), n);
        const auto u = static_cast<float>(DotF64(w.data(), a->x, n));
        gate.kernels->dequantize(bundle + gate_offset + static_cast<uint64_t>(j) * gate.row_bytes,
                                 w.data(), n);
        const auto g = static_cast<float>(DotF64(w.data(), a->x, n));
        const float av = ActivatedValue(act, a->act_threshold, g, u);
        if (std::fabs(av) > a->threshold) {
          c = av * u;
          kept |= 1u << j;
        }
      }
      a->coef[static_cast<uint64_t>(i) * gs + j] = c;
    }
    if (a->kept != nullptr) a->kept[i] = kept;  // bits >= GS stay 0
  }
  return absl::OkStatus();
}

// ---- the down projections --------------------------------------------------------------------

// y[e] += Σ_c partial_c[e] for e < n, the chunks' partials summed in chunk order in float
// (sparse_down_common.cuh SumPartials). `chunk(c, acc)` adds chunk c's terms to acc (double,
// zeroed), which is rounded to float once: the partial. One chunk adds straight into y; more
// write their partials to the workspace first (its contract: contents undefined after).
template <typename ChunkFn>
void ReduceChunks(int64_t n_chunks, int64_t n, float* workspace, float* y, ChunkFn chunk) {
  std::vector<double> acc(static_cast<size_t>(n));
  if (n_chunks == 1) {
    chunk(0, acc.data());
    for (int64_t e = 0; e < n; ++e) y[e] += static_cast<float>(acc[static_cast<size_t>(e)]);
    return;
  }
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::fill(acc.begin(), acc.end(), 0.0);
    chunk(c, acc.data());
    float* partial = workspace + c * n;
    for (int64_t e = 0; e < n; ++e) partial[e] = static_cast<float>(acc[static_cast<size_t>(e)]);
  }
  for (int64_t e = 0; e < n; ++e) {
    float s = workspace[e];
    for (int64_t c = 1; c < n_chunks; ++c) s += workspace[c * n + e];
    y[e] += s;
  }
}

// The workspace and output checks both down ops share: the workspace's size and alignment (the
// launchers'), and the ranges of coef, y and the `need` workspace bytes; y may overlap none.
absl::Status CheckDownBuffers(std::string_view op, const SimMemory& mem, const float* coef,
                              uint64_t coef_bytes, const int32_t* slots, uint64_t slots_bytes,
                              float* y, int64_t n_embd, const void* workspace,
                              uint64_t workspace_bytes, uint64_t need) {
  if (need != 0 && (workspace == nullptr || workspace_bytes < need || !Aligned(workspace, 4))) {
    return Invalid(op, absl::StrCat("workspace is NULL, misaligned or smaller than the ", need,
                                    " bytes kx_cuda_", absl::string_view(op.data(), op.size()),
                                    "_workspace_bytes() asks for"));
  }
  const uint64_t y_bytes = static_cast<uint64_t>(n_embd) * kF32;
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(op, "coef", coef, coef_bytes));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(op, "y", y, y_bytes));
  if (need != 0) KX_RETURN_IF_ERROR(mem.CheckDeviceRange(op, "workspace", workspace, need));
  if (Overlap(y, y_bytes, coef, coef_bytes) || Overlap(y, y_bytes, slots, slots_bytes) ||
      (need != 0 && Overlap(y, y_bytes, workspace, need))) {
    return Invalid(op, "y overlaps coef, slots or the workspace");
  }
  return absl::OkStatus();
}

absl::Status RunSparseDownBlocks(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "sparse_down_blocks";
  constexpr int kGroup = KX_CUDA_SPARSE_DOWN_BLOCKS_GROUP_SIZE;
  constexpr int64_t kPerChunk = KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK;
  static_assert(kGroup == cpu::kDownBlocksGroup, "a down-blocks group is one Q4_1 block");
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_sparse_down_blocks_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_sparse_down_blocks_args*>(raw);
  if (a->n_listed < 0) return Invalid(kOp, "n_listed < 0");
  if (a->n_listed == 0) return absl::OkStatus();
  const int64_t n = a->n_embd;
  if (!cpu::HasDownBlocksLayout(GgmlType::kQ4_1, n)) {
    return Invalid(kOp, "n_embd must be a positive multiple of 16");
  }
  if (a->arena == nullptr || a->slots == nullptr || a->coef == nullptr || a->y == nullptr) {
    return Invalid(kOp, "arena, slots, coef and y must be non-NULL");
  }
  if (!Aligned(a->arena, kArenaAlign) || a->slot_stride % kArenaAlign != 0 ||
      !Aligned(a->coef, kArenaAlign) || a->down_offset % 2 != 0) {
    return Invalid(kOp,
                   "arena and coef must be 16-byte aligned, slot_stride a multiple of 16, "
                   "down_offset even");
  }
  const int64_t n_chunks = (a->n_listed + kPerChunk - 1) / kPerChunk;
  if (n_chunks > kMaxChunks) return Invalid(kOp, "too many groups");
  const auto n_listed = static_cast<uint64_t>(a->n_listed);
  const uint64_t need = kx_cuda_sparse_down_blocks_workspace_bytes(n, a->n_listed);
  KX_RETURN_IF_ERROR(CheckDownBuffers(kOp, mem, a->coef, n_listed * kGroup * kF32, a->slots,
                                      n_listed * kWord, a->y, n, a->workspace, a->workspace_bytes,
                                      need));
  const uint64_t part_bytes = cpu::DownBlocksBytes(GgmlType::kQ4_1, n);
  KX_RETURN_IF_ERROR(CheckSlots(kOp, mem, a->arena, a->slot_stride, a->slots, a->n_listed,
                                a->down_offset, part_bytes));

  ReduceChunks(n_chunks, n, static_cast<float*>(a->workspace), a->y, [&](int64_t c, double* acc) {
    const int64_t end = std::min(a->n_listed, (c + 1) * kPerChunk);
    for (int64_t i = c * kPerChunk; i < end; ++i) {
      const float* coef = a->coef + i * kGroup;
      bool any = false;
      for (int j = 0; j < kGroup; ++j) any = any || coef[j] != 0.0f;
      if (!any) continue;  // the threshold cut the whole group: its part is not read
      const uint8_t* part = Bundle(a->arena, a->slot_stride, a->slots[i]) + a->down_offset;
      for (int64_t e = 0; e < n; ++e) {
        double s = 0.0;
        for (int j = 0; j < kGroup; ++j) {
          s += double{coef[j]} * cpu::DownBlocksAt(GgmlType::kQ4_1, part, e, j);
        }
        acc[e] += s;
      }
    }
  });
  return absl::OkStatus();
}

absl::Status RunSparseDownRows(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "sparse_down_rows";
  constexpr int64_t kPerChunk = KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK;
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_sparse_down_rows_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_sparse_down_rows_args*>(raw);
  if (a->n_listed < 0) return Invalid(kOp, "n_listed < 0");
  if (a->n_listed == 0) return absl::OkStatus();
  const int32_t gs = a->group_size;
  if (!ValidGroupSize(gs)) return Invalid(kOp, "group_size must be 4, 8, 16 or 32");
  if (a->arena == nullptr || a->slots == nullptr || a->coef == nullptr || a->y == nullptr) {
    return Invalid(kOp, "arena, slots, coef and y must be non-NULL");
  }
  if (!Aligned(a->arena, kArenaAlign) || a->slot_stride % kArenaAlign != 0) {
    return Invalid(kOp, "arena must be 16-byte aligned, slot_stride a multiple of 16");
  }
  const int64_t n = a->n_embd;
  if (n <= 0) return Invalid(kOp, "n_embd must be positive");
  KX_ASSIGN_OR_RETURN(const Rows down,
                      PickRows(kOp, "down_type", a->down_type, n, a->down_offset, false));
  const auto n_listed = static_cast<uint64_t>(a->n_listed);
  if (a->n_listed > kMaxChunks * kPerChunk / gs) return Invalid(kOp, "too many groups");
  const int64_t n_rows = a->n_listed * gs;
  const int64_t n_chunks = (n_rows + kPerChunk - 1) / kPerChunk;
  const uint64_t need = kx_cuda_sparse_down_rows_workspace_bytes(n, a->n_listed, gs);
  KX_RETURN_IF_ERROR(CheckDownBuffers(kOp, mem, a->coef, static_cast<uint64_t>(n_rows) * kF32,
                                      a->slots, n_listed * kWord, a->y, n, a->workspace,
                                      a->workspace_bytes, need));
  KX_RETURN_IF_ERROR(CheckSlots(kOp, mem, a->arena, a->slot_stride, a->slots, a->n_listed,
                                a->down_offset, static_cast<uint64_t>(gs) * down.row_bytes));

  std::vector<float> w(static_cast<size_t>(n));
  ReduceChunks(n_chunks, n, static_cast<float*>(a->workspace), a->y, [&](int64_t c, double* acc) {
    const int64_t end = std::min(n_rows, (c + 1) * kPerChunk);
    for (int64_t r = c * kPerChunk; r < end; ++r) {
      const float coef = a->coef[r];
      if (coef == 0.0f) continue;  // not kept or not predicted: the row is not read
      const uint8_t* row = Bundle(a->arena, a->slot_stride, a->slots[r / gs]) + a->down_offset +
                           static_cast<uint64_t>(r % gs) * down.row_bytes;
      down.kernels->dequantize(row, w.data(), n);
      for (int64_t e = 0; e < n; ++e) acc[e] += double{coef} * w[static_cast<size_t>(e)];
    }
  });
  return absl::OkStatus();
}

// ---- sparse_ffn_merge ------------------------------------------------------------------------

absl::Status RunSparseFfnMerge(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "sparse_ffn_merge";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_sparse_ffn_merge_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_sparse_ffn_merge_args*>(raw);
  if (a->n < 0) return Invalid(kOp, "n < 0");
  if (a->n == 0) return absl::OkStatus();
  if (a->dst == nullptr) return Invalid(kOp, "dst is NULL");
  const uint64_t bytes = static_cast<uint64_t>(a->n) * kF32;
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "dst", a->dst, bytes));
  if (a->residual != nullptr) {
    KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "residual", a->residual, bytes));
  }
  if (a->device_partial != nullptr) {
    KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "device_partial", a->device_partial, bytes));
  }
  if (a->host_partial != nullptr) {
    KX_RETURN_IF_ERROR(mem.CheckMappedRange(kOp, "host_partial", a->host_partial, bytes));
  }
  if ((a->residual != a->dst && Overlap(a->dst, bytes, a->residual, bytes)) ||
      Overlap(a->dst, bytes, a->device_partial, bytes) ||
      Overlap(a->dst, bytes, a->host_partial, bytes)) {
    return Invalid(kOp, "dst overlaps an input (only dst == residual is allowed)");
  }
  // The module's Merge: a NULL input is not read and adds nothing, so a lone input passes
  // through exactly (not added to a zero).
  const float* r = a->residual;
  const float* d = a->device_partial;
  const float* h = a->host_partial;
  for (int64_t i = 0; i < a->n; ++i) {
    float ffn = 0.0f;
    if (d != nullptr && h != nullptr) {
      ffn = d[i] + h[i];
    } else if (d != nullptr) {
      ffn = d[i];
    } else if (h != nullptr) {
      ffn = h[i];
    }
    if (r == nullptr) {
      a->dst[i] = ffn;
    } else {
      a->dst[i] = d == nullptr && h == nullptr ? r[i] : r[i] + ffn;
    }
  }
  return absl::OkStatus();
}

constexpr std::array kSparseOps = {
    SimOp{"sparse_up_gate", RunSparseUpGate, sizeof(kx_cuda_sparse_up_gate_args)},
    SimOp{"sparse_down_blocks", RunSparseDownBlocks, sizeof(kx_cuda_sparse_down_blocks_args)},
    SimOp{"sparse_down_rows", RunSparseDownRows, sizeof(kx_cuda_sparse_down_rows_args)},
    SimOp{"sparse_ffn_merge", RunSparseFfnMerge, sizeof(kx_cuda_sparse_ffn_merge_args)},
};

}  // namespace

std::span<const SimOp> SimSparseOps() { return kSparseOps; }

}  // namespace kx
