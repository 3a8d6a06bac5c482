// Scalar Q8_0 kernels: the oracle for the SIMD versions, and the fallback.
#include "kernels/cpu/internal.h"

namespace kx::cpu::ref {
namespace {

float DotRow(const uint8_t* w, int64_t nb, const BlockQ16A* x) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ8_0 blk;
    std::memcpy(&blk, w + b * sizeof(BlockQ8_0), sizeof blk);
    BlockQ16A xa;
    std::memcpy(&xa, &x[b], sizeof xa);
    int32_t sumi = 0;  // |sumi| ≤ 32·128·32767 = 2^27: no overflow (float rounds it)
    for (int j = 0; j < kQK; ++j) sumi += blk.qs[j] * xa.qs[j];
    acc += HalfToFloat(blk.d) * xa.d * static_cast<float>(sumi);
  }
  return acc;
}

void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act, float* y) {
  const auto* wp = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    y[r] = DotRow(wp + r * row_bytes, n / kQK, static_cast<const BlockQ16A*>(act));
  }
}

void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
            size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
  const auto* ap = static_cast<const uint8_t*>(act);
  for (int64_t c = 0; c < ncols; ++c)
    Matvec(w, row_bytes, n, rows, ap + c * act_stride, y + c * ldy);
}

}  // namespace

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    BlockQ8_0 blk;
    std::memcpy(&blk, p + b * sizeof(BlockQ8_0), sizeof blk);
    const float d = HalfToFloat(blk.d);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * static_cast<float>(blk.qs[j]);
  }
}

const TypeKernels kQ8_0 = {GgmlType::kQ8_0, &Q16AActBytes, &QuantizeQ16A,
                           &Matvec,         &Matmul,       &DequantizeQ8_0};

}  // namespace kx::cpu::ref
