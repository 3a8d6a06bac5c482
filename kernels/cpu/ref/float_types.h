// Scalar kernels for the unquantized weight types (F32, F16, BF16), written
// once over an element decoder; ref/f32.cc, f16.cc and bf16.cc instantiate it.
#pragma once

#include "kernels/cpu/internal.h"

namespace kx::cpu::ref {

template <class Elem, float (*kDecode)(Elem)>
struct FloatRowKernels {
  static Elem Load(const uint8_t* p, int64_t i) {
    Elem e;
    std::memcpy(&e, p + i * static_cast<int64_t>(sizeof(Elem)), sizeof e);
    return e;
  }
  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* x = static_cast<const float*>(act);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = wp + r * row_bytes;
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i) acc += kDecode(Load(row, i)) * x[i];
      y[r] = acc;
    }
  }
  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* ap = static_cast<const uint8_t*>(act);
    for (int64_t c = 0; c < ncols; ++c) {
      Matvec(w, row_bytes, n, rows, ap + c * act_stride, y + c * ldy);
    }
  }
  static void Dequantize(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = kDecode(Load(p, i));
  }
};

inline float DecodeF32(float v) { return v; }

}  // namespace kx::cpu::ref
