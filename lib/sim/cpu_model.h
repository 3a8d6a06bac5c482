// The CPU's measured rates as kairox-sim charges them, instead of one bandwidth for
// everything: the sparse FFN's effective rate as a function of the active fraction (the
// kernel slows down as fewer neurons are active: docs/sparsity.md), the non-FFN part of a
// layer (attention, projections, norms) with its growth in the context (the K and V it
// reads), and the per-token part (LM head, sampling).
//
// A profile carries rates in bytes, so that one calibrated on one model can be applied to
// another's shape (CpuRates); the simulator runs on seconds (CpuModel), made from the rates
// and the model's byte counts:
//
//   KX_ASSIGN_OR_RETURN(kx::sim::CpuRates rates, kx::sim::LoadCpuRates("cpu.json"));
//   kx::sim::CpuModel cpu = rates.ToModel({.attn_bytes = ..., .kv_bytes_per_ctx = ...,
//                                          .head_bytes = ...});
//   double s = cpu.FfnSeconds(/*neurons=*/1500, /*n_ff=*/1536, /*neuron_bytes=*/1080);
//
// Immutable values; thread-safe to share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace kx::sim {

// One measured point of the sparse FFN: at this share of a layer's neurons predicted
// active, the kernel moved (predicted neurons · bytes per neuron) at this rate.
struct RatePoint {
  double fraction = 0;     // in (0, 1]
  double bytes_per_s = 0;  // > 0
};

struct CpuModel {
  // Sorted by fraction, distinct fractions; piecewise linear in between, and the end
  // points' rates outside (an extrapolated slope could go negative). Empty: no FFN model.
  std::vector<RatePoint> ffn_rate;
  double layer_s = 0;          // non-FFN part of one layer at context 0
  double layer_s_per_ctx = 0;  // its growth per token of context
  double token_s = 0;          // once per token after the last layer

  // The FFN's effective rate at `fraction` (interpolated).
  double FfnBytesPerS(double fraction) const;
  // Time of one layer's sparse FFN over `neurons` predicted of `n_ff`.
  double FfnSeconds(uint64_t neurons, uint64_t n_ff, uint64_t neuron_bytes) const;
  // Time of one layer's non-FFN part at `ctx` tokens of context.
  double LayerSeconds(int64_t ctx) const { return layer_s + layer_s_per_ctx * ctx; }
};

// InvalidArgument naming the field: an empty, unsorted or repeated curve, a fraction
// outside (0, 1], a rate that is not > 0, a negative or non-finite time.
absl::Status ValidateCpuModel(const CpuModel& m);

// The byte counts that turn rates into seconds (kairox-sim reads them from the GGUF).
struct CpuShape {
  uint64_t attn_bytes = 0;        // one layer's non-FFN weights
  uint64_t kv_bytes_per_ctx = 0;  // K and V one layer reads per token of context
  uint64_t head_bytes = 0;        // LM head + output norm
};

// A CPU profile as measured (docs/sim.md, "The calibrated CPU model"): rates, plus fixed
// per-layer and per-token overheads (thread hand-offs, sampling) that no byte count explains.
struct CpuRates {
  std::string description;
  std::vector<RatePoint> ffn_rate;
  double attn_bytes_per_s = 0;  // non-FFN weights of a layer
  double kv_bytes_per_s = 0;    // K/V read by attention; 0: the context costs nothing
  double head_bytes_per_s = 0;  // LM head
  double layer_overhead_s = 0;
  double token_overhead_s = 0;

  CpuModel ToModel(const CpuShape& shape) const;
};

// Reads a JSON profile: {"description": "...", "ffn_gb_per_s": [[fraction, GB/s], ...],
// "attn_gb_per_s": x, "kv_gb_per_s": x, "head_gb_per_s": x, "layer_overhead_us": x,
// "token_overhead_us": x}. Errors name the file and the field.
absl::StatusOr<CpuRates> LoadCpuRates(const std::string& path);
// The same from a JSON text (`what` names it in errors).
absl::StatusOr<CpuRates> ParseCpuRates(const std::string& json, const std::string& what);

}  // namespace kx::sim
