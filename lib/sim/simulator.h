// kairox-sim's engine: replays an activity trace (sim_trace.h) through one
// lib/policy policy — the same objects, called in the same order as the
// engine's split FFN calls them — against a hardware profile, for one VRAM
// budget, and reports simulated tokens/s, reload bytes, hit rate and where the
// time went. Deterministic: the same inputs give the same result, bit for bit.
// The model of time, and its limits, are in docs/sim.md.
//
//   KX_ASSIGN_OR_RETURN(kx::sim::SimTrace t, kx::sim::LoadSimTrace(path, {}));
//   KX_ASSIGN_OR_RETURN(kx::DeviceProfile p, kx::LoadDeviceProfile("rtx4090-pcie4"));
//   kx::sim::SimHardware hw = kx::sim::SimHardware::From(p, /*cpu_gb_per_s=*/60.0);
//   kx::sim::SimCosts costs{.neuron_bytes = 1080, .hidden_bytes = 576 * 4};
//   kx::sim::SimConfig config{.policy = "tam-adaptive", .budget = 0.3};
//   KX_ASSIGN_OR_RETURN(kx::sim::SimResult r, kx::sim::Simulate(t, hw, costs, config));
//
// Thread-safety: Simulate only reads its arguments; run several at once freely.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/device_profile.h"
#include "policy/policy.h"
#include "sim/cpu_model.h"
#include "sim/sim_trace.h"

namespace kx::sim {

// Default kernel launch overhead of the GPU part of one layer (seconds).
inline constexpr double kDefaultLaunchSeconds = 5e-6;

struct SimHardware {
  std::string name;               // the profile's name, for reports
  double h2d_bytes_per_s = 0;     // PCIe, host to device
  double d2h_bytes_per_s = 0;     // PCIe, device to host
  double copy_latency_s = 0;      // per copy, before the first byte lands
  double device_bytes_per_s = 0;  // GPU memory: what the GPU part reads
  double cpu_bytes_per_s = 0;     // host memory as the CPU sparse FFN reads it
  // The calibrated alternative (cpu_model.h, kairox-sim --cpu-profile): when it has rate
  // points, the CPU branch costs cpu_ffn.FfnSeconds(neurons on the CPU, n_ff, neuron bytes),
  // its rate taken at the CPU's share of the layer's neurons; cpu_bytes_per_s is then unused.
  CpuModel cpu_ffn;
  double launch_s = kDefaultLaunchSeconds;  // GPU part of a layer: kernel launches
  // The host's copy of each reload into the split FFN's pinned staging ring (DeviceFfn), in
  // bytes per second; 0: free (not modelled). The copies run on the host in Prepare, before
  // the CPU's share of the layer, so their time is added to that layer's CPU branch; the
  // link is not delayed by them (a bundle's copy overlaps the previous bundle's transfer).
  double staging_bytes_per_s = 0;

