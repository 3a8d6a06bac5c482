// Bundle layout and packing (bundle.h).
#include "sparse/bundle.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "kernels/cpu/down_blocks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quantize.h"

namespace kx::sparse {
namespace {

// Neurons of ffn_down transposed per pass: bounds the float scratch to
// kSlab·n_embd floats whatever the model size (a multiple of every block size).
constexpr int64_t kSlab = 256;

absl::StatusOr<uint64_t> RowBytesOf(GgmlType type, int64_t n, const char* what) {
  const TypeInfo* known = FindTypeInfo(static_cast<uint32_t>(type));
  if (known == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("bundle layout: ", what, " type id ",
                                                   static_cast<uint32_t>(type),
                                                   " is not a known ggml type"));
  }
  const TypeInfo& info = *known;
  if (n <= 0 || n % info.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bundle layout: n_embd ", n, " is not whole ",
                                                   info.name, " blocks of ", info.block_size,
                                                   " (", what, ")"));
  }
  return static_cast<uint64_t>(n / info.block_size) * static_cast<uint64_t>(info.block_bytes);
}

absl::Status CheckWeight(const WeightRef& w, const char* what, int64_t n_in, int64_t n_out,
                         GgmlType type) {
  if (w.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": no data"));
  if (w.n_in != n_in || w.n_out != n_out) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", w.name, "' is ", w.n_in, "x",
                                                   w.n_out, ", the layout needs ", n_in, "x",
                                                   n_out));
  }
  if (w.type != type) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", w.name, "' is ", TypeName(w.type),
                                                   ", the layout says ", TypeName(type)));
  }
  return absl::OkStatus();
}

}  // namespace

const char* DownLayoutName(DownLayout d) { return d == DownLayout::kBlocks ? "blocks" : "rows"; }

bool CanUseDownBlocks(GgmlType model_down_type, int64_t n_embd, int64_t n_ff) {
  return cpu::HasDownBlocksLayout(model_down_type, n_embd) && n_ff > 0 &&
         n_ff % cpu::kDownBlocksGroup == 0 && n_ff / cpu::kDownBlocksGroup <= kMaxGroupsPerLayer;
}

std::vector<int32_t> BlockPermutation(int64_t n_ff, std::span<const double> activity) {
  constexpr int64_t kBlock = cpu::kDownBlocksGroup;
  const int64_t n_blocks = n_ff / kBlock;
  std::vector<int64_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  if (static_cast<int64_t>(activity.size()) == n_ff) {
    std::vector<double> sum(static_cast<size_t>(n_blocks), 0.0);
    for (int64_t i = 0; i < n_ff; ++i) sum[static_cast<size_t>(i / kBlock)] += activity[i];
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return sum[static_cast<size_t>(a)] > sum[static_cast<size_t>(b)];
    });
  }
  std::vector<int32_t> perm;
  perm.reserve(static_cast<size_t>(n_ff));
  for (int64_t k : order) {
    for (int64_t j = 0; j < kBlock; ++j) perm.push_back(static_cast<int32_t>(k * kBlock + j));
  }
  return perm;
}

bool IsBlockPermutation(std::span<const int32_t> perm, int gs, int64_t* bad_slot) {
  if (gs <= 0 || perm.size() % static_cast<size_t>(gs) != 0) {
    if (bad_slot != nullptr) *bad_slot = 0;
    return false;
  }
  for (size_t s = 0; s < perm.size(); ++s) {
    const int32_t first = perm[s / static_cast<size_t>(gs) * static_cast<size_t>(gs)];
    if (first % gs != 0 || perm[s] != first + static_cast<int32_t>(s % static_cast<size_t>(gs))) {
      if (bad_slot != nullptr) *bad_slot = static_cast<int64_t>(s);
      return false;
    }
  }
  return true;
}

void DequantizeDownColumn(const BundleLayout& l, const uint8_t* bundle, int j, float* out) {
  const uint8_t* down = bundle + l.down_offset();
  if (l.down == DownLayout::kBlocks) {
    for (int64_t e = 0; e < l.n_embd; ++e) out[e] = cpu::DownBlocksAt(l.down_type, down, e, j);
    return;
  }
  const cpu::TypeKernels* k = cpu::Kernels().For(l.down_type);
  KX_CHECK(k != nullptr);
  k->dequantize(down + static_cast<uint64_t>(j) * l.down_row_bytes, out, l.n_embd);
}

