// What kairox-sim needs to know of the model behind a trace, read from the
// GGUF files themselves (the trace's metadata names them): the bytes one FFN
// neuron moves or reads, the hidden size, the non-FFN weights of a layer and
// the LM head; from the sidecar, when there is one, the exact bundle stride and
// the calibration frequency of each group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace kx::sim_cli {

struct ModelShape {
  std::string model_path;
  std::string sidecar_path;  // empty when none was read
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int n_layer = 0;
  uint64_t neuron_bytes = 0;  // the sidecar's bundle stride / GS, else the model's up+gate+down
  uint64_t attn_bytes = 0;    // layer 0's tensors other than ffn_* (attention, norms)
  uint64_t head_bytes = 0;    // output.weight (or the tied token_embd.weight) + output_norm
  // K and V one layer reads per token of context at the engine's default f16 cache:
  // 2 · n_embd · n_head_kv / n_head · 2 bytes (0 when the GGUF lacks the head counts).
  uint64_t kv_bytes_per_ctx = 0;
  int sidecar_group_size = 0;
  uint64_t bundle_stride = 0;  // the sidecar's bytes per bundle (a RAM slot)
  uint64_t bundle_lead = 0;    // layer 0's bundles' offset inside their first 4 KiB page
  // [layer * n_groups + g]: the sidecar's calibration frequency averaged over each group of
  // the replay (the engine's initial placement input); empty without a sidecar.
  std::vector<float> group_frequency;
};

// Reads the model (required) and the sidecar (optional: "" skips it). n_groups and
// group_size are the replay's groups per layer and neurons per group (for group_frequency:
// groups of group_size consecutive neurons in the sidecar's order; 0 = the sidecar's size).
absl::StatusOr<ModelShape> ReadModelShape(const std::string& model_path,
                                          const std::string& sidecar_path, int n_groups,
                                          int group_size = 0);

}  // namespace kx::sim_cli
