// The discrete-event replay. Per token, per layer (docs/sim.md, "Model of time"):
//   1. the non-FFN part (attention) runs; the PCIe link keeps moving reloads;
//   2. Prepare, as the engine's split FFN does it: the layer's reloads become
//      resident once all of them have landed (one event per layer), the policy plans with
//      intensity[g] = active/GS and the layer's last feedback, evictions apply at once, loads go on
//      the background queue;
//   3. predicted groups resident now are computed on the GPU (x up on the
//      critical queue, compute, partial sum down), the rest on the CPU, both at
//      once; the layer ends when the later branch ends;
//   4. feedback for the layer's next step: host wait on the device vs CPU time.
// With SimConfig::lookahead, step 2 of the next layer runs at the start of this layer's FFN
// (adjacent prediction), and a layer's landings are checked again when it starts.
#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "sim/pcie_link.h"

namespace kx::sim {
namespace {

constexpr double kGigabyte = 1e9;
// Slots are floor(budget · groups); this keeps 0.3 · 10 from rounding to 2.
constexpr double kBudgetSlack = 1e-9;

absl::Status PositiveField(double v, const char* what) {
  if (!(v > 0) || !std::isfinite(v))
    return absl::InvalidArgumentError(
        absl::StrFormat("kairox-sim: %s must be > 0 (got %g)", what, v));
  return absl::OkStatus();
}

absl::Status NonNegativeField(double v, const char* what) {
  if (!(v >= 0) || !std::isfinite(v))
    return absl::InvalidArgumentError(
        absl::StrFormat("kairox-sim: %s must be >= 0 (got %g)", what, v));
  return absl::OkStatus();
}

}  // namespace

SimHardware SimHardware::From(const DeviceProfile& p, double cpu_gb_per_s, double launch_s) {
  SimHardware hw;
  hw.name = p.name;
  hw.h2d_bytes_per_s = p.h2d_bytes_per_s;
  hw.d2h_bytes_per_s = p.d2h_bytes_per_s;
  hw.copy_latency_s = p.copy_latency_s;
  hw.device_bytes_per_s = p.device_bytes_per_s;
  hw.cpu_bytes_per_s = cpu_gb_per_s * kGigabyte;
  hw.launch_s = launch_s;
  return hw;
}

absl::Status ValidateSimInputs(const SimHardware& hw, const SimCosts& costs) {
  KX_RETURN_IF_ERROR(PositiveField(hw.h2d_bytes_per_s, "host-to-device bandwidth"));
  KX_RETURN_IF_ERROR(PositiveField(hw.d2h_bytes_per_s, "device-to-host bandwidth"));
  KX_RETURN_IF_ERROR(PositiveField(hw.device_bytes_per_s, "device memory bandwidth"));
  if (hw.cpu_ffn.ffn_rate.empty()) {
    KX_RETURN_IF_ERROR(PositiveField(hw.cpu_bytes_per_s, "CPU memory bandwidth"));
  } else {
    KX_RETURN_IF_ERROR(ValidateCpuModel(hw.cpu_ffn));
  }
  KX_RETURN_IF_ERROR(NonNegativeField(hw.copy_latency_s, "copy latency"));
  KX_RETURN_IF_ERROR(NonNegativeField(hw.launch_s, "kernel launch time"));
  KX_RETURN_IF_ERROR(NonNegativeField(hw.staging_bytes_per_s, "staging copy bandwidth"));
  KX_RETURN_IF_ERROR(PositiveField(static_cast<double>(costs.neuron_bytes), "bytes per neuron"));
  KX_RETURN_IF_ERROR(PositiveField(static_cast<double>(costs.hidden_bytes), "hidden-state bytes"));
  if (std::isnan(costs.non_ffn_s) || std::isnan(costs.per_token_s) || std::isinf(costs.non_ffn_s) ||
      std::isinf(costs.per_token_s)) {
    return absl::InvalidArgumentError("kairox-sim: non-FFN and per-token times must be finite");
  }
  return absl::OkStatus();
}

absl::StatusOr<SimResult> Simulate(const SimTrace& trace, const SimHardware& hw,
                                   const SimCosts& costs, const SimConfig& config) {
  KX_RETURN_IF_ERROR(ValidateSimInputs(hw, costs));
  if (!(config.budget >= 0 && config.budget <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kairox-sim: budget %g is not a share in [0, 1]", config.budget));
  }
  KX_ASSIGN_OR_RETURN(std::unique_ptr<policy::Policy> pol,
                      policy::MakePolicy(config.policy, config.options));
  const int n_layer = trace.n_layer, n_groups = trace.n_groups;
  const size_t n_cells = static_cast<size_t>(n_layer) * n_groups;
  if (!config.placement_frequency.empty() && config.placement_frequency.size() != n_cells) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kairox-sim: placement frequency has %zu entries; the trace needs %zu (%d layers x %d "
        "groups)",
        config.placement_frequency.size(), n_cells, n_layer, n_groups));
  }

