// kairox-sim's RAM ⇄ disk tier: replays an activity trace through the engine's BundleTier
// logic (lib/engine/bundle_tier.{h,cc}, docs/tiers.md) — the same policy objects with the
// same options, the same order of Prepare / Speculate / Acquire / Release per layer, the
// same page runs per read — against a disk link of measured bandwidth and latency and a
// calibrated CPU model (cpu_model.h), for a number of RAM slots per layer. It predicts
// tokens/s, bytes and read operations per token, and where the time went.
//
//   kx::sim::DiskLink disk{.bytes_per_s = 1.5e9, .latency_s = 60e-6};
//   kx::sim::BundleFile file{.stride = 34560};
//   kx::sim::DiskTierConfig config{.policy = "static", .slots = 24};
//   KX_ASSIGN_OR_RETURN(kx::sim::DiskTierResult r,
//                       kx::sim::SimulateDiskTier(trace, disk, cpu, 1080, file, config));
//
// Deterministic; Simulate only reads its arguments (thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "policy/policy.h"
#include "sim/cpu_model.h"
#include "sim/sim_trace.h"

namespace kx::sim {

// The disk as the tier's O_DIRECT reads see it: one read at a time, each taking
// latency + bytes / bandwidth. (The engine's io_uring queue overlaps reads; with the
// sidecar's groups in calibration order a layer's reads are a few long page runs, where
// the bandwidth term dominates. bench_io measures both numbers.)
struct DiskLink {
  double bytes_per_s = 0;
  double latency_s = 0;
  double ReadSeconds(uint64_t bytes) const {
    return latency_s + static_cast<double>(bytes) / bytes_per_s;
  }
};

// FIFO of reads on one DiskLink. Time only moves forward per call.
class DiskQueue {
 public:
  explicit DiskQueue(const DiskLink& link) : link_(link) {}
  // A read submitted at `now`: when it ends (after every earlier read).
  double Submit(double now, uint64_t bytes);
  double busy_s() const { return busy_s_; }

 private:
  DiskLink link_;
  double free_at_ = 0;
  double busy_s_ = 0;
};

// Where a layer's bundles lie in the sidecar, as BundleTier reads them.
struct BundleFile {
  uint64_t stride = 0;    // bytes of one bundle (a slot)
  uint64_t lead = 0;      // the bundles' offset inside their first page (0 for kairox sidecars)
  uint64_t page = 4096;   // kDirectIoAlign: O_DIRECT reads whole pages
  int max_gap_pages = 2;  // TierOptions::max_gap_pages (KAIROX_TIER_GAP)
};

struct PageRun {
  uint64_t first_page = 0;  // in the layer's span
  uint64_t pages = 0;
};

// The page runs that cover `groups` of a layer of `n_groups` bundles, merged across gaps of
// at most max_gap_pages unneeded pages: BundleTier::ReadGroups's reads.
void PageRuns(const BundleFile& file, int n_groups, const std::vector<int32_t>& groups,
              std::vector<PageRun>* runs);

// BundleTier's policy options (bundle_tier.cc, Create): binary activity (a miss costs a whole
// bundle whatever its intensity), needed groups admitted without τ, swap margin 0.1.
policy::PolicyOptions TierPolicyOptions();

// One layer step as the tier's trace record and log describe it.
struct DiskStepEvent {
  int step = 0;
  int layer = 0;
  policy::Plan plan;
  int64_t needed = 0, hits = 0;
  int64_t read_ops = 0;     // including the step's speculative reads (layer 0)
  int64_t bytes_read = 0;   // whole pages, gaps included
  int resident_groups = 0;  // after the plan (resident + loading)
  double io_wait_s = 0;     // Acquire waited for the reads
  double ffn_s = 0;         // the FFN's compute (CPU model)
};

struct DiskTierConfig {
  std::string policy = "tam-adaptive";
  policy::PolicyOptions options = TierPolicyOptions();
  int slots = 0;                 // resident bundles per layer (BundleTier::SlotsPerLayer)
  bool prefetch = true;          // false: --no-prefetch (a layer's reads start when it runs)
  bool speculate_layer0 = true;  // KAIROX_TIER_SPECULATE
  // The sidecar's calibration frequency per group, [layer * n_groups + g] (the engine's
  // placement); empty: the trace's own mean (an oracle).
  std::vector<float> placement_frequency;
  // Steps whose trace step number is below this run but are not timed (the prompt).
  uint32_t timed_from_step = 0;
  double copy_bytes_per_s = 0;  // mirror → slot copies of admitted groups; 0: free
  std::function<void(const DiskStepEvent&)> on_step;
};

struct DiskTierResult {
  std::string policy;
  int slots = 0;
  int tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  uint64_t bytes_read = 0, read_ops = 0, loads = 0, evictions = 0;
  uint64_t groups_needed = 0, hits = 0;
  double bytes_per_token = 0, reads_per_token = 0;
  // Where the time went (adds up to seconds): FFN compute, waiting for reads, mirror → slot
  // copies, and the rest (non-FFN part of each layer, per-token part).
  double ffn_s = 0, io_wait_s = 0, copy_s = 0, other_s = 0;
  double disk_busy_s = 0;  // over the whole replay, untimed steps included
};

// Replays `trace` from its first replayed step with the initial placement free (loaded at
// start, as Create reads it); counts and times cover the steps from timed_from_step. The context of
// step s is its trace step number + 1 (under a budget the prompt runs token by token, so step
// numbers are positions). InvalidArgument: a bad CPU model or disk link, neuron_bytes or stride of
// 0, slots outside [0, groups], an unknown policy, a placement of the wrong size.
absl::StatusOr<DiskTierResult> SimulateDiskTier(const SimTrace& trace, const DiskLink& disk,
                                                const CpuModel& cpu, uint64_t neuron_bytes,
                                                const BundleFile& file,
                                                const DiskTierConfig& config);

}  // namespace kx::sim
