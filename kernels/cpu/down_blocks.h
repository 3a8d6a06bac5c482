// The down-blocks layout (kernels.h, DownBlocksFn): one group's share of
// ffn_down when the group is one block of the model's own quantization, i.e.
// the 32 consecutive neurons 32k .. 32k + 31 of a layer. ffn_down is stored
// as n_embd rows of n_ff elements, so the group's weights are block k of
// every row: kept byte for byte (no re-quantization), only rearranged so
// that kDownBlocksTile output rows are computed per step. Q4_1, per tile of
// 16 rows r (320 bytes, the same as the 16 blocks it holds):
//   [16 × f16 d_r][16 × f16 m_r][8 chunks c × 16 rows r × (qs_r[2c], qs_r[2c+1])]
// qs_r is row r's block's 16 quant bytes (element i in the low nibble of
// byte i, element i + 16 in its high nibble), so a chunk widened to int16
// gives each row the element pairs (2c, 2c+1) and (2c+16, 2c+17).
//
//   std::vector<uint8_t> part(DownBlocksBytes(GgmlType::kQ4_1, n_embd));
//   PackDownBlocks(GgmlType::kQ4_1, down.data, down.row_bytes, n_embd, k, part.data());
//   float w = DownBlocksAt(GgmlType::kQ4_1, part.data(), e, j);  // W[e][32k + j]
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kx::cpu {

inline constexpr int kDownBlocksTile = 16;   // output rows per tile
inline constexpr int kDownBlocksGroup = 32;  // neurons per group (the block size)

// Whether the layout exists for ffn_down of `type` with n_embd rows (Q4_1,
// n_embd a positive multiple of kDownBlocksTile).
bool HasDownBlocksLayout(GgmlType type, int64_t n_embd);

// Bytes of one group's part (n_embd blocks). Requires HasDownBlocksLayout.
uint64_t DownBlocksBytes(GgmlType type, int64_t n_embd);

// Writes block k of each of the n_embd rows of `down` (row e at down +
// e·row_bytes) to dst in the layout above. Requires HasDownBlocksLayout and
// k < the rows' block count (unchecked).
void PackDownBlocks(GgmlType type, const uint8_t* down, uint64_t row_bytes, int64_t n_embd,
                    int64_t k, uint8_t* dst);

// Element j (0..31) of output row e of a packed part, dequantized.
float DownBlocksAt(GgmlType type, const uint8_t* part, int64_t e, int j);

}  // namespace kx::cpu