  std::vector<int> capacity(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    capacity[l] =
        static_cast<int>(std::floor(config.budget * trace.groups_in_layer[l] + kBudgetSlack));
  }
  policy::Residency r(n_groups, capacity);
  policy::PlacementStats ps;
  ps.n_layer = n_layer;
  ps.n_groups = n_groups;
  ps.bundle_bytes = static_cast<uint64_t>(trace.group_size) * costs.neuron_bytes;
  ps.frequency =
      config.placement_frequency.empty() ? trace.MeanIntensity() : config.placement_frequency;
  std::vector<std::pair<int, int>> initial;
  pol->Place(ps, r, &initial);
  policy::ApplyLoadsNow(initial, r);  // loaded before the first token: free

  // Fixed times.
  const double latency = hw.copy_latency_s;
  const double up_s = latency + static_cast<double>(costs.hidden_bytes) / hw.h2d_bytes_per_s;
  const double down_s = latency + static_cast<double>(costs.hidden_bytes) / hw.d2h_bytes_per_s;
  const double non_ffn_s =
      costs.non_ffn_s >= 0
          ? costs.non_ffn_s
          : static_cast<double>(costs.attn_bytes) / hw.device_bytes_per_s + hw.launch_s;
  double per_token_s = costs.per_token_s;
  if (per_token_s < 0) {
    per_token_s = costs.head_bytes > 0
                      ? static_cast<double>(costs.head_bytes) / hw.device_bytes_per_s + hw.launch_s
                      : 0.0;
  }
  const double nb = static_cast<double>(costs.neuron_bytes);

  SimResult res;
  res.policy = std::string(pol->name());
  res.hardware = hw.name;
  res.budget = config.budget;
  res.slots_per_layer = *std::max_element(capacity.begin(), capacity.end());
  res.tokens = trace.n_steps;

  PcieLink link;
  std::vector<Reload> landed;
  // The engine's split FFN records one event per layer after the loads a plan queues and
  // moves the layer's loading groups to resident only when that event (its latest) has
  // completed: a layer's loads become usable together, when the last one queued so far
  // has landed. Per layer: reloads on the link, groups landed but not usable yet, and groups
  // made resident since the layer's last plan (PlanEvent::landed_before).
  std::vector<int> in_flight(n_layer, 0);
  std::vector<std::vector<int>> arrived(n_layer), completed(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    arrived[l].reserve(n_groups);
    completed[l].reserve(n_groups);
  }
  std::vector<policy::Feedback> feedback(n_layer);
  std::vector<float> intensity(n_groups, 0.0f);
  std::vector<uint8_t> planned(n_layer, 0);  // lookahead: the layer's coming step is planned
  std::vector<int> pinned;
  pinned.reserve(n_groups);
  policy::Plan plan;
  PlanEvent event;
  uint64_t gpu_neurons_total = 0, neurons_total = 0;
  const float gs = static_cast<float>(trace.group_size);
  double now = 0;
  double staging_pending_s = 0;  // the host's staging copies since the last CPU branch

  auto complete_loads = [&](int layer) {
    if (in_flight[layer] != 0) return;
    for (int g : arrived[layer]) {
      r.CompleteLoad(layer, g);
      completed[layer].push_back(g);
    }
    arrived[layer].clear();
  };
  // Prepare of (step, layer) at time t: the policy plans, evictions apply, loads are queued.
  auto prepare = [&](int step, int layer, double t) {
    complete_loads(layer);
    const uint16_t* counts = trace.counts(step, layer);
    // count / GS as the engine's Prepare computes it (a product with 1/GS can differ in
    // the last bit when GS is not a power of two, and TAM's ranking with it).
    for (int g = 0; g < n_groups; ++g) intensity[g] = static_cast<float>(counts[g]) / gs;
    pol->PlanLayer(layer, intensity.data(), feedback[layer], policy::Window{}, r, &plan);
    if (config.on_plan) {
      event.step = step;
      event.layer = layer;
      event.feedback = feedback[layer];
      event.plan = plan;
      event.lambda = pol->lambda(layer);
      event.landed_before.clear();
      for (int g : completed[layer]) event.landed_before.emplace_back(layer, g);
      config.on_plan(event);
    }
    completed[layer].clear();
    for (int32_t g : plan.evict) r.Evict(layer, g);
    res.evictions += plan.evict.size();
    for (int32_t g : plan.load) {
      const int slot = r.free_slot(layer);
      KX_CHECK_MSG(slot >= 0, "kairox-sim: the policy's plan exceeds the slots");
      r.BeginLoad(layer, g, slot);
      Reload reload;
      reload.layer = layer;
      reload.group = g;
      reload.bytes = static_cast<uint64_t>(trace.group_neurons(layer, g)) * costs.neuron_bytes;
      reload.seconds = latency + static_cast<double>(reload.bytes) / hw.h2d_bytes_per_s;
      res.reload_bytes += reload.bytes;
      if (hw.staging_bytes_per_s > 0) {
        staging_pending_s += static_cast<double>(reload.bytes) / hw.staging_bytes_per_s;
      }
      link.Enqueue(reload, t);
      ++in_flight[layer];
    }
    res.loads += plan.load.size();
  };

