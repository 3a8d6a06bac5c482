#include "model/llama_ffn_activation.h"

#include "absl/strings/str_cat.h"

namespace kx {
namespace {

struct NamedActivation {
  FfnActivation act;
  std::string_view name;
};

constexpr NamedActivation kNames[] = {
    {FfnActivation::kSilu, "silu"},       {FfnActivation::kGeluTanh, "gelu_tanh"},
    {FfnActivation::kRelu, "relu"},       {FfnActivation::kFatRelu, "fatrelu"},
    {FfnActivation::kDRelu, "drelu"},
};

}  // namespace

std::string_view FfnActivationName(FfnActivation act) {
  for (const NamedActivation& n : kNames) {
    if (n.act == act) return n.name;
  }
  return "unknown";
}

absl::StatusOr<FfnActivation> ParseFfnActivation(std::string_view name) {
  for (const NamedActivation& n : kNames) {
    if (n.name == name) return n.act;
  }
  return absl::UnimplementedError(
      absl::StrCat("FFN activation '", std::string(name),
                   "' is not supported (supported: silu, gelu_tanh, relu, fatrelu, drelu)"));
}

bool IsReluFamily(FfnActivation act) {
  return act == FfnActivation::kRelu || act == FfnActivation::kFatRelu ||
         act == FfnActivation::kDRelu;
}

// One loop per variant (the switch outside), so each loop is a plain
// elementwise pass the compiler can vectorize where the math allows.
void GatedFfnActivation(FfnActivation act, float threshold, float* gate, const float* up,
                        int64_t n) {
  switch (act) {
    case FfnActivation::kSilu:
      for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
      }
      return;
    case FfnActivation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) gate[i] = GeluTanh(gate[i]) * up[i];
      return;
    case FfnActivation::kRelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > 0.0f ? gate[i] * up[i] : 0.0f;
      return;
    case FfnActivation::kFatRelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > threshold ? gate[i] * up[i] : 0.0f;
      return;
    case FfnActivation::kDRelu:
      for (int64_t i = 0; i < n; ++i) {
        gate[i] = gate[i] > 0.0f && up[i] > 0.0f ? gate[i] * up[i] : 0.0f;
      }
      return;
  }
}

void FfnActivationOnly(FfnActivation act, float threshold, float* gate, const float* up,
                       int64_t n) {
  switch (act) {
    case FfnActivation::kSilu:
      for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i]));
      return;
    case FfnActivation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) gate[i] = GeluTanh(gate[i]);
      return;
    case FfnActivation::kRelu:
    case FfnActivation::kFatRelu:
    case FfnActivation::kDRelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = ActivatedValue(act, threshold, gate[i], up[i]);
      return;
  }
}

}  // namespace kx
