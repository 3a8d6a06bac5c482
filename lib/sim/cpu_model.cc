#include "sim/cpu_model.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace kx::sim {
namespace {

constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;

absl::Status NonNegative(double v, const char* what) {
  if (!(v >= 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kairox-sim: CPU model: %s must be >= 0 (got %g)", what, v));
  }
  return absl::OkStatus();
}

// A rate field in GB/s, as bytes/s; `required`: absent is an error, else 0.
absl::StatusOr<double> Rate(const nlohmann::json& j, const char* key, bool required,
                            const std::string& what) {
  if (!j.contains(key)) {
    if (!required) return 0.0;
    return absl::InvalidArgumentError(absl::StrFormat("%s: no \"%s\"", what, key));
  }
  if (!j[key].is_number() || !(j[key].get<double>() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"%s\" must be a number >= 0", what, key));
  }
  return j[key].get<double>() * kGiga;
}

}  // namespace

double CpuModel::FfnBytesPerS(double fraction) const {
  if (ffn_rate.empty()) return 0;
  if (fraction <= ffn_rate.front().fraction) return ffn_rate.front().bytes_per_s;
  if (fraction >= ffn_rate.back().fraction) return ffn_rate.back().bytes_per_s;
  size_t i = 1;
  while (ffn_rate[i].fraction < fraction) ++i;
  const RatePoint& a = ffn_rate[i - 1];
  const RatePoint& b = ffn_rate[i];
  const double w = (fraction - a.fraction) / (b.fraction - a.fraction);
  return a.bytes_per_s + w * (b.bytes_per_s - a.bytes_per_s);
}

double CpuModel::FfnSeconds(uint64_t neurons, uint64_t n_ff, uint64_t neuron_bytes) const {
  if (neurons == 0 || n_ff == 0) return 0;
  const double fraction = static_cast<double>(neurons) / static_cast<double>(n_ff);
  return static_cast<double>(neurons) * static_cast<double>(neuron_bytes) / FfnBytesPerS(fraction);
}

absl::Status ValidateCpuModel(const CpuModel& m) {
  if (m.ffn_rate.empty())
    return absl::InvalidArgumentError("kairox-sim: CPU model: no FFN rate point");
  for (size_t i = 0; i < m.ffn_rate.size(); ++i) {
    const RatePoint& p = m.ffn_rate[i];
    if (!(p.fraction > 0 && p.fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("kairox-sim: CPU model: FFN rate point %zu: fraction %g is not in (0, 1]",
                          i, p.fraction));
    }
    if (!(p.bytes_per_s > 0) || !std::isfinite(p.bytes_per_s)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("kairox-sim: CPU model: FFN rate point %zu: rate must be > 0 (got %g)", i,
                          p.bytes_per_s));
    }
    if (i > 0 && !(p.fraction > m.ffn_rate[i - 1].fraction)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kairox-sim: CPU model: FFN rate points must have increasing fractions (point %zu: "
          "%g after %g)",
          i, p.fraction, m.ffn_rate[i - 1].fraction));
    }
  }
  KX_RETURN_IF_ERROR(NonNegative(m.layer_s, "the per-layer time"));
  KX_RETURN_IF_ERROR(NonNegative(m.layer_s_per_ctx, "the per-layer time per context token"));
  KX_RETURN_IF_ERROR(NonNegative(m.token_s, "the per-token time"));
  return absl::OkStatus();
}

CpuModel CpuRates::ToModel(const CpuShape& shape) const {
  CpuModel m;
  m.ffn_rate = ffn_rate;
  m.layer_s = layer_overhead_s;
  if (attn_bytes_per_s > 0) m.layer_s += static_cast<double>(shape.attn_bytes) / attn_bytes_per_s;
  if (kv_bytes_per_s > 0)
    m.layer_s_per_ctx = static_cast<double>(shape.kv_bytes_per_ctx) / kv_bytes_per_s;
  m.token_s = token_overhead_s;
  if (head_bytes_per_s > 0) m.token_s += static_cast<double>(shape.head_bytes) / head_bytes_per_s;
  return m;
}

absl::StatusOr<CpuRates> ParseCpuRates(const std::string& text, const std::string& what) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(what + ": not a JSON object");
  CpuRates r;
  if (j.contains("description") && j["description"].is_string())
    r.description = j["description"].get<std::string>();
  if (!j.contains("ffn_gb_per_s") || !j["ffn_gb_per_s"].is_array() || j["ffn_gb_per_s"].empty()) {
    return absl::InvalidArgumentError(
        what + ": \"ffn_gb_per_s\" must be a list of [active fraction, GB/s] pairs");
  }
  for (const nlohmann::json& p : j["ffn_gb_per_s"]) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
      return absl::InvalidArgumentError(
          what + ": \"ffn_gb_per_s\" entries must be [active fraction, GB/s]");
    }
    r.ffn_rate.push_back({p[0].get<double>(), p[1].get<double>() * kGiga});
  }
  KX_ASSIGN_OR_RETURN(r.attn_bytes_per_s, Rate(j, "attn_gb_per_s", true, what));
  KX_ASSIGN_OR_RETURN(r.kv_bytes_per_s, Rate(j, "kv_gb_per_s", false, what));
  KX_ASSIGN_OR_RETURN(r.head_bytes_per_s, Rate(j, "head_gb_per_s", true, what));
  for (const char* key : {"layer_overhead_us", "token_overhead_us"}) {
    if (j.contains(key) && (!j[key].is_number() || !(j[key].get<double>() >= 0))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: \"%s\" must be a number >= 0", what, key));
    }
  }
  r.layer_overhead_s = j.value("layer_overhead_us", 0.0) * kMicro;
  r.token_overhead_s = j.value("token_overhead_us", 0.0) * kMicro;
  if (!(r.attn_bytes_per_s > 0) || !(r.head_bytes_per_s > 0)) {
    return absl::InvalidArgumentError(what + ": attn_gb_per_s and head_gb_per_s must be > 0");
  }
  CpuModel check;
  check.ffn_rate = r.ffn_rate;
  if (absl::Status st = ValidateCpuModel(check); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", st.message()));
  }
  return r;
}

absl::StatusOr<CpuRates> LoadCpuRates(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("kairox-sim: cannot read CPU profile ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseCpuRates(ss.str(), path);
}

}  // namespace kx::sim
