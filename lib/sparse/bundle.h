// Neuron bundles: the sparse FFN's weight layout. The n_ff neurons of one
// layer are permuted into groups of GS neurons (GS ∈ {4, 8, 16, 32}); group
// g's weights are one contiguous bundle
//   [GS rows of ffn_up][GS rows of ffn_gate][GS rows of ffn_down_t]
// so one read (from RAM, disk or over PCIe) brings everything a group needs.
// up/gate rows are ffn_up/ffn_gate rows (n_embd elements, the model's
// types); down_t rows are columns of ffn_down (stored as n_embd rows of n_ff
// elements) re-quantized to down_type. Bundles sit bundle_stride bytes
// apart (bundle_bytes rounded up to a cache line).
//
//   KX_ASSIGN_OR_RETURN(BundleLayout layout,
//                       MakeBundleLayout(n_embd, n_ff, 16, up.type, gate.type,
//                                        DefaultDownType(down.type, n_embd)));
//   std::vector<uint8_t> bundles(layout.n_groups * layout.bundle_stride);
//   KX_RETURN_IF_ERROR(PackBundles(up, gate, down, perm, layout, bundles.data()));
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "sparse/activity.h"
#include "model/llama.h"
#include "tensor/dtype.h"

namespace kx::sparse {

// kMaxGroupsPerLayer: sparse/activity.h
inline constexpr uint64_t kBundleAlign = 64;  // bytes: one cache line

struct BundleLayout {
  int group_size = 0;  // GS: neurons per group
  int n_groups = 0;    // n_ff / GS
  int64_t n_embd = 0;
  GgmlType up_type = GgmlType::kF32, gate_type = GgmlType::kF32, down_type = GgmlType::kF32;
  uint64_t up_row_bytes = 0, gate_row_bytes = 0, down_row_bytes = 0;
  uint64_t bundle_bytes = 0;   // GS·(up + gate + down row bytes)
  uint64_t bundle_stride = 0;  // bundle_bytes rounded up to kBundleAlign

  // Byte offsets inside a bundle (up rows start at 0).
  uint64_t gate_offset() const { return up_row_bytes * static_cast<uint64_t>(group_size); }
  uint64_t down_offset() const {
    return gate_offset() + gate_row_bytes * static_cast<uint64_t>(group_size);
  }
};

// Validates the shape and types: GS ∈ {4, 8, 16, 32}, n_ff % GS == 0,
// n_ff / GS ≤ kMaxGroupsPerLayer, up/gate types the CPU kernels compute with,
// a down type QuantizeRow writes, n_embd whole blocks of each type.
absl::StatusOr<BundleLayout> MakeBundleLayout(int64_t n_embd, int64_t n_ff, int group_size,
                                              GgmlType up, GgmlType gate, GgmlType down);

// The down_t type for a model whose ffn_down is `model_down_type`: that type
// when it is 8-bit or float (Q8_0, F16, BF16, F32) and n_embd is whole blocks
// of it; otherwise Q8_0 (F16 when n_embd is not whole 32-blocks either):
// re-quantizing a 4/5-bit type along the other axis doubles its rounding error.
GgmlType DefaultDownType(GgmlType model_down_type, int64_t n_embd);

// Writes all n_groups bundles to dst (n_groups·bundle_stride bytes). perm has
// n_ff entries, group-major: slot j of bundle g holds neuron perm[g·GS + j].
// up/gate are {n_embd → n_ff} WeightRefs of layout's types; down is
// {n_ff → n_embd}, any type the kernels dequantize. Padding bytes are zero.
// Errors: perm not a permutation of [0, n_ff), shapes or types that do not
// match the layout.
absl::Status PackBundles(const WeightRef& up, const WeightRef& gate, const WeightRef& down,
                         const std::vector<int32_t>& perm, const BundleLayout& layout,
                         uint8_t* dst);

}  // namespace kx::sparse