  static SimHardware From(const DeviceProfile& p, double cpu_gb_per_s,
                          double launch_s = kDefaultLaunchSeconds);
};

// What the model's shape costs. Bytes, not FLOPs: batch-1 decode reads every
// weight it uses once, so each part is bound by the bandwidth of where its
// weights live.
struct SimCosts {
  uint64_t neuron_bytes = 0;  // one neuron's up + gate rows and its share of down
  uint64_t hidden_bytes = 0;  // one activation vector (n_embd · 4): x up, partial sum down
  // The non-FFN part of a layer (attention, norms) in seconds; < 0: computed as
  // attn_bytes / device bandwidth + one launch (it runs on the device).
  double non_ffn_s = -1;
  uint64_t attn_bytes = 0;  // per layer, when non_ffn_s < 0
  // Once per token after the last layer (LM head, sampling); < 0: head_bytes /
  // device bandwidth + one launch, or 0 when head_bytes is 0.
  double per_token_s = -1;
  uint64_t head_bytes = 0;
};

// One (step, layer) as the policy saw it: the feedback it was given and the
// plan it returned, plus the loads that became resident just before it (for
// tests that drive the policy directly and must reproduce the residency).
struct PlanEvent {
  int step = 0;
  int layer = 0;
  policy::Feedback feedback;
  policy::Plan plan;
  std::vector<std::pair<int, int>> landed_before;  // (layer, group), landing order
  double lambda = 0;  // the policy's λ for the layer after this plan (TAM; 0 otherwise)
};

struct SimConfig {
  std::string policy = "tam-adaptive";
  policy::PolicyOptions options;
  // Share of each layer's groups that have a device slot, in [0, 1]
  // (floor(budget · groups) slots).
  double budget = 0.3;
  // Calibration frequency for the initial placement, [layer * n_groups + g];
  // empty: the trace's own mean intensity per group (an oracle: it has seen
  // the tokens it is replayed on).
  std::vector<float> placement_frequency;
  // Plan each layer one layer ahead, as the engine does (adjacent prediction): layer l+1's
  // plan runs when layer l's FFN starts (layer 0 of the next token at the last layer), with
  // the trace's sets of l+1, so its loads can land before l+1 runs and serve that very step.
  // false: each layer plans when it starts, so its loads help its next step only.
  bool lookahead = false;
  // Called after every PlanLayer (tests: the plan sequence).
  std::function<void(const PlanEvent&)> on_plan;
};

// Where the wall time went, in seconds over the whole replay. The FFN part of
// each layer is charged to the branch that finished last: all of it to cpu_s
// when the CPU part was the longer one, else split along the GPU branch into
// the wait for an in-flight reload (h2d_background_s), the two critical copies
// (h2d_critical_s) and the GPU compute (gpu_s). So the parts add up to the
// total.
struct StallBreakdown {
  double gpu_s = 0;
  double cpu_s = 0;
  double h2d_critical_s = 0;
  double h2d_background_s = 0;
  double other_s = 0;  // non-FFN layer parts and per-token work
  double total() const { return gpu_s + cpu_s + h2d_critical_s + h2d_background_s + other_s; }
};

struct SimResult {
  std::string policy;
  std::string hardware;
  double budget = 0;
  int slots_per_layer = 0;  // of the widest layer
  int tokens = 0;
  double seconds = 0;  // simulated wall time of the replay
  double tokens_per_s = 0;
  uint64_t loads = 0;  // reloads issued (the initial placement is free)
  uint64_t evictions = 0;
  uint64_t reload_bytes = 0;  // bytes of the reloads issued
  double reload_bytes_per_token = 0;
  uint64_t groups_needed = 0;   // (step, layer, group) with a predicted-active neuron
  uint64_t hits = 0;            // of those, resident on the device when compute started
  uint64_t late = 0;            // of those, still loading (computed on the CPU)
  double hit_rate = 0;          // hits / groups_needed (1 when nothing was needed)
  double gpu_neuron_share = 0;  // predicted neurons computed on the GPU / all predicted
  StallBreakdown stalls;
  // Busy times (not on the critical path necessarily): the CPU and GPU FFN
  // parts, and the link on reloads that landed.
  double cpu_busy_s = 0;
  double gpu_busy_s = 0;
  double reload_link_s = 0;
  double staging_s = 0;    // the host's copies of reloads into pinned staging (in cpu_busy_s)
  double mean_lambda = 0;  // TAM: mean over layers at the end; 0 otherwise
};

// Checks the hardware and costs: positive bandwidths, a non-negative latency
// and launch time, neuron and hidden bytes > 0. InvalidArgument naming the field.
absl::Status ValidateSimInputs(const SimHardware& hw, const SimCosts& costs);

// Replays `trace` once. InvalidArgument for bad hardware/costs, a budget
// outside [0, 1], an unknown policy (the message lists the valid names), or a
// placement_frequency of the wrong size.
absl::StatusOr<SimResult> Simulate(const SimTrace& trace, const SimHardware& hw,
                                   const SimCosts& costs, const SimConfig& config);

}  // namespace kx::sim
