// A whole activity trace (docs/trace.md) held in memory the way the simulator
// replays it: per decode step, layer and neuron group, how many of the group's
// neurons the predictor said would be active. That count is all the split FFN
// needs: the policy's intensity is count / group_size, and the bytes the GPU or
// the CPU reads are count · (bytes of one neuron's rows).
//
//   KX_ASSIGN_OR_RETURN(kx::sim::SimTrace t, kx::sim::LoadSimTrace(path, {}));
//   for (int s = 0; s < t.n_steps; ++s)
//     for (int l = 0; l < t.n_layer; ++l) { const uint16_t* c = t.counts(s, l); ... }
//
// Immutable after loading; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sparse/trace.h"

namespace kx::sim {

struct SimTraceOptions {
  // Replay only steps whose number is >= first_step (a trace of kairox-cli
  // holds the prompt's tokens first; decode starts at the prompt length).
  uint32_t first_step = 0;
  // At most this many steps after first_step; 0 = all.
  uint32_t max_steps = 0;
  // A record with no predicted set falls back to its actual set when true;
  // otherwise it is an error.
  bool allow_actual = true;
  // Replay the actual sets (the neurons that fired) instead of the predicted ones: an oracle
  // predictor. A record without an actual set is then an error.
  bool use_actual = false;
  // Regroup: groups of this many consecutive neurons (the trace's neurons are in the
  // sidecar's group-major order, so this merges or splits the sidecar's groups; the last
  // group of a layer may be short). 0: the trace's own group size.
  uint32_t group_size = 0;
};

struct SimTrace {
  std::string path;
  std::string model_sha256;   // from the header; may be empty
  std::string metadata_json;  // from the header; may be empty
  int n_layer = 0;
  int group_size = 0;                // of the replay (SimTraceOptions::group_size or the file's)
  int trace_group_size = 0;          // the file's (its sidecar's)
  int n_groups = 0;                  // the most groups of any layer
  std::vector<int> groups_in_layer;  // ceil(n_ff / group_size) per layer
  std::vector<uint32_t> n_ff;        // per layer
  int n_steps = 0;                   // replayed steps (tokens)
  std::vector<uint32_t> step_ids;    // the trace's step number of each replayed step
  uint64_t records_from_actual = 0;  // records that had no predicted set
  // [(step * n_layer + layer) * n_groups + g]: predicted-active neurons of group g.
  std::vector<uint16_t> active;
  // [step * n_layer + layer]: what the engine's tier recorded for the step (reads, bytes,
  // resident groups, stall; LayerStats::present == 0 where nothing was recorded): the
  // measured side the disk-tier replay is compared with.
  std::vector<sparse::LayerStats> recorded;

  const uint16_t* counts(int step, int layer) const {
    return active.data() + (static_cast<size_t>(step) * n_layer + layer) * n_groups;
  }
  const sparse::LayerStats& recorded_stats(int step, int layer) const {
    return recorded[static_cast<size_t>(step) * n_layer + layer];
  }
  // Neurons of group g of `layer` (group_size, less for a short last group, 0
  // for a group index beyond the layer's width).
  int group_neurons(int layer, int g) const;
  // [layer * n_groups + g]: mean of count / group_size over the replayed steps
  // (the frequency the simulator's initial placement uses by default).
  std::vector<float> MeanIntensity() const;
};

// Reads and validates the whole trace. Errors: whatever TraceReader reports
// (bad magic, truncation, ... with the byte offset), a group size that does
// not fit the policies (more than policy::kMaxGroupsPerLayer groups in a
// layer), a (step, layer) recorded twice, a replayed step that lacks a layer,
// a record with neither set (or no actual set with use_actual), and a trace with no step to
// replay.
absl::StatusOr<SimTrace> LoadSimTrace(const std::string& path, const SimTraceOptions& options);

}  // namespace kx::sim
