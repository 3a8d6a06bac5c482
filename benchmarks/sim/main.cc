// kairox-sim: replays a .kxtr activity trace (kairox-cli --trace) through the
// placement/balancing policies against device profiles and VRAM budgets, and
// prints simulated tokens/s, reload bytes, hit rate and the stall breakdown.
//   kairox-sim TRACE [--profile a,b] [--policy p,q] [--budget 10,30,50] [--csv|--json]
// The model of time and its limits: docs/sim.md.
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "common/cli_app.h"
#include "disk_mode.h"
#include "nlohmann/json.hpp"
#include "policy/policy.h"
#include "shape.h"
#include "sim/cpu_model.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"

namespace {

constexpr const char* kDescription =
    "kairox-sim: replays an activity trace (kairox-cli --trace PATH) through the policies of\n"
    "lib/policy on a device profile, per VRAM budget (share of each layer's FFN groups with a\n"
    "device slot): simulated tokens/s, reload bytes, hit rate, stall breakdown. docs/sim.md.";

// The CPU sparse FFN's read rate on this machine: SmolLM2's dense FFN (1.66 MB a layer) walked
// from DRAM in 43-46 µs on 2 threads, docs/sparsity.md (load 1.7). kairox-bench's DRAM probe
// reads 2.4 GB/s here under load 12: pass your machine's own with --cpu-gb-per-s.
constexpr double kDefaultCpuGbPerS = 37.0;
constexpr double kMicro = 1e-6;
constexpr double kDefaultLaunchUs = 5.0;  // kx::sim::kDefaultLaunchSeconds in µs
constexpr double kPercent = 100.0;
// Counts per group are 16-bit; a group this wide is one bundle of a whole layer already.
constexpr int64_t kMaxGroupSize = 32768;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-sim: error: %s\n", msg.c_str());
  return 1;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    if (j > i) out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// The trace metadata's `key` ("model", "sidecar"), or "".
std::string MetadataPath(const std::string& json, const char* key) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return {};
  return j[key].get<std::string>();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "kairox-sim");
  kx::cli::SetUp(app);
  std::string trace_path, profiles = "rtx4090-pcie4", policies, budgets = "10,30,50,70,90";
  std::string model_path, sidecar_path, placement = "trace", plan_with = "predicted";
  std::string plan_log;
  double cpu_gb_per_s = kDefaultCpuGbPerS, launch_us = kDefaultLaunchUs, staging_gb_per_s = 0;
  double non_ffn_us = -1, per_token_us = -1, lambda = kx::policy::PolicyOptions{}.lambda;
  int64_t neuron_bytes = 0, first_step = 0, steps = 0, group_size = 0;
  bool csv = false, json = false, no_sidecar = false, lookahead = false, evict_needed = false;
  std::string ram_budgets, cpu_profile;
  kx::sim_cli::DiskModeArgs disk;
  bool no_prefetch = false, no_speculate = false;
  int64_t time_from_step = 0;
  app.add_option("trace,-t,--trace", trace_path, "activity trace (.kxtr) to replay")
      ->required()
      ->type_name("PATH");
  app.add_option("--profile", profiles,
                 "device profiles, comma-separated (lib/device/profiles.json or "
                 "$KAIROX_DEVICE_PROFILE)")
      ->type_name("a,b,...");
  app.add_option("--policy", policies, "policies, comma-separated (default: all)")
      ->type_name("a,b,...");
  app.add_option("--budget", budgets, "VRAM budgets in % of each layer's FFN groups")
      ->type_name("a,b,...");
  kx::cli::AddNumber(app, "--cpu-gb-per-s", &cpu_gb_per_s,
                     "CPU read bandwidth in GB/s for the CPU's share of the FFN (pass what "
                     "kairox-bench reports as its DRAM bandwidth)");
  kx::cli::AddNumber(app, "--launch-us", &launch_us, "GPU kernel launch overhead per layer part");
  kx::cli::AddNumber(app, "--staging-gb-per-s", &staging_gb_per_s,
                     "the host's copy of each reload into the pinned staging ring, GB/s (one "
                     "core's memcpy rate), added to the layer's CPU branch; 0: not modelled");
  kx::cli::AddNumber(app, "--non-ffn-us", &non_ffn_us,
                     "non-FFN time per layer; < 0: the model's attention bytes / device bandwidth "
                     "+ one launch");
  kx::cli::AddNumber(app, "--per-token-us", &per_token_us,
                     "time per token after the last layer; < 0: LM head bytes / device bandwidth "
                     "+ one launch");
  app.add_option("-m,--model", model_path, "the trace's model GGUF (default: the trace metadata's)")
      ->type_name("PATH");
  app.add_option("--sidecar", sidecar_path,
                 "its sidecar, for the bundle stride and --placement sidecar (default: the trace "
                 "metadata's, when it exists)")
      ->type_name("PATH");
  app.add_flag("--no-sidecar", no_sidecar, "do not read a sidecar");
  kx::cli::AddInt(app, "--neuron-bytes", &neuron_bytes, 0, kx::cli::kMaxCount,
                  "bytes of one neuron's up+gate rows and down share (0: from the model/sidecar)");
  app.add_option("--placement", placement,
                 "initial placement frequency: trace (the replayed tokens' own mean activity, an "
                 "oracle) or sidecar (its calibration frequency, what the engine uses)")
      ->check(kx::cli::OneOf({"trace", "sidecar"}))
      ->type_name("trace|sidecar");
  kx::cli::AddInt(app, "--first-step", &first_step, 0, UINT32_MAX,
                  "replay from this trace step (the prompt's tokens come first)");
  kx::cli::AddInt(app, "--steps", &steps, 0, UINT32_MAX, "replay at most this many steps (0: all)");
  kx::cli::AddNumber(app, "--lambda", &lambda,
                     "TAM's λ: fixed for tam/tam-t, the start of the adaptive policies");
  kx::cli::AddInt(app, "--group-size", &group_size, 0, kMaxGroupSize,
                  "regroup the trace into groups of N consecutive neurons (the sidecar's order; "
                  "merges or splits its groups, bytes per neuron unchanged); 0: the trace's");
  app.add_option("--plan-with", plan_with,
                 "the neuron sets replayed: predicted (what the engine plans and computes with) "
                 "or actual (the neurons that fired: an oracle predictor)")
      ->check(kx::cli::OneOf({"predicted", "actual"}))
      ->type_name("predicted|actual");
  app.add_flag("--evict-needed", evict_needed,
               "tam*/topk may evict residents needed in the step (Algorithm 1 literally; not "
               "the engine's contract): swaps a weak needed group for a stronger absent one");
  app.add_option("--plan-log", plan_log,
                 "CSV of every plan (profile, policy, budget, step, layer, loads, evictions, "
                 "lambda, io_wait_us, cpu_us): Fig. 11's λ and reloads per step")
      ->type_name("PATH");
  app.add_flag("--lookahead", lookahead,
               "plan each layer one layer ahead, as the engine does (adjacent prediction): its "
               "loads can land before it runs");
  app.add_option("--ram-budget", ram_budgets,
                 "RAM tier mode: RAM budgets in % of each layer's bundles (the engine's "
                 "--ram-budget P%); replays the bundle tier against the disk and the CPU profile")
      ->type_name("a,b,...");
  app.add_option("--cpu-profile", cpu_profile,
                 "the CPU's measured rates (JSON, docs/sim.md \"The calibrated CPU model\"); "
                 "required with --ram-budget; otherwise its FFN rate curve replaces "
                 "--cpu-gb-per-s for the CPU's share of the split FFN")
      ->type_name("PATH");
  kx::cli::AddNumber(app, "--disk-gb-per-s", &disk.disk_gb_per_s,
                     "RAM tier: the disk's O_DIRECT read bandwidth (bench_io's sequential)");
  kx::cli::AddNumber(app, "--disk-latency-us", &disk.disk_latency_us,
                     "RAM tier: per read, before the first byte (bench_io's depth-1 reads)");
  kx::cli::AddNumber(app, "--copy-gb-per-s", &disk.copy_gb_per_s,
                     "RAM tier: mirror-to-slot copies of admitted groups (0: free)");
  app.add_flag("--no-prefetch", no_prefetch, "RAM tier: reads start when the layer runs");
  app.add_flag("--no-speculate", no_speculate,
               "RAM tier: no speculative layer-0 reads (KAIROX_TIER_SPECULATE=0)");
  kx::cli::AddInt(app, "--time-from-step", &time_from_step, 0, UINT32_MAX,
                  "RAM tier: replay every step, time those from this step (the decode)");
  app.add_flag("--csv", csv, "print CSV instead of a markdown table");
  app.add_flag("--json", json, "print JSON instead of a markdown table");
  if (const int rc = kx::cli::Parse(app, argc, argv); rc >= 0) return rc;
  if (csv && json) return Fail("--csv and --json exclude each other");

  kx::sim::SimTraceOptions to;
  to.first_step = static_cast<uint32_t>(first_step);
  to.max_steps = static_cast<uint32_t>(steps);
  to.group_size = static_cast<uint32_t>(group_size);
  to.use_actual = plan_with == "actual";
  auto trace = kx::sim::LoadSimTrace(trace_path, to);
  if (!trace.ok()) return Fail(trace.status().ToString());
  const kx::sim::SimTrace& t = *trace;

  // The model's shape: from the GGUF files unless every number was given.
  if (model_path.empty()) model_path = MetadataPath(t.metadata_json, "model");
  if (sidecar_path.empty() && !no_sidecar) {
    sidecar_path = MetadataPath(t.metadata_json, "sidecar");
    std::error_code ec;
    if (!sidecar_path.empty() && !std::filesystem::exists(sidecar_path, ec)) sidecar_path.clear();
  }
  if (no_sidecar) sidecar_path.clear();
  kx::sim_cli::ModelShape shape;
  if (!model_path.empty()) {
    auto s = kx::sim_cli::ReadModelShape(model_path, sidecar_path, t.n_groups, t.group_size);
    if (!s.ok()) return Fail(s.status().ToString());
    shape = std::move(s).value();
    if (shape.n_ff != static_cast<int64_t>(t.n_ff[0]) || shape.n_layer != t.n_layer) {
      return Fail(absl::StrCat("the trace has ", t.n_layer, " layers of ", t.n_ff[0],
                               " neurons; the model ", model_path, " has ", shape.n_layer, " of ",
                               shape.n_ff));
    }
    if (!shape.sidecar_path.empty() && shape.sidecar_group_size != t.trace_group_size) {
      return Fail(absl::StrCat("the trace's group size ", t.trace_group_size,
                               " is not the sidecar's ", shape.sidecar_group_size, " (",
                               shape.sidecar_path, ")"));
    }
  } else if (neuron_bytes == 0) {
    return Fail("the trace names no model: pass -m MODEL, or --neuron-bytes with --non-ffn-us");
  }
  kx::sim::SimCosts costs;
  costs.neuron_bytes = neuron_bytes > 0 ? static_cast<uint64_t>(neuron_bytes) : shape.neuron_bytes;
  costs.hidden_bytes = static_cast<uint64_t>(shape.n_embd > 0 ? shape.n_embd : 0) * sizeof(float);
  if (costs.hidden_bytes == 0) return Fail("no model shape: pass -m MODEL for the hidden size");
  costs.non_ffn_s = non_ffn_us >= 0 ? non_ffn_us * kMicro : -1;
  costs.attn_bytes = shape.attn_bytes;
  costs.per_token_s = per_token_us >= 0 ? per_token_us * kMicro : -1;
  costs.head_bytes = shape.head_bytes;
  if (placement == "sidecar" && shape.group_frequency.empty())
    return Fail("--placement sidecar needs a sidecar (--sidecar PATH)");

  std::vector<std::string> policy_list;
  if (policies.empty()) {
    for (std::string_view n : kx::policy::PolicyNames()) policy_list.emplace_back(n);
  } else {
    policy_list = SplitList(policies);
  }
  if (!ram_budgets.empty()) {
    if (cpu_profile.empty()) return Fail("--ram-budget needs --cpu-profile PATH");
    if (!(disk.disk_gb_per_s > 0)) return Fail("--ram-budget needs --disk-gb-per-s > 0");
    if (json) return Fail("--ram-budget prints a table or --csv, not --json");
    if (t.group_size != t.trace_group_size)  // the tier reads the sidecar's own bundles
      return Fail("--ram-budget replays the sidecar's groups: drop --group-size");
    auto rates = kx::sim::LoadCpuRates(cpu_profile);
    if (!rates.ok()) return Fail(rates.status().ToString());
    const kx::sim::CpuModel cpu = rates->ToModel({.attn_bytes = shape.attn_bytes,
                                                  .kv_bytes_per_ctx = shape.kv_bytes_per_ctx,
                                                  .head_bytes = shape.head_bytes});
    disk.policies = policy_list;
    for (const std::string& b : SplitList(ram_budgets)) {
      char* end = nullptr;
      const double v = std::strtod(b.c_str(), &end);
      if (end == b.c_str() || *end != '\0' || !(v >= 0 && v <= kPercent))
        return Fail("--ram-budget: '" + b + "' is not a percentage in [0, 100]");
      disk.budgets.push_back(v / kPercent);
    }
    disk.prefetch = !no_prefetch;
    disk.speculate = !no_speculate;
    // The engine places from the sidecar: the oracle only when asked for by name.
    disk.trace_placement = app.count("--placement") > 0 && placement == "trace";
    disk.time_from_step = static_cast<uint32_t>(time_from_step);
    disk.csv = csv;
    return kx::sim_cli::RunDiskMode(disk, t, shape, cpu);
  }
  std::vector<double> budget_list;
  for (const std::string& b : SplitList(budgets)) {
    char* end = nullptr;
    const double v = std::strtod(b.c_str(), &end);
    if (end == b.c_str() || *end != '\0' || !(v >= 0 && v <= kPercent))
      return Fail("--budget: '" + b + "' is not a percentage in [0, 100]");
    budget_list.push_back(v / kPercent);
  }

  std::FILE* log = nullptr;
  if (!plan_log.empty()) {
    log = std::fopen(plan_log.c_str(), "w");
    if (log == nullptr) return Fail("--plan-log: cannot write " + plan_log);
    std::fputs("hardware,policy,budget,step,layer,loads,evictions,lambda,io_wait_us,cpu_us\n", log);
  }
  std::vector<kx::sim::SimResult> rows;
  for (const std::string& profile_name : SplitList(profiles)) {
    auto profile = kx::LoadDeviceProfile(profile_name);
    if (!profile.ok()) return Fail(profile.status().ToString());
    kx::sim::SimHardware hw =
        kx::sim::SimHardware::From(*profile, cpu_gb_per_s, launch_us * kMicro);
    hw.staging_bytes_per_s = staging_gb_per_s * 1e9;
    if (!cpu_profile.empty()) {  // the calibrated FFN rate curve replaces --cpu-gb-per-s
      auto rates = kx::sim::LoadCpuRates(cpu_profile);
      if (!rates.ok()) return Fail(rates.status().ToString());
      hw.cpu_ffn.ffn_rate = rates->ffn_rate;
    }
    for (const std::string& name : policy_list) {
      for (double budget : budget_list) {
        kx::sim::SimConfig config;
        config.policy = name;
        config.options.lambda = lambda;
        config.options.evict_needed = evict_needed;
        config.budget = budget;
        config.lookahead = lookahead;
        if (placement == "sidecar") config.placement_frequency = shape.group_frequency;
        if (log != nullptr) {
          config.on_plan = [&, log](const kx::sim::PlanEvent& e) {
            std::fprintf(log, "%s,%s,%g,%u,%d,%zu,%zu,%.6g,%.6g,%.6g\n", hw.name.c_str(),
                         name.c_str(), budget, t.step_ids[static_cast<size_t>(e.step)], e.layer,
                         e.plan.load.size(), e.plan.evict.size(), e.lambda,
                         e.feedback.io_wait_s / kMicro, e.feedback.cpu_s / kMicro);
          };
        }
        auto r = kx::sim::Simulate(t, hw, costs, config);
        if (!r.ok()) return Fail(r.status().ToString());
        rows.push_back(std::move(r).value());
      }
    }
  }

  if (log != nullptr && std::fclose(log) != 0) return Fail("--plan-log: cannot write " + plan_log);
  const nlohmann::json inputs = {{"trace", trace_path},
                                 {"tokens", t.n_steps},
                                 {"first_step", t.step_ids.front()},
                                 {"n_layer", t.n_layer},
                                 {"group_size", t.group_size},
                                 {"trace_group_size", t.trace_group_size},
                                 {"plan_with", plan_with},
                                 {"lookahead", lookahead},
                                 {"evict_needed", evict_needed},
                                 {"groups_per_layer", t.n_groups},
                                 {"model", model_path},
                                 {"sidecar", shape.sidecar_path},
                                 {"neuron_bytes", costs.neuron_bytes},
                                 {"hidden_bytes", costs.hidden_bytes},
                                 {"attn_bytes", costs.attn_bytes},
                                 {"head_bytes", costs.head_bytes},
                                 {"kv_bytes_per_ctx", shape.kv_bytes_per_ctx},
                                 {"n_ff", t.n_ff[0]},
                                 {"non_ffn_us", non_ffn_us},
                                 {"per_token_us", per_token_us},
                                 {"cpu_gb_per_s", cpu_gb_per_s},
                                 {"launch_us", launch_us},
                                 {"placement", placement}};
  if (json) {
    std::fputs(kx::sim::FormatJson(rows, inputs.dump()).c_str(), stdout);
  } else if (csv) {
    std::fputs(kx::sim::FormatCsv(rows).c_str(), stdout);
  } else {
    std::printf(
        "kairox-sim: %s, %d tokens (steps %u..%u), %d layers x %d groups of %d; %llu B/neuron, "
        "CPU %.1f GB/s, placement from the %s, %s sets%s\n\n",
        trace_path.c_str(), t.n_steps, t.step_ids.front(), t.step_ids.back(), t.n_layer, t.n_groups,
        t.group_size, static_cast<unsigned long long>(costs.neuron_bytes), cpu_gb_per_s,
        placement == "trace" ? "trace (oracle)" : "sidecar", plan_with.c_str(),
        lookahead ? ", one layer ahead" : "");
    std::fputs(kx::sim::FormatMarkdown(rows).c_str(), stdout);
  }
  return 0;
}
