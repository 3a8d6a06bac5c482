#include "tensor/dtype.h"

#include <array>

#include "base/check.h"

namespace kx {
namespace {

constexpr uint32_t kMaxTypeId = 40;

// Block layouts as ggml defines them (ggml-common.h); the golden tests
// compare these against the gguf Python package's GGML_QUANT_SIZES.
constexpr std::array<TypeInfo, kMaxTypeId> MakeTable() {
  std::array<TypeInfo, kMaxTypeId> t{};
  auto set = [&t](GgmlType id, const char* name, int32_t block, int32_t bytes) {
    t[static_cast<uint32_t>(id)] = TypeInfo{name, block, bytes};
  };
  set(GgmlType::kF32, "F32", 1, 4);
  set(GgmlType::kF16, "F16", 1, 2);
  set(GgmlType::kQ4_0, "Q4_0", 32, 18);
  set(GgmlType::kQ4_1, "Q4_1", 32, 20);
  set(GgmlType::kQ5_0, "Q5_0", 32, 22);
  set(GgmlType::kQ5_1, "Q5_1", 32, 24);
  set(GgmlType::kQ8_0, "Q8_0", 32, 34);
  set(GgmlType::kQ8_1, "Q8_1", 32, 36);
  set(GgmlType::kQ2_K, "Q2_K", 256, 84);
  set(GgmlType::kQ3_K, "Q3_K", 256, 110);
  set(GgmlType::kQ4_K, "Q4_K", 256, 144);
  set(GgmlType::kQ5_K, "Q5_K", 256, 176);
  set(GgmlType::kQ6_K, "Q6_K", 256, 210);
  set(GgmlType::kQ8_K, "Q8_K", 256, 292);
  set(GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66);
  set(GgmlType::kIQ2_XS, "IQ2_XS", 256, 74);
  set(GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98);
  set(GgmlType::kIQ1_S, "IQ1_S", 256, 50);
  set(GgmlType::kIQ4_NL, "IQ4_NL", 32, 18);
  set(GgmlType::kIQ3_S, "IQ3_S", 256, 110);
  set(GgmlType::kIQ2_S, "IQ2_S", 256, 82);
  set(GgmlType::kIQ4_XS, "IQ4_XS", 256, 136);
  set(GgmlType::kI8, "I8", 1, 1);
  set(GgmlType::kI16, "I16", 1, 2);
  set(GgmlType::kI32, "I32", 1, 4);
  set(GgmlType::kI64, "I64", 1, 8);
  set(GgmlType::kF64, "F64", 1, 8);
  set(GgmlType::kIQ1_M, "IQ1_M", 256, 56);
  set(GgmlType::kBF16, "BF16", 1, 2);
  set(GgmlType::kTQ1_0, "TQ1_0", 256, 54);
  set(GgmlType::kTQ2_0, "TQ2_0", 256, 66);
  return t;
}

constexpr std::array<TypeInfo, kMaxTypeId> kTable = MakeTable();

}  // namespace

const TypeInfo* FindTypeInfo(uint32_t type_id) {
  if (type_id >= kMaxTypeId || kTable[type_id].name == nullptr) return nullptr;
  return &kTable[type_id];
}

const TypeInfo& GetTypeInfo(GgmlType type) {
  const TypeInfo* info = FindTypeInfo(static_cast<uint32_t>(type));
  KX_CHECK_MSG(info != nullptr, "GgmlType outside the table");
  return *info;
}

absl::StatusOr<uint64_t> TypeBytes(uint32_t type_id, int64_t n_elements) {
  const TypeInfo* info = FindTypeInfo(type_id);
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ggml tensor type id ", type_id));
  }
  if (n_elements < 0) return absl::InvalidArgumentError("negative element count");
  if (n_elements % info->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(n_elements, " elements of type ", info->name,
                                                   " are not a whole number of ",
                                                   info->block_size, "-element blocks"));
  }
  const uint64_t blocks = static_cast<uint64_t>(n_elements / info->block_size);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->block_bytes), &bytes)) {
    return absl::InvalidArgumentError("tensor byte size overflows 64 bits");
  }
  return bytes;
}

absl::StatusOr<uint64_t> TypeBytes(GgmlType type, int64_t n_elements) {
  return TypeBytes(static_cast<uint32_t>(type), n_elements);
}

}  // namespace kx
