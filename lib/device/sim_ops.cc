#include "device/sim_ops.h"

#include <array>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda_api.h"

namespace kx {
namespace {

// dst[j] += sum_k coeff[k] * w[rows[k] * w_row_stride + j] (kernels/cuda/cuda_api.h), one
// axpy per active row through kernels/cpu. The argument checks mirror the module's entry
// point; the pointer and row checks are what the GPU would fault on, or silently read
// out of bounds for.
absl::Status RunAxpyRowsF16(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "axpy_rows_f16";
  const auto* a = static_cast<const kx_cuda_axpy_rows_f16_args*>(raw);
  if (a->struct_size < sizeof(kx_cuda_axpy_rows_f16_args)) {
    return absl::InvalidArgumentError("axpy_rows_f16: args->struct_size is too small");
  }
  if (a->n_active < 0) return absl::InvalidArgumentError("axpy_rows_f16: n_active < 0");
  if (a->n_active == 0) return absl::OkStatus();
  if (a->n_rows <= 0 || a->n_cols <= 0) {
    return absl::InvalidArgumentError("axpy_rows_f16: n_rows and n_cols must be positive");
  }
  if (a->w_row_stride < a->n_cols) {
    return absl::InvalidArgumentError("axpy_rows_f16: w_row_stride < n_cols");
  }
  const uint64_t n_active = static_cast<uint64_t>(a->n_active);
  const uint64_t w_elems =
      static_cast<uint64_t>(a->n_rows - 1) * static_cast<uint64_t>(a->w_row_stride) +
      static_cast<uint64_t>(a->n_cols);
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "w", a->w, w_elems * sizeof(uint16_t)));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "rows", a->rows, n_active * sizeof(int32_t)));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "coeff", a->coeff, n_active * sizeof(float)));
  KX_RETURN_IF_ERROR(
      mem.CheckDeviceRange(kOp, "dst", a->dst, static_cast<uint64_t>(a->n_cols) * sizeof(float)));
  const auto axpy = cpu::Kernels().vec.axpy_f16;
  for (int64_t k = 0; k < a->n_active; ++k) {
    const int32_t row = a->rows[k];
    if (row < 0 || row >= a->n_rows) {
      return absl::OutOfRangeError(
          absl::StrCat("axpy_rows_f16: rows[", k, "] = ", row, " is outside [0, ", a->n_rows, ")"));
    }
    axpy(a->coeff[k], a->w + static_cast<int64_t>(row) * a->w_row_stride, a->dst, a->n_cols);
  }
  return absl::OkStatus();
}

constexpr std::array kOps = {
    SimOp{"axpy_rows_f16", RunAxpyRowsF16, sizeof(kx_cuda_axpy_rows_f16_args)},
};

}  // namespace

std::span<const SimOp> SimOps() {
  static const std::vector<SimOp> all = [] {
    std::vector<SimOp> ops(kOps.begin(), kOps.end());
    for (const SimOp& op : SimLayerOps()) ops.push_back(op);
    for (const SimOp& op : SimSparseOps()) ops.push_back(op);
    return ops;
  }();
  return all;
}

const SimOp* FindSimOp(std::string_view name) {
  for (const SimOp& op : SimOps()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace kx
