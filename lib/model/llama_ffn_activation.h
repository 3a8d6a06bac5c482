// The gated FFN activation of every FfnActivation (model/llama.h), defined
// once for the dense forward (engine/forward.cc), the sparse kernels
// (sparse/sparse_ffn.cc), masking and profiling, so that they agree bit for
// bit on what a neuron computes and on when it is zero.
//
// The FFN computes h_n = A(g_n, u_n) · u_n with g = gate·x, u = up·x and the
// "activated value" A, which is what FfnHook::OnActivations sees:
//   silu       A = g·σ(g)                   (SwiGLU)
//   gelu_tanh  A = gelu_tanh(g)             (GeGLU; as g·σ(2y), GeluTanh below)
//   relu       A = max(g, 0)                (ReGLU)
//   fatrelu    A = g·[g > t], t ≥ 0         (FATReLU; t = 0 is ReGLU)
//   drelu      A = max(g, 0)·[u > 0]        (dReLU: relu(g)·relu(u) = A·u)
// For the ReLU family a neuron is active exactly when A ≠ 0. dReLU folds the
// up-side ReLU into A so that "A ≠ 0" is the whole rule (a neuron with
// u ≤ 0 contributes nothing) and A·u stays the product for every variant.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/llama.h"

namespace kx {

// The value of <arch>.feed_forward_activation: "silu", "gelu_tanh", "relu",
// "fatrelu", "drelu".
std::string_view FfnActivationName(FfnActivation act);
// Refuses an unknown name, naming it and the known ones.
absl::StatusOr<FfnActivation> ParseFfnActivation(std::string_view name);
// ReLU-family: neurons are exactly zero when inactive (no CATS threshold).
bool IsReluFamily(FfnActivation act);

// sqrt(2/π), the tanh approximation's constant, and its cubic coefficient.
inline constexpr float kGeluTanhScale = 0.7978845608028654f;
inline constexpr float kGeluTanhCubic = 0.044715f;

// GELU-tanh, 0.5·g·(1 + tanh y) with y = √(2/π)·(g + 0.044715·g³), evaluated as g·σ(2y) =
// g / (1 + e^(−2y)) (the same function: 0.5·(1 + tanh y) = σ(2y)). e^x costs a third of tanh
// (glibc: ~7 vs ~26 ns an element here, and ffn_act was 17 % of Gemma 3's prefill), and the
// error is the same (≤ 1.7e-7·|g| against a double reference on N(0, 2) inputs, the tanh form
// 1.6e-7), without the tanh form's cancellation in 1 + t when t ≈ −1.
inline float GeluTanh(float g) {
  const float y = kGeluTanhScale * (g + kGeluTanhCubic * g * g * g);
  return g / (1.0f + std::exp(-2.0f * y));
}

// A(g, u) for one neuron; `threshold` is FATReLU's t (ignored by the others).
inline float ActivatedValue(FfnActivation act, float threshold, float g, float u) {
  switch (act) {
    case FfnActivation::kSilu:
      return g / (1.0f + std::exp(-g));
    case FfnActivation::kGeluTanh:
      return GeluTanh(g);
    case FfnActivation::kRelu:
      return g > 0.0f ? g : 0.0f;
    case FfnActivation::kFatRelu:
      return g > threshold ? g : 0.0f;
    case FfnActivation::kDRelu:
      return g > 0.0f && u > 0.0f ? g : 0.0f;
  }
  return g;
}

// gate[i] = A(gate[i], up[i]) · up[i] over n elements.
void GatedFfnActivation(FfnActivation act, float threshold, float* gate, const float* up,
                        int64_t n);
// gate[i] = A(gate[i], up[i]) alone: the same arithmetic as
// GatedFfnActivation before the multiplication by up (so a hook that masks
// nothing changes no bit). up is read only by dReLU.
void FfnActivationOnly(FfnActivation act, float threshold, float* gate, const float* up,
                       int64_t n);

}  // namespace kx
