// The down-blocks layout (down_blocks.h): packing and element access.
#include "kernels/cpu/down_blocks.h"

#include <cstring>

#include "base/check.h"
#include "kernels/cpu/internal.h"

namespace kx::cpu {
namespace {

constexpr uint64_t kTileBytes = kDownBlocksTile * sizeof(BlockQ4_1);  // 320
constexpr uint64_t kScalesBytes = 2 * kDownBlocksTile * sizeof(uint16_t);  // d then m: 64

}  // namespace

bool HasDownBlocksLayout(GgmlType type, int64_t n_embd) {
  return type == GgmlType::kQ4_1 && n_embd > 0 && n_embd % kDownBlocksTile == 0;
}

uint64_t DownBlocksBytes(GgmlType type, int64_t n_embd) {
  KX_CHECK(HasDownBlocksLayout(type, n_embd));
  return static_cast<uint64_t>(n_embd) * sizeof(BlockQ4_1);
}

void PackDownBlocks(GgmlType type, const uint8_t* down, uint64_t row_bytes, int64_t n_embd,
                    int64_t k, uint8_t* dst) {
  KX_CHECK(HasDownBlocksLayout(type, n_embd));
  for (int64_t t = 0; t < n_embd / kDownBlocksTile; ++t) {
    uint8_t* tile = dst + static_cast<uint64_t>(t) * kTileBytes;
    for (int r = 0; r < kDownBlocksTile; ++r) {
      const int64_t e = t * kDownBlocksTile + r;
      BlockQ4_1 b;
      std::memcpy(&b, down + static_cast<uint64_t>(e) * row_bytes + k * sizeof(BlockQ4_1),
                  sizeof b);
      std::memcpy(tile + 2 * r, &b.d, 2);
      std::memcpy(tile + 2 * kDownBlocksTile + 2 * r, &b.m, 2);
      for (int c = 0; c < 8; ++c) {
        uint8_t* chunk = tile + kScalesBytes + c * 2 * kDownBlocksTile;
        chunk[2 * r] = b.qs[2 * c];
        chunk[2 * r + 1] = b.qs[2 * c + 1];
      }
    }
  }
}

float DownBlocksAt(GgmlType type, const uint8_t* part, int64_t e, int j) {
  KX_CHECK(type == GgmlType::kQ4_1 && j >= 0 && j < kDownBlocksGroup && e >= 0);
  const uint8_t* tile = part + static_cast<uint64_t>(e / kDownBlocksTile) * kTileBytes;
  const int r = static_cast<int>(e % kDownBlocksTile);
  const float d = HalfToFloat(LoadU16(tile + 2 * r));
  const float m = HalfToFloat(LoadU16(tile + 2 * kDownBlocksTile + 2 * r));
  const int i = j % 16;
  const uint8_t byte = tile[kScalesBytes + (i / 2) * 2 * kDownBlocksTile + 2 * r + i % 2];
  const int q = j < 16 ? byte & 0x0f : byte >> 4;
  return d * static_cast<float>(q) + m;
}

}  // namespace kx::cpu