absl::StatusOr<BundleLayout> MakeBundleLayout(int64_t n_embd, int64_t n_ff, int group_size,
                                              GgmlType up, GgmlType gate, GgmlType down,
                                              DownLayout down_layout) {
  if (group_size != 4 && group_size != 8 && group_size != 16 && group_size != 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("bundle layout: group size ", group_size, " is not 4, 8, 16 or 32"));
  }
  if (n_ff <= 0 || n_ff % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bundle layout: n_ff ", n_ff,
                                                   " is not a multiple of the group size ",
                                                   group_size));
  }
  if (n_ff / group_size > kMaxGroupsPerLayer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bundle layout: ", n_ff / group_size, " groups of ", group_size, " (n_ff ", n_ff,
        ") exceed ", kMaxGroupsPerLayer, " per layer; use a larger group size"));
  }
  for (GgmlType t : {up, gate}) {
    if (!cpu::IsSupportedWeightType(t)) {
      return absl::UnimplementedError(
          absl::StrCat("bundle layout: up/gate type ", TypeName(t), " has no CPU kernels"));
    }
  }
  if (!cpu::CanQuantize(down)) {
    return absl::UnimplementedError(
        absl::StrCat("bundle layout: no quantizer for down type ", TypeName(down)));
  }
  if (down_layout == DownLayout::kBlocks) {
    if (group_size != cpu::kDownBlocksGroup || !cpu::HasDownBlocksLayout(down, n_embd)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bundle layout: down blocks need group size ", cpu::kDownBlocksGroup,
          " (got ", group_size, ") and a Q4_1 ffn_down with n_embd a multiple of ",
          cpu::kDownBlocksTile, " (got ", TypeName(down), ", n_embd ", n_embd, ")"));
    }
  }
  BundleLayout l;
  l.down = down_layout;
  l.group_size = group_size;
  l.n_groups = static_cast<int>(n_ff / group_size);
  l.n_embd = n_embd;
  l.up_type = up;
  l.gate_type = gate;
  l.down_type = down;
  KX_ASSIGN_OR_RETURN(l.up_row_bytes, RowBytesOf(up, n_embd, "ffn_up"));
  KX_ASSIGN_OR_RETURN(l.gate_row_bytes, RowBytesOf(gate, n_embd, "ffn_gate"));
  if (down_layout == DownLayout::kBlocks) {
    l.down_bytes = cpu::DownBlocksBytes(down, n_embd);
  } else {
    KX_ASSIGN_OR_RETURN(l.down_row_bytes, RowBytesOf(down, n_embd, "ffn_down_t"));
    l.down_bytes = static_cast<uint64_t>(group_size) * l.down_row_bytes;
  }
  l.bundle_bytes =
      static_cast<uint64_t>(group_size) * (l.up_row_bytes + l.gate_row_bytes) + l.down_bytes;
  l.bundle_stride = (l.bundle_bytes + kBundleAlign - 1) / kBundleAlign * kBundleAlign;
  return l;
}

GgmlType DefaultDownType(GgmlType model_down_type, int64_t n_embd) {
  // down_t is the model's ffn_down dequantized and re-quantized along the
  // other axis, so a 4/5-bit type would carry two rounding errors: on
  // SmolLM2-135M (Q4_1) that cost +5.2 % perplexity, Q8_0 rows +0.25 %
  // (docs/sparsity.md). 8-bit and float types are kept as they are.
  const bool wide = model_down_type == GgmlType::kQ8_0 || model_down_type == GgmlType::kF16 ||
                    model_down_type == GgmlType::kBF16 || model_down_type == GgmlType::kF32;
  const TypeInfo& info = GetTypeInfo(model_down_type);
  if (wide && cpu::CanQuantize(model_down_type) && n_embd > 0 && n_embd % info.block_size == 0) {
    return model_down_type;
  }
  // Q8_0 needs whole 32-element blocks; F16 takes any width.
  return n_embd % GetTypeInfo(GgmlType::kQ8_0).block_size == 0 ? GgmlType::kQ8_0
                                                                 : GgmlType::kF16;
}

