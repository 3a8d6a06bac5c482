// Shared by the tests of the ops that read GGUF weight blocks (matvec, dequantize): random
// rows of any type laid out as the ops take them (strided, off a 16-byte boundary), and
// 16-byte aligned activations.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernel_test_util.h"

namespace kx::test {

// W rows as the ops read them: `rows` rows of n elements, row_bytes apart, starting `shift`
// bytes into the buffer, whose start is 16-byte aligned (operator new); the buffer ends with
// the last row's data, so a read past W is out of bounds for the sanitizers.
struct Rows {
  GgmlType type;
  int64_t n = 0;
  int64_t rows = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> buffer;
  size_t shift = 0;
  const uint8_t* Row(int64_t r) const { return buffer.data() + shift + r * row_bytes; }
};

inline Rows MakeRows(std::mt19937_64& rng, GgmlType type, int64_t n, int64_t rows, size_t pad,
                     size_t shift) {
  Rows w{type, n, rows, RowBytes(type, n) + pad, {}, shift};
  const size_t data_bytes = RowBytes(type, n);
  const std::vector<uint8_t> packed = RandomRows(type, n, rows, rng);
  w.buffer.resize(shift + (rows - 1) * w.row_bytes + data_bytes);
  for (uint8_t& b : w.buffer) b = static_cast<uint8_t>(rng());  // junk between rows
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(w.buffer.data() + shift + r * w.row_bytes, packed.data() + r * data_bytes,
                data_bytes);
  }
  return w;
}

// A copy of x at a 16-byte boundary inside *storage (the op's contract for x).
inline const float* AlignedCopy(const std::vector<float>& x, std::vector<float>* storage) {
  storage->assign(x.size() + 4, 0.0f);
  float* p = storage->data();
  while (reinterpret_cast<uintptr_t>(p) % 16 != 0) ++p;
  std::memcpy(p, x.data(), x.size() * sizeof(float));
  return p;
}

}  // namespace kx::test
