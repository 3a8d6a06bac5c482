// Float rows → ggml blocks, round to nearest, with ggml-reference-style
// scales (the model's own quantizer picks the same d and m): what the sparse
// FFN's bundle packer needs to re-quantize ffn_down columns as rows.
//
//   if (kx::cpu::CanQuantize(type)) {
//     std::vector<uint8_t> row(row_bytes);
//     KX_RETURN_IF_ERROR(kx::cpu::QuantizeRow(type, src, n, row.data()));
//   }
//
// Setup-time code (not a hot path); scalar, identical on every CPU.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kx::cpu {

// Types QuantizeRow writes: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32.
bool CanQuantize(GgmlType type);

// Writes n elements of src as one row of `type` into dst (n / block_size
// blocks). Scales: Q4_0 d = x_absmax_signed / −8, Q5_0 / −16, Q8_0
// d = max|x| / 127, Q4_1/Q5_1 d = (max − min) / (2^bits − 1) with m = min; the
// quants are computed against the half-rounded d and m actually stored, so
// every element dequantizes within one step d of its value. Errors: a type
// CanQuantize refuses, or n not whole blocks.
absl::Status QuantizeRow(GgmlType type, const float* src, int64_t n, uint8_t* dst);

}  // namespace kx::cpu
