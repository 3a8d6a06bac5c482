// Random, valid GGUF quant blocks for the check's weights: the ggml block layouts written out
// here (the check builds without kairox's libraries), filled with random quants and sane
// scales (the magnitudes of real LLM weights: |w| around 0.01-0.1, never all zero).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kx::gpu_check {

// ggml type ids (as stored in GGUF files and passed to the CUDA ops).
enum GgmlType : int32_t {
  kTypeF32 = 0,
  kTypeF16 = 1,
  kTypeQ4_0 = 2,
  kTypeQ4_1 = 3,
  kTypeQ5_0 = 6,
  kTypeQ5_1 = 7,
  kTypeQ8_0 = 8,
  kTypeQ2_K = 10,
  kTypeQ3_K = 11,
  kTypeQ4_K = 12,
  kTypeQ5_K = 13,
  kTypeQ6_K = 14,
  kTypeBF16 = 30,
};

struct TypeInfo {
  int32_t id;
  const char* name;
  int32_t block_elems;  // elements per block (1 for float types)
  int32_t block_bytes;
};

// The type's layout, or null for a type the check does not know.
const TypeInfo* FindType(int32_t id);
const char* TypeName(int32_t id);  // "?" when unknown

// Bytes of one row of `n_cols` elements (n_cols a multiple of the block size).
uint64_t RowBytes(int32_t type, int64_t n_cols);

// Typical |w| of RandomWeights' values: real LLM projection weights.
inline constexpr float kWeightScale = 0.05f;

// n_rows rows of n_cols random values of `type`, rows back to back, of typical magnitude
// `scale` (quantized types: their blocks' scales are drawn for it).
std::vector<uint8_t> RandomWeights(std::mt19937_64& rng, int32_t type, int64_t n_rows,
                                   int64_t n_cols, float scale = kWeightScale);

}  // namespace kx::gpu_check
