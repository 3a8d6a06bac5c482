// SparseFfnReference (sparse_ffn.h): the test oracle, in double, reading
// every row through the scalar table's dequantize.
#include <cmath>
#include <vector>

#include "base/check.h"
#include "sparse/sparse_ffn.h"

namespace kx::sparse {
namespace {

// A(g, u) in double (model/llama_ffn_activation.h has the float definition).
double ActivationF64(FfnActivation act, double t, double g, double u) {
  switch (act) {
    case FfnActivation::kSilu:
      return g / (1.0 + std::exp(-g));
    case FfnActivation::kGeluTanh: {
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g)));
    }
    case FfnActivation::kRelu:
      return g > 0.0 ? g : 0.0;
    case FfnActivation::kFatRelu:
      return g > t ? g : 0.0;
    case FfnActivation::kDRelu:
      return g > 0.0 && u > 0.0 ? g : 0.0;
  }
  return g;
}

double Dot(const std::vector<float>& w, const float* x) {
  double s = 0.0;
  for (size_t e = 0; e < w.size(); ++e) s += static_cast<double>(w[e]) * x[e];
  return s;
}

}  // namespace

void SparseFfnReference(const SparseFfnArgs& a, const uint32_t* decide, double* act_out,
                        double* up_out) {
  const BundleLayout& l = *a.layout;
  const cpu::KernelTable& k = *cpu::KernelsFor(Isa::kScalar);
  const cpu::TypeKernels* up_k = k.For(l.up_type);
  const cpu::TypeKernels* gate_k = k.For(l.gate_type);
  KX_CHECK(up_k != nullptr && gate_k != nullptr);
  const int gs = l.group_size;
  const auto n = static_cast<size_t>(l.n_embd);
  std::vector<double> y(n, 0.0);
  std::vector<float> up(n), gate(n), down(n);
  for (int i = 0; i < a.n_groups; ++i) {
    const uint8_t* b = a.bundles[a.groups[i]];
    uint32_t keep = 0;
    for (int j = 0; j < gs; ++j) {
      const size_t slot = static_cast<size_t>(i) * gs + j;
      if (act_out != nullptr) act_out[slot] = 0.0;
      if (up_out != nullptr) up_out[slot] = 0.0;
      if (((a.masks[i] >> j) & 1u) == 0) continue;
      gate_k->dequantize(b + l.gate_offset() + j * l.gate_row_bytes, gate.data(), l.n_embd);
      up_k->dequantize(b + j * l.up_row_bytes, up.data(), l.n_embd);
      const double u = Dot(up, a.x);
      const double av = ActivationF64(a.act, a.act_threshold, Dot(gate, a.x), u);
      if (act_out != nullptr) act_out[slot] = av;
      if (up_out != nullptr) up_out[slot] = u;
      const bool kept =
          decide != nullptr ? ((decide[i] >> j) & 1u) != 0 : std::fabs(av) > a.threshold;
      if (!kept) continue;
      keep |= 1u << j;
      DequantizeDownColumn(l, b, j, down.data());
      for (size_t e = 0; e < n; ++e) y[e] += av * u * down[e];
    }
    if (a.kept != nullptr) a.kept[i] = keep;
  }
  for (size_t e = 0; e < n; ++e) a.y[e] = static_cast<float>(y[e]);
}

}  // namespace kx::sparse
