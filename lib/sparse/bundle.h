// Neuron bundles: the sparse FFN's weight layout. The n_ff neurons of one
// layer are permuted into groups of GS neurons (GS ∈ {4, 8, 16, 32}); group
// g's weights are one contiguous bundle
//   [GS rows of ffn_up][GS rows of ffn_gate][the group's share of ffn_down]
// so one read (from RAM, disk or over PCIe) brings everything a group needs.
// up/gate rows are ffn_up/ffn_gate rows (n_embd elements, the model's
// types). ffn_down is stored as n_embd rows of n_ff elements, quantized
// along n_ff, so a group's share of it comes in one of two layouts:
//  - kRows: GS rows of ffn_down_t, the group's columns of ffn_down
//    re-quantized to down_type (any grouping; a second rounding error).
//  - kBlocks: the group is one quant block of ffn_down's columns (GS = 32
//    consecutive neurons, perm maps block to block), kept in the model's own
//    quantization, as kernels/cpu/down_blocks.h arranges it: no re-
//    quantization and no extra bytes (Q4_1 models).
// Bundles sit bundle_stride bytes apart (bundle_bytes rounded up to a cache line).
//
//   KX_ASSIGN_OR_RETURN(BundleLayout layout,
//                       MakeBundleLayout(n_embd, n_ff, 16, up.type, gate.type,
//                                        DefaultDownType(down.type, n_embd)));
//   std::vector<uint8_t> bundles(layout.n_groups * layout.bundle_stride);
//   KX_RETURN_IF_ERROR(PackBundles(up, gate, down, perm, layout, bundles.data()));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "sparse/activity.h"
#include "model/llama.h"
#include "tensor/dtype.h"

namespace kx::sparse {

// kMaxGroupsPerLayer: sparse/activity.h
inline constexpr uint64_t kBundleAlign = 64;  // bytes: one cache line

enum class DownLayout { kRows, kBlocks };
const char* DownLayoutName(DownLayout d);  // "rows", "blocks"

struct BundleLayout {
  DownLayout down = DownLayout::kRows;
  int group_size = 0;  // GS: neurons per group
  int n_groups = 0;    // n_ff / GS
  int64_t n_embd = 0;
  GgmlType up_type = GgmlType::kF32, gate_type = GgmlType::kF32, down_type = GgmlType::kF32;
  // down_row_bytes: one ffn_down_t row (kRows; 0 for kBlocks).
  uint64_t up_row_bytes = 0, gate_row_bytes = 0, down_row_bytes = 0;
  uint64_t down_bytes = 0;     // the group's share of ffn_down (kRows: GS·down_row_bytes)
  uint64_t bundle_bytes = 0;   // GS·(up + gate row bytes) + down_bytes
  uint64_t bundle_stride = 0;  // bundle_bytes rounded up to kBundleAlign

  // Byte offsets inside a bundle (up rows start at 0).
  uint64_t gate_offset() const { return up_row_bytes * static_cast<uint64_t>(group_size); }
  uint64_t down_offset() const {
    return gate_offset() + gate_row_bytes * static_cast<uint64_t>(group_size);
  }
};

// Validates the shape and types: GS ∈ {4, 8, 16, 32}, n_ff % GS == 0,
// n_ff / GS ≤ kMaxGroupsPerLayer, up/gate types the CPU kernels compute with,
// a down type QuantizeRow writes, n_embd whole blocks of each type. kBlocks
// also needs GS = 32 and cpu::HasDownBlocksLayout(down, n_embd), down being
// the model's ffn_down type.
absl::StatusOr<BundleLayout> MakeBundleLayout(int64_t n_embd, int64_t n_ff, int group_size,
                                              GgmlType up, GgmlType gate, GgmlType down,
                                              DownLayout down_layout = DownLayout::kRows);

// Whether a model whose ffn_down is `model_down_type` can use kBlocks.
bool CanUseDownBlocks(GgmlType model_down_type, int64_t n_embd, int64_t n_ff);

// A permutation kBlocks bundles take: each group one block of 32
// consecutive neurons, in order inside it. Blocks are ordered by their summed
// `activity` (one value per neuron, e.g. calibration frequency), descending,
// ties to the lower block, as the other groupings order their groups: a
// budget's least-used groups then sit together at the end of the layer and
// are read in few runs. Empty `activity`: the identity.
std::vector<int32_t> BlockPermutation(int64_t n_ff, std::span<const double> activity = {});

// Whether perm (n_ff entries, group-major) makes every group of gs slots one
// block of gs consecutive neurons, in order: what kBlocks bundles need. If
// not, *bad_slot (when given) is the first slot that breaks it.
bool IsBlockPermutation(std::span<const int32_t> perm, int gs, int64_t* bad_slot = nullptr);

// Element e of neuron slot j's down column in a bundle (either layout),
// dequantized into out[0 .. n_embd): the weights the kernels multiply with.
void DequantizeDownColumn(const BundleLayout& l, const uint8_t* bundle, int j, float* out);

// The down_t type for a model whose ffn_down is `model_down_type`: that type
// when it is 8-bit or float (Q8_0, F16, BF16, F32) and n_embd is whole blocks
// of it; otherwise Q8_0 (F16 when n_embd is not whole 32-blocks either):
// re-quantizing a 4/5-bit type along the other axis doubles its rounding error.
GgmlType DefaultDownType(GgmlType model_down_type, int64_t n_embd);

// Writes all n_groups bundles to dst (n_groups·bundle_stride bytes). perm has
// n_ff entries, group-major: slot j of bundle g holds neuron perm[g·GS + j].
// up/gate are {n_embd → n_ff} WeightRefs of layout's types; down is
// {n_ff → n_embd}, any type the kernels dequantize (kBlocks: down_type).
// Padding bytes are zero. Errors: perm not a permutation of [0, n_ff) (for
// kBlocks: not block to block, in order inside each block), shapes or types
// that do not match the layout.
absl::Status PackBundles(const WeightRef& up, const WeightRef& gate, const WeightRef& down,
                         const std::vector<int32_t>& perm, const BundleLayout& layout,
                         uint8_t* dst);

}  // namespace kx::sparse
