// A hook into every layer's FFN of the dense forward pass: what profiling
// (kairox-prepare) records and what masked-dense evaluation (a sparse model's
// quality measured with dense kernels) uses to zero inactive neurons.
#pragma once

namespace kx {

class FfnHook {
 public:
  virtual ~FfnHook() = default;
  // The FFN input of `layer` (after its norm) for n tokens: n × n_embd.
  virtual void OnFfnInput(int layer, int n, const float* x) = 0;
  // act(gate·x) of `layer` for n tokens, n × n_ff in the model's neuron
  // order, before it multiplies up·x. The hook may zero entries (masking).
  virtual void OnActivations(int layer, int n, float* act) = 0;
};

}  // namespace kx
