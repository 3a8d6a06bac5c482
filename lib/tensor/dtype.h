// The ggml tensor types as GGUF stores them: ids, block sizes, bytes per
// block. This table is how the reader validates sizes, so it lists every type
// a GGUF may contain, including ones kairox cannot compute with; whether a
// type can be computed is the kernels' business (kernels/cpu/kernels.h).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace kx {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

struct TypeInfo {
  const char* name;     // as ggml spells it: "Q4_1", "F16", ...
  int32_t block_size;   // elements per block
  int32_t block_bytes;  // bytes per block
};

// Info for a raw ggml type id, or null if the id is not a known type.
const TypeInfo* FindTypeInfo(uint32_t type_id);

// Info for a known type (aborts on an id outside the enum: a bug).
const TypeInfo& GetTypeInfo(GgmlType type);

// The name of `type`, or "(unknown type)" for an id outside the table: error messages about
// an id read from a file are built with it, and must never abort.
inline const char* TypeName(GgmlType type) {
  const TypeInfo* info = FindTypeInfo(static_cast<uint32_t>(type));
  return info != nullptr ? info->name : "(unknown type)";
}

// Bytes of `n_elements` of `type`. Fails if n is negative, not a multiple of
// the block size, or the size overflows 64 bits.
absl::StatusOr<uint64_t> TypeBytes(GgmlType type, int64_t n_elements);

// The same, for an id read from a file; unknown ids fail naming the id.
absl::StatusOr<uint64_t> TypeBytes(uint32_t type_id, int64_t n_elements);

}  // namespace kx