  for (int step = 0; step < trace.n_steps; ++step) {
    for (int layer = 0; layer < n_layer; ++layer) {
      now += non_ffn_s;
      res.stalls.other_s += non_ffn_s;
      const double t0 = now;

      landed.clear();
      link.Advance(t0, &landed);
      for (const Reload& done : landed) {
        --in_flight[done.layer];
        arrived[done.layer].push_back(done.group);
      }
      // Begin: a layer planned one layer ahead checks its landings again.
      complete_loads(layer);
      if (!planned[layer]) prepare(step, layer, t0);
      planned[layer] = 0;

      // Split: resident predicted groups on the GPU, the rest on the CPU.
      const uint16_t* counts = trace.counts(step, layer);
      uint64_t gpu_neurons = 0, cpu_neurons = 0;
      for (int g = 0; g < n_groups; ++g) {
        if (counts[g] == 0) continue;
        ++res.groups_needed;
        if (r.resident(layer, g)) {
          ++res.hits;
          gpu_neurons += counts[g];
        } else {
          if (r.loading(layer, g)) ++res.late;
          cpu_neurons += counts[g];
        }
      }

      // Lookahead (the engine's adjacent prediction): the next layer, or layer 0 of the next
      // token at the last layer, is planned now, so its loads can land before it runs. The
      // slots this layer computes from are pinned, as the engine's are, in case the next
      // layer is this one (a one-layer model).
      if (config.lookahead) {
        const bool wrap = layer + 1 == n_layer;
        const int next_step = wrap ? step + 1 : step, next_layer = wrap ? 0 : layer + 1;
        if (next_step < trace.n_steps) {
          pinned.clear();
          if (next_layer == layer) {
            for (int g = 0; g < n_groups; ++g) {
              if (counts[g] > 0 && r.resident(layer, g)) {
                pinned.push_back(r.slot_of(layer, g));
                r.Pin(layer, pinned.back());
              }
            }
          }
          prepare(next_step, next_layer, t0);
          planned[next_layer] = 1;
          for (int slot : pinned) r.Unpin(layer, slot);
        }
      }

      gpu_neurons_total += gpu_neurons;
      neurons_total += gpu_neurons + cpu_neurons;
      // The CPU branch: the host's staging copies of this layer's Prepares, then its share.
      const double cpu_s =
          staging_pending_s +
          (hw.cpu_ffn.ffn_rate.empty()
               ? static_cast<double>(cpu_neurons) * nb / hw.cpu_bytes_per_s
               : hw.cpu_ffn.FfnSeconds(cpu_neurons, trace.n_ff[static_cast<size_t>(layer)],
                                       costs.neuron_bytes));
      res.staging_s += staging_pending_s;
      staging_pending_s = 0;
      double gpu_path = 0, bg_wait = 0, gpu_s = 0;
      if (gpu_neurons > 0) {
        const PcieLink::Copy up = link.Critical(t0, up_s);
        bg_wait = up.start - t0;
        gpu_s = hw.launch_s + static_cast<double>(gpu_neurons) * nb / hw.device_bytes_per_s;
        gpu_path = (up.end + gpu_s + down_s) - t0;
      }
      res.cpu_busy_s += cpu_s;
      res.gpu_busy_s += gpu_s;
      if (cpu_s >= gpu_path) {
        res.stalls.cpu_s += cpu_s;
      } else {
        res.stalls.h2d_background_s += bg_wait;
        res.stalls.h2d_critical_s += up_s + down_s;
        res.stalls.gpu_s += gpu_s;
      }
      now = t0 + std::max(cpu_s, gpu_path);
      feedback[layer].io_wait_s = std::max(0.0, gpu_path - cpu_s);
      feedback[layer].cpu_s = cpu_s;
    }
    now += per_token_s;
    res.stalls.other_s += per_token_s;
  }

  landed.clear();
  link.Advance(now, &landed);  // count the link time of reloads done by the end
  res.seconds = now;
  res.tokens_per_s = now > 0 ? res.tokens / now : 0;
  res.reload_bytes_per_token = static_cast<double>(res.reload_bytes) / res.tokens;
  res.hit_rate = res.groups_needed > 0
                     ? static_cast<double>(res.hits) / static_cast<double>(res.groups_needed)
                     : 1.0;
  res.gpu_neuron_share = neurons_total > 0 ? static_cast<double>(gpu_neurons_total) /
                                                 static_cast<double>(neurons_total)
                                           : 0.0;
  res.reload_link_s = link.reload_busy_s();
  double lambda_sum = 0;
  for (int l = 0; l < n_layer; ++l) lambda_sum += pol->lambda(l);
  res.mean_lambda = lambda_sum / n_layer;
  return res;
}

}  // namespace kx::sim
