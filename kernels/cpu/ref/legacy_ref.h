// Scalar kernels for the 32-element legacy types over a layout from
// kernels/cpu/legacy_quants.h: the oracle for the SIMD versions.
#pragma once

#include "kernels/cpu/legacy_quants.h"

namespace kx::cpu::ref {

template <class L>
struct LegacyRef {
  static float DotRow(const uint8_t* w, int64_t nb, const BlockQ16A* x) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = w + b * L::kBlockBytes;
      int8_t q[kQK];
      L::Quants(p, q);
      BlockQ16A xa;
      std::memcpy(&xa, &x[b], sizeof xa);
      int32_t sumi = 0;  // |sumi| ≤ 32·128·32767 = 2^27 (Q8_0): no overflow
      for (int j = 0; j < kQK; ++j) sumi += q[j] * xa.qs[j];
      float block = HalfToFloat(LoadU16(p)) * xa.d * static_cast<float>(sumi);
      if constexpr (L::kHasMin) block += L::M(p) * xa.s;  // Σ m·x = m·d_x·Σqx = m·s
      acc += block;
    }
    return acc;
  }

  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    const auto* wp = static_cast<const uint8_t*>(w);
    for (int64_t r = 0; r < rows; ++r) {
      y[r] = DotRow(wp + r * row_bytes, n / kQK, static_cast<const BlockQ16A*>(act));
    }
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* ap = static_cast<const uint8_t*>(act);
    for (int64_t c = 0; c < ncols; ++c) {
      Matvec(w, row_bytes, n, rows, ap + c * act_stride, y + c * ldy);
    }
  }

  // d·q (+ m) with gguf-py's roundings (no fused multiply-add here).
  static void Dequantize(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < n / kQK; ++b) {
      const uint8_t* blk = p + b * L::kBlockBytes;
      int8_t q[kQK];
      L::Quants(blk, q);
      const float d = HalfToFloat(LoadU16(blk));
      for (int j = 0; j < kQK; ++j) {
        const float v = d * static_cast<float>(q[j]);
        if constexpr (L::kHasMin) {
          dst[b * kQK + j] = v + L::M(blk);
        } else {
          dst[b * kQK + j] = v;
        }
      }
    }
  }

  static constexpr TypeKernels kKernels = {L::kType, &Q16AActBytes, &QuantizeQ16A,
                                           &Matvec,  &Matmul,       &Dequantize};
};

}  // namespace kx::cpu::ref