absl::Status PackBundles(const WeightRef& up, const WeightRef& gate, const WeightRef& down,
                         const std::vector<int32_t>& perm, const BundleLayout& layout,
                         uint8_t* dst) {
  const int gs = layout.group_size;
  const int64_t n_embd = layout.n_embd;
  const int64_t n_ff = static_cast<int64_t>(layout.n_groups) * gs;
  KX_RETURN_IF_ERROR(CheckWeight(up, "ffn_up", n_embd, n_ff, layout.up_type));
  KX_RETURN_IF_ERROR(CheckWeight(gate, "ffn_gate", n_embd, n_ff, layout.gate_type));
  KX_RETURN_IF_ERROR(CheckWeight(down, "ffn_down", n_ff, n_embd,
                                 layout.down == DownLayout::kBlocks ? layout.down_type : down.type));
  const cpu::TypeKernels* down_k = cpu::Kernels().For(down.type);
  if (down_k == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("PackBundles: cannot dequantize ffn_down type ", TypeName(down.type)));
  }
  if (static_cast<int64_t>(perm.size()) != n_ff) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackBundles: perm has ", perm.size(), " entries, n_ff is ", n_ff));
  }
  // slot_of[n]: the position (g·GS + j) of neuron n; -1 until seen.
  std::vector<int32_t> slot_of(static_cast<size_t>(n_ff), -1);
  for (int64_t s = 0; s < n_ff; ++s) {
    const int32_t n = perm[static_cast<size_t>(s)];
    if (n < 0 || n >= n_ff) {
      return absl::InvalidArgumentError(
          absl::StrCat("PackBundles: perm[", s, "] = ", n, " is outside [0, ", n_ff, ")"));
    }
    if (slot_of[static_cast<size_t>(n)] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("PackBundles: neuron ", n, " appears twice (",
                                                     "perm[", slot_of[static_cast<size_t>(n)],
                                                     "] and perm[", s, "])"));
    }
    slot_of[static_cast<size_t>(n)] = static_cast<int32_t>(s);
  }

  const uint64_t stride = layout.bundle_stride;
  std::memset(dst, 0, stride * static_cast<uint64_t>(layout.n_groups));
  for (int64_t s = 0; s < n_ff; ++s) {
    const int32_t n = perm[static_cast<size_t>(s)];
    uint8_t* bundle = dst + stride * static_cast<uint64_t>(s / gs);
    const uint64_t j = static_cast<uint64_t>(s % gs);
    std::memcpy(bundle + j * layout.up_row_bytes, up.row(n), layout.up_row_bytes);
    std::memcpy(bundle + layout.gate_offset() + j * layout.gate_row_bytes, gate.row(n),
                layout.gate_row_bytes);
  }

  if (layout.down == DownLayout::kBlocks) {
    if (int64_t s = 0; !IsBlockPermutation(perm, gs, &s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PackBundles: down blocks need each group to be one block of ", gs,
          " consecutive neurons in order; perm[", s, "] = ", perm[static_cast<size_t>(s)]));
    }
    for (int64_t g = 0; g < layout.n_groups; ++g) {
      const int64_t k = perm[static_cast<size_t>(g * gs)] / gs;
      cpu::PackDownBlocks(layout.down_type, down.row(0), down.row_bytes, n_embd, k,
                          dst + stride * static_cast<uint64_t>(g) + layout.down_offset());
    }
    return absl::OkStatus();
  }

  // ffn_down_t: slabs of kSlab neurons (original order), transposed in floats
  // and re-quantized row by row into their bundles.
  const int64_t block = GetTypeInfo(down.type).block_size;
  const int64_t slab = std::max(kSlab / block, int64_t{1}) * block;
  std::vector<float> cols(static_cast<size_t>(slab * n_embd));  // [neuron][n_embd]
  std::vector<float> row_buf(static_cast<size_t>(slab));
  const uint64_t block_bytes = static_cast<uint64_t>(GetTypeInfo(down.type).block_bytes);
  for (int64_t n0 = 0; n0 < n_ff; n0 += slab) {
    const int64_t len = std::min(slab, n_ff - n0);  // whole blocks: n_ff is (GGUF rows are)
    for (int64_t e = 0; e < n_embd; ++e) {
      down_k->dequantize(down.row(e) + static_cast<uint64_t>(n0 / block) * block_bytes,
                         row_buf.data(), len);
      for (int64_t k = 0; k < len; ++k) cols[static_cast<size_t>(k * n_embd + e)] = row_buf[k];
    }
    for (int64_t k = 0; k < len; ++k) {
      const int64_t s = slot_of[static_cast<size_t>(n0 + k)];
      uint8_t* bundle = dst + stride * static_cast<uint64_t>(s / gs);
      uint8_t* out = bundle + layout.down_offset() +
                     static_cast<uint64_t>(s % gs) * layout.down_row_bytes;
      KX_RETURN_IF_ERROR(
          cpu::QuantizeRow(layout.down_type, &cols[static_cast<size_t>(k * n_embd)], n_embd, out));
    }
  }
  return absl::OkStatus();
}

}  // namespace kx::sparse
