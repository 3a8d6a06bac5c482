// Scalar K-quant kernels over a layout from kernels/cpu/kquants.h: the
// oracle for the SIMD versions, and the fallback. ref/<type>.cc instantiate.
#pragma once

#include "kernels/cpu/kquants.h"

namespace kx::cpu::ref {

template <class L>
struct KQuantRef {
  // Σ w·x for one row: per super-block d·Σ_j d_x(j)·Σ (sc·q)·qx (int64: a
  // 32-element block can reach 32·4096·32767 > 2^31) minus dmin·Σ_k m_k·S_k.
  static float DotRow(const uint8_t* w, int64_t n, const BlockQ16A* x) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < n / kQK_K; ++sb) {
      const uint8_t* p = w + sb * L::kBlockBytes;
      KHeader h;
      L::Header(p, &h);
      int8_t q[kQK_K];
      L::Quants(p, q);
      float part = 0.0f, mins = 0.0f;
      for (int j = 0; j < kActBlocksK; ++j) {
        BlockQ16A xa;
        std::memcpy(&xa, &x[sb * kActBlocksK + j], sizeof xa);
        int64_t sumi = 0;
        for (int i = 0; i < kQK; ++i) {
          sumi += static_cast<int64_t>(h.sc[(kQK * j + i) / 16] * q[kQK * j + i]) * xa.qs[i];
        }
        part += xa.d * static_cast<float>(sumi);
        if constexpr (L::kHasMin) {
          for (int half = 0; half < 2; ++half) {
            int32_t s = 0;
            for (int i = 0; i < 16; ++i) s += xa.qs[16 * half + i];
            mins += static_cast<float>(h.m[2 * j + half]) * (xa.d * static_cast<float>(s));
          }
        }
      }
      acc += h.d * part;
      if constexpr (L::kHasMin) acc -= h.dmin * mins;
    }
    return acc;
  }

  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    const auto* wp = static_cast<const uint8_t*>(w);
    for (int64_t r = 0; r < rows; ++r) {
      y[r] = DotRow(wp + r * row_bytes, n, static_cast<const BlockQ16A*>(act));
    }
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* ap = static_cast<const uint8_t*>(act);
    for (int64_t c = 0; c < ncols; ++c) {
      Matvec(w, row_bytes, n, rows, ap + c * act_stride, y + c * ldy);
    }
  }

  // (d·sc)·q − dmin·m in float32 with gguf-py's roundings (each product
  // rounded, then the difference; no fused multiply-add in this file's flags).
  static void Dequantize(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t sb = 0; sb < n / kQK_K; ++sb) {
      KHeader h;
      L::Header(p + sb * L::kBlockBytes, &h);
      int8_t q[kQK_K];
      L::Quants(p + sb * L::kBlockBytes, q);
      float* o = dst + sb * kQK_K;
      for (int e = 0; e < kQK_K; ++e) {
        const float dl = h.d * static_cast<float>(h.sc[e / 16]);
        const float v = dl * static_cast<float>(q[e]);
        if constexpr (L::kHasMin) {
          const float ml = h.dmin * static_cast<float>(h.m[e / 16]);
          o[e] = v - ml;
        } else {
          o[e] = v;
        }
      }
    }
  }

  static constexpr TypeKernels kKernels = {L::kType, &Q16AActBytes, &QuantizeQ16A,
                                           &Matvec,  &Matmul,       &Dequantize};
};

}  // namespace kx::cpu::ref
