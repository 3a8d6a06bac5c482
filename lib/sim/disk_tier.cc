// The disk-tier replay. Per token, per layer, in the engine's order (sparse_runtime.cc,
// OnFfnInput and BeginBundles / EndBundles; bundle_tier.cc):
//   1. the non-FFN part of the layer (CPU model, growing with the context);
//   2. with prefetch: Prepare(0) at layer 0, Prepare(l+1), and at the last layer
//      Speculate(0) with this token's layer-0 groups — each submits its page runs to the disk
//      queue now;
//   3. Acquire(l): Prepare(l) first if it was not (no prefetch), wait for the layer's reads,
//      copy the admitted groups from the mirror into their slots (they become resident);
//   4. the FFN over the layer's predicted neurons (CPU model), then Release(l): the policy's
//      feedback is (wait, compute) of this step.
// After the last layer: the per-token part.
#include "sim/disk_tier.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "policy/residency.h"

namespace kx::sim {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct LayerState {
  bool prepared = false;     // a Prepare or Speculate holds this step's reads
  bool speculative = false;  // prepared by Speculate only
  std::vector<uint8_t> spec_read;
  int64_t spec_ops = 0, spec_bytes = 0;
  std::vector<std::pair<int32_t, int>> pending_loads;  // (group, slot)
  double reads_done = 0;  // when the layer's reads (all events) have landed
  policy::Feedback feedback;
  DiskStepEvent event;
};

}  // namespace

double DiskQueue::Submit(double now, uint64_t bytes) {
  const double start = std::max(now, free_at_);
  const double seconds = link_.ReadSeconds(bytes);
  free_at_ = start + seconds;
  busy_s_ += seconds;
  return free_at_;
}

void PageRuns(const BundleFile& file, int n_groups, const std::vector<int32_t>& groups,
              std::vector<PageRun>* runs) {
  runs->clear();
  const uint64_t page = file.page;
  const uint64_t n_pages = RoundUp(file.lead + file.stride * n_groups, page) / page;
  std::vector<uint8_t> marks(n_pages, 0);
  for (int32_t g : groups) {
    const uint64_t begin = file.lead + static_cast<uint64_t>(g) * file.stride;
    const uint64_t end = begin + file.stride;
    for (uint64_t p = begin / page; p < RoundUp(end, page) / page; ++p) marks[p] = 1;
  }
  const uint64_t max_gap = static_cast<uint64_t>(std::max(0, file.max_gap_pages));
  for (uint64_t p = 0; p < n_pages;) {
    if (!marks[p]) {
      ++p;
      continue;
    }
    // Extend through gaps of at most max_gap unneeded pages (one read, not two).
    uint64_t q = p;
    for (;;) {
      while (q < n_pages && marks[q]) ++q;
      uint64_t next = q;
      while (next < n_pages && !marks[next] && next - q < max_gap) ++next;
      if (next < n_pages && marks[next] && next > q) {
        q = next;
        continue;
      }
      break;
    }
    runs->push_back({p, q - p});
    p = q;
  }
}

policy::PolicyOptions TierPolicyOptions() {
  policy::PolicyOptions o;
  o.activity = policy::ActivityInput::kBinary;
  o.admit_needed = true;
  o.swap_margin = 0.1;  // TierOptions::swap_margin
  return o;
}

