// Scalar Q4_1 kernels: the oracle for the SIMD versions, and the fallback.
#include "kernels/cpu/internal.h"

namespace kx::cpu::ref {
namespace {

float DotRow(const uint8_t* w, int64_t nb, const BlockQ16A* x) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ4_1 blk;
    std::memcpy(&blk, w + b * sizeof(BlockQ4_1), sizeof blk);
    BlockQ16A xa;
    std::memcpy(&xa, &x[b], sizeof xa);
    int32_t sumi = 0;  // |sumi| ≤ 32·15·32767 < 2^24: exact as a float
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (blk.qs[j] & 0x0f) * xa.qs[j];
      sumi += (blk.qs[j] >> 4) * xa.qs[j + kQK / 2];
    }
    // Σ(d·q + m)·(dx·qx) = d·dx·Σq·qx + m·(dx·Σqx) = ... + m·s
    acc += HalfToFloat(blk.d) * xa.d * static_cast<float>(sumi) + HalfToFloat(blk.m) * xa.s;
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

// d·q + m as two roundings (no fused multiply-add), exactly as gguf-py and
// ggml compute it: the golden test compares bit for bit.
void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    BlockQ4_1 blk;
    std::memcpy(&blk, p + b * sizeof(BlockQ4_1), sizeof blk);
    const float d = HalfToFloat(blk.d);
    const float m = HalfToFloat(blk.m);
    float* o = dst + b * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const float lo = d * static_cast<float>(blk.qs[j] & 0x0f);
      const float hi = d * static_cast<float>(blk.qs[j] >> 4);
      o[j] = lo + m;
      o[j + kQK / 2] = hi + m;
    }
  }
}

const TypeKernels kQ4_1 = {GgmlType::kQ4_1, &Q16AActBytes, &QuantizeQ16A,
                           &Matvec,         &Matmul,       &DequantizeQ4_1};

}  // namespace kx::cpu::ref