absl::StatusOr<DiskTierResult> SimulateDiskTier(const SimTrace& trace, const DiskLink& disk,
                                                const CpuModel& cpu, uint64_t neuron_bytes,
                                                const BundleFile& file,
                                                const DiskTierConfig& config) {
  KX_RETURN_IF_ERROR(ValidateCpuModel(cpu));
  if (!(disk.bytes_per_s > 0) || !std::isfinite(disk.bytes_per_s) || !(disk.latency_s >= 0) ||
      !std::isfinite(disk.latency_s)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kairox-sim: disk bandwidth must be > 0 and latency >= 0 (got %g B/s, "
                        "%g s)",
                        disk.bytes_per_s, disk.latency_s));
  }
  if (neuron_bytes == 0 || file.stride == 0 || file.page == 0) {
    return absl::InvalidArgumentError(
        "kairox-sim: bytes per neuron, the bundle stride and the page size must be > 0");
  }
  if (!(config.copy_bytes_per_s >= 0)) {
    return absl::InvalidArgumentError("kairox-sim: the copy rate must be >= 0");
  }
  const int n_layer = trace.n_layer, n_groups = trace.n_groups;
  if (config.slots < 0 || config.slots > n_groups) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kairox-sim: %d RAM slots per layer is outside [0, %d groups]", config.slots, n_groups));
  }
  const size_t n_cells = static_cast<size_t>(n_layer) * n_groups;
  if (!config.placement_frequency.empty() && config.placement_frequency.size() != n_cells) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kairox-sim: placement frequency has %zu entries; the trace needs %zu",
                        config.placement_frequency.size(), n_cells));
  }
  KX_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> pol,
                      policy::MakePolicy(config.policy, config.options));

  policy::Residency r(n_layer, n_groups, config.slots);
  policy::PlacementStats ps;
  ps.n_layer = n_layer;
  ps.n_groups = n_groups;
  ps.bundle_bytes = file.stride;
  ps.frequency =
      config.placement_frequency.empty() ? trace.MeanIntensity() : config.placement_frequency;
  std::vector<std::pair<int, int>> initial;
  pol->Place(ps, r, &initial);
  policy::ApplyLoadsNow(initial, r);  // read at Create, before the first token

  DiskTierResult res;
  res.policy = std::string(pol->name());
  res.slots = config.slots;
  res.tokens = trace.n_steps;
  DiskQueue queue(disk);
  std::vector<LayerState> layers(n_layer);
  for (LayerState& L : layers) L.spec_read.assign(n_groups, 0);
  std::vector<float> intensity(n_groups);
  std::vector<int32_t> to_read;
  std::vector<PageRun> runs;
  policy::Plan plan;
  const float gs = static_cast<float>(trace.group_size);
  const double copy_s_per_group = config.copy_bytes_per_s > 0
                                      ? static_cast<double>(file.stride) / config.copy_bytes_per_s
                                      : 0.0;
  double now = 0;

  // Submits the page runs of `groups` at time t; returns (ops, bytes), the layer's
  // reads_done moves to the last one's end.
  auto read_groups = [&](int layer, double t) -> std::pair<int64_t, int64_t> {
    PageRuns(file, trace.groups_in_layer[layer], to_read, &runs);
    int64_t bytes = 0;
    for (const PageRun& run : runs) {
      const uint64_t b = run.pages * file.page;
      layers[layer].reads_done = std::max(layers[layer].reads_done, queue.Submit(t, b));
      bytes += static_cast<int64_t>(b);
    }
    res.read_ops += runs.size();
    res.bytes_read += static_cast<uint64_t>(bytes);
    return {static_cast<int64_t>(runs.size()), bytes};
  };
  auto speculate = [&](int step, int layer, double t) {
    LayerState& L = layers[layer];
    if (L.prepared) return;
    L.prepared = L.speculative = true;
    L.reads_done = t;
    const uint16_t* counts = trace.counts(step, layer);
    to_read.clear();
    for (int g = 0; g < n_groups; ++g) {
      L.spec_read[g] = counts[g] != 0 && r.slot_of(layer, g) < 0 && !r.loading(layer, g);
      if (L.spec_read[g]) to_read.push_back(g);
    }
    std::tie(L.spec_ops, L.spec_bytes) = read_groups(layer, t);
  };
  auto prepare = [&](int step, int layer, double t) {
    LayerState& L = layers[layer];
    if (L.prepared && !L.speculative) return;
    const bool top_up = L.prepared;
    L.prepared = true;
    L.speculative = false;
    if (!top_up) {
      std::fill(L.spec_read.begin(), L.spec_read.end(), 0);
      L.reads_done = t;
    }
    const uint16_t* counts = trace.counts(step, layer);
    for (int g = 0; g < n_groups; ++g) intensity[g] = static_cast<float>(counts[g]) / gs;
    pol->PlanLayer(layer, intensity.data(), L.feedback, policy::Window{}, r, &plan);
    for (int32_t g : plan.evict) r.Evict(layer, g);
    L.pending_loads.clear();
    for (int32_t g : plan.load) {
      const int slot = r.free_slot(layer);
      KX_CHECK_MSG(slot >= 0, "kairox-sim: the policy's plan exceeds the RAM slots");
      r.BeginLoad(layer, g, slot);
      L.pending_loads.push_back({g, slot});
    }
    res.loads += plan.load.size();
    res.evictions += plan.evict.size();
    DiskStepEvent& e = L.event;
    e = DiskStepEvent{};
    e.step = step;
    e.layer = layer;
    e.plan = plan;
    to_read.clear();
    for (int g = 0; g < n_groups; ++g) {
      if (counts[g] == 0) continue;
      ++e.needed;
      if (r.slot_of(layer, g) >= 0) {
        ++e.hits;
      } else if (!L.spec_read[g]) {
        to_read.push_back(g);
      }
    }
    for (const auto& [g, slot] : L.pending_loads) {
      if (counts[g] == 0 && !L.spec_read[g]) to_read.push_back(g);
    }
    const auto [ops, bytes] = read_groups(layer, t);
    e.read_ops = ops + (top_up ? L.spec_ops : 0);
    e.bytes_read = bytes + (top_up ? L.spec_bytes : 0);
    e.resident_groups = r.resident_count(layer) + r.loading_count(layer);
    res.groups_needed += static_cast<uint64_t>(e.needed);
    res.hits += static_cast<uint64_t>(e.hits);
  };

  // Steps before timed_from_step run (they set the residency and the policy's state) but are
  // not timed: the measured tg of kairox-cli is its decode, after the prompt.
  DiskTierResult at_start;
  double start_s = 0;
  int timed_steps = 0;
  for (int step = 0; step < trace.n_steps; ++step) {
    if (trace.step_ids[static_cast<size_t>(step)] >= config.timed_from_step && timed_steps++ == 0) {
      at_start = res;
      start_s = now;
    }
    const int64_t ctx = static_cast<int64_t>(trace.step_ids[static_cast<size_t>(step)]) + 1;
    for (int layer = 0; layer < n_layer; ++layer) {
      const double layer_s = cpu.LayerSeconds(ctx);
      now += layer_s;
      res.other_s += layer_s;
      if (config.prefetch) {
        if (layer == 0) prepare(step, 0, now);
        if (layer + 1 < n_layer) prepare(step, layer + 1, now);
        // The next token's layer 0, guessed from this one's: after the last token too, as the
        // engine does (those bytes count in the totals, in no step).
        if (layer + 1 == n_layer && config.speculate_layer0) speculate(step, 0, now);
      }
      LayerState& L = layers[layer];
      if (!L.prepared || L.speculative) prepare(step, layer, now);
      // Acquire: wait, then the admitted groups move from the mirror into their slots.
      const double wait = std::max(0.0, L.reads_done - now);
      now += wait;
      const double copy = copy_s_per_group * static_cast<double>(L.pending_loads.size());
      now += copy;
      for (const auto& [g, slot] : L.pending_loads) r.CompleteLoad(layer, g);
      L.pending_loads.clear();
      // The FFN over the predicted neurons, all on the CPU.
      const uint16_t* counts = trace.counts(step, layer);
      uint64_t neurons = 0;
      for (int g = 0; g < n_groups; ++g) neurons += counts[g];
      const double ffn =
          cpu.FfnSeconds(neurons, trace.n_ff[static_cast<size_t>(layer)], neuron_bytes);
      now += ffn;
      // Release: the policy's feedback for the layer's next step.
      L.feedback.io_wait_s = wait;
      L.feedback.cpu_s = ffn;
      L.prepared = false;
      res.io_wait_s += wait;
      res.copy_s += copy;
      res.ffn_s += ffn;
      L.event.io_wait_s = wait;
      L.event.ffn_s = ffn;
      if (config.on_step) config.on_step(L.event);
    }
    now += cpu.token_s;
    res.other_s += cpu.token_s;
  }
  if (timed_steps == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kairox-sim: no replayed step at or after step %u to time", config.timed_from_step));
  }
  // The timed part only.
  res.tokens = timed_steps;
  res.seconds = now - start_s;
  res.bytes_read -= at_start.bytes_read;
  res.read_ops -= at_start.read_ops;
  res.loads -= at_start.loads;
  res.evictions -= at_start.evictions;
  res.groups_needed -= at_start.groups_needed;
  res.hits -= at_start.hits;
  res.ffn_s -= at_start.ffn_s;
  res.io_wait_s -= at_start.io_wait_s;
  res.copy_s -= at_start.copy_s;
  res.other_s -= at_start.other_s;
  res.tokens_per_s = res.seconds > 0 ? res.tokens / res.seconds : 0;
  res.bytes_per_token = static_cast<double>(res.bytes_read) / res.tokens;
  res.reads_per_token = static_cast<double>(res.read_ops) / res.tokens;
  res.disk_busy_s = queue.busy_s();  // the whole replay's
  return res;
}

}  // namespace kx::sim
