// kairox-sim against the engine: the engine's split FFN runs on the sim device with a trace;
// the simulator replays that trace with the same policy, the same slots per layer and the
// same initial placement, and must plan the same loads and evictions at every (token, layer).
//
// When the two sequences are identical (docs/sim.md, "Checked against the engine"):
//   - a policy that plans from intensities and residency alone: static, lru, lfu, tam, tam-t
//     (the adaptive policies move λ with the measured device wait and CPU time, which a
//     replay cannot reproduce: here they part at token 9);
//   - every load has landed by its layer's next plan, in both: the engine's copies are made
//     instant (a sim profile with no latency and 1000 GB/s, and the test waits for the
//     background stream after each token, so thread scheduling cannot delay a landing), and
//     the simulator's link is as fast. Then each plan sees the same residency;
//   - the simulator's placement is the sidecar's calibration frequency averaged per group
//     (kairox-sim --placement sidecar), its budget the engine's slots per layer ÷ groups,
//     and every replayed step is a decode step over bundles (one token per Eval).
// Negative controls: one slot fewer, or the trace's own frequency for the placement, and the
// sequences differ.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/bundle_tier.h"
#include "engine/device_ffn.h"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "engine/tiny_sidecar.h"
#include "prepare/prepare.h"
#include "sim/disk_tier.h"
#include "sim/simulator.h"
#include "test_util.h"

namespace {

constexpr int kTokens = 32;
// The shape of kx::test::SparseFatReluSpec and its sidecar (checked where the model is made).
constexpr int kLayers = 3;
constexpr int kGroups = 128;  // n_ff 512 in groups of 4
constexpr int kGroupSize = 4;
constexpr int kEmbd = 64;

std::string TempDir() { return kx::test::TempDir("sim_engine"); }

struct Prepared {
  std::string model, sidecar;
};

// The split FFN's model (tiny_sidecar.h): most groups are idle in a step, so the online
// policies move groups every token.
const Prepared& Sparse() {
  static const Prepared p = [] {
    Prepared r;
    r.model = TempDir() + "/fatrelu.gguf";
    r.sidecar = TempDir() + "/fatrelu.kairox.gguf";
    const kx::test::TinyModelSpec s = kx::test::SparseFatReluSpec(98);
    const kx::test::TinySidecarOptions o = kx::test::SparseFatReluSidecar(/*brief=*/false);
    REQUIRE(s.n_layer == kLayers);
    REQUIRE(s.n_embd == kEmbd);
    REQUIRE(s.n_ff == kGroups * kGroupSize);
    REQUIRE(o.group_size == kGroupSize);
    const absl::Status st = kx::test::WriteTinyModelWithSidecar(s, r.model, r.sidecar, o);
    INFO(st.message());
    REQUIRE(st.ok());
    return r;
  }();
  return p;
}

// A sim device whose copies take no time (latency 0, 1000 GB/s, no jitter to scale).
void UseInstantProfile() {
  const std::string path = TempDir() + "/instant_profiles.json";
  std::ofstream(path) << R"({"default": "instant", "profiles": {"instant": {
      "description": "copies that land at once", "memory": "1GiB", "h2d_gb_per_s": 1000.0,
      "d2h_gb_per_s": 1000.0, "copy_latency_us": 0.0, "device_gb_per_s": 1000.0}}})";
  REQUIRE(::setenv("KAIROX_DEVICE_PROFILE", path.c_str(), 1) == 0);
}

struct EngineRun {
  std::vector<kx::DeviceFfnPlanRecord> plans;
  std::vector<float> placement;
  int slots = 0;
  uint64_t slot_bytes = 0;
  std::string trace, log;
};

EngineRun RunEngine(const std::string& policy) {
  EngineRun out;
  out.trace = TempDir() + "/" + policy + ".kxtr";
  out.log = TempDir() + "/" + policy + ".csv";
  kx::EngineOptions o;
  o.n_threads = 2;
  o.n_ctx = 128;
  o.sidecar = Sparse().sidecar;
  o.device = "sim";
  o.n_gpu_layers = 0;
  o.vram_ffn = "10%";
  o.device_policy = policy;
  o.trace_path = out.trace;
  o.device_log = out.log;
  auto e = kx::test::LoadEngine(Sparse().model, o);
  kx::SparseRuntime* sparse = e->sparse();
  REQUIRE(sparse != nullptr);
  kx::DeviceFfn* d = sparse->device_ffn();
  REQUIRE(d != nullptr);
  REQUIRE(sparse->UsesBundles(1));  // the trace keeps the split FFN
  d->set_record_plans(true);
  for (int32_t t : kx::test::RandomTokens(23, kTokens)) {
    REQUIRE(e->Eval(std::span<const int32_t>(&t, 1)).ok());
    REQUIRE(d->WaitForLoads().ok());  // every load lands before its layer's next plan
  }
  out.plans = d->plan_records();
  out.placement = sparse->sidecar().GroupFrequency();
  out.slots = d->slots_per_layer();
  out.slot_bytes = kx::DeviceFfn::SlotBytes(sparse->sidecar());
  REQUIRE(sparse->CloseTrace().ok());
  return out;  // the engine closes the device log
}

std::vector<kx::sim::PlanEvent> Replay(const EngineRun& run, const std::string& policy, int slots,
                                       bool sidecar_placement) {
  auto trace = kx::sim::LoadSimTrace(run.trace, {});
  INFO(trace.status().ToString());
  REQUIRE(trace.ok());
  REQUIRE(trace->n_steps == kTokens);
  REQUIRE(trace->n_groups == kGroups);
  kx::sim::SimHardware hw;
  hw.name = "instant";
  hw.h2d_bytes_per_s = hw.d2h_bytes_per_s = 1e12;  // a bundle lands in ~1 ns
  hw.device_bytes_per_s = hw.cpu_bytes_per_s = 1e12;
  hw.copy_latency_s = 0;
  hw.launch_s = 0;
  kx::sim::SimCosts costs;
  costs.neuron_bytes = run.slot_bytes / kGroupSize;
  costs.hidden_bytes = kEmbd * sizeof(float);
  costs.non_ffn_s = 1e-6;  // a layer's next plan comes ≥ 3 µs after its loads
  costs.per_token_s = 0;
  kx::sim::SimConfig config;
  config.policy = policy;
  config.budget = static_cast<double>(slots) / kGroups;
  if (sidecar_placement) config.placement_frequency = run.placement;
  std::vector<kx::sim::PlanEvent> events;
  config.on_plan = [&events](const kx::sim::PlanEvent& e) { events.push_back(e); };
  auto r = kx::sim::Simulate(*trace, hw, costs, config);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->slots_per_layer == slots);
  return events;
}

// The first (token, layer) where the two sequences differ, or -1.
int FirstDifference(const std::vector<kx::DeviceFfnPlanRecord>& engine,
                    const std::vector<kx::sim::PlanEvent>& sim) {
  const size_t n = std::min(engine.size(), sim.size());
  for (size_t i = 0; i < n; ++i) {
    const kx::DeviceFfnPlanRecord& e = engine[i];
    const kx::sim::PlanEvent& s = sim[i];
    if (e.token != s.step || e.layer != s.layer || e.load != s.plan.load ||
        e.evict != s.plan.evict) {
      return static_cast<int>(i);
    }
  }
  return engine.size() == sim.size() ? -1 : static_cast<int>(n);
}

std::string Describe(const std::vector<int32_t>& v) {
  std::ostringstream os;
  for (int32_t g : v) os << g << ' ';
  return os.str();
}

// Sums of the device log's loads and evictions columns (7th and 8th), and its rows.
struct LogSums {
  int64_t rows = 0, loads = 0, evictions = 0;
};

LogSums ReadLog(const std::string& path) {
  LogSums s;
  std::ifstream f(path);
  std::string line;
  REQUIRE(std::getline(f, line));  // header
  while (std::getline(f, line)) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    REQUIRE(cols.size() >= 11);  // the stall columns follow (docs/device.md)
    ++s.rows;
    s.loads += std::stoll(cols[6]);
    s.evictions += std::stoll(cols[7]);
  }
  return s;
}

}  // namespace

TEST_CASE("kairox-sim plans the engine's loads and evictions on the engine's trace",
          "[sim_engine]") {
  UseInstantProfile();
  for (const char* policy : {"static", "lru", "lfu", "tam", "tam-t"}) {
    DYNAMIC_SECTION(policy) {
      const EngineRun run = RunEngine(policy);
      REQUIRE(run.plans.size() == static_cast<size_t>(kTokens * kLayers));
      REQUIRE(run.slots == kGroups * 10 / 100);  // floor(12.8)
      int64_t loads = 0, evictions = 0;
      bool landed = true;
      for (const kx::DeviceFfnPlanRecord& p : run.plans) {
        loads += static_cast<int64_t>(p.load.size());
        evictions += static_cast<int64_t>(p.evict.size());
        landed &= p.loading == 0;
      }
      CHECK(landed);  // the condition: no plan ran with a load in flight
      // The device log agrees with the in-memory record.
      const LogSums log = ReadLog(run.log);
      CHECK(log.rows == kTokens * kLayers);
      CHECK(log.loads == loads);
      CHECK(log.evictions == evictions);
      if (std::string(policy) == "static") {
        CHECK(loads + evictions == 0);
      } else {
        INFO(loads << " loads, " << evictions << " evictions");
        CHECK(loads > 0);  // the groups move: the comparison is not of empty plans only
        CHECK(evictions > 0);
      }

      const auto sim = Replay(run, policy, run.slots, /*sidecar_placement=*/true);
      const int at = FirstDifference(run.plans, sim);
      if (at >= 0 && static_cast<size_t>(at) < std::min(run.plans.size(), sim.size())) {
        const auto& e = run.plans[at];
        const auto& s = sim[at];
        INFO("token " << e.token << " layer " << e.layer << ": engine loads " << Describe(e.load)
                      << "evicts " << Describe(e.evict) << "; sim (step " << s.step << " layer "
                      << s.layer << ") loads " << Describe(s.plan.load) << "evicts "
                      << Describe(s.plan.evict));
        CHECK(at == -1);
      } else {
        INFO("engine " << run.plans.size() << " plans, sim " << sim.size());
        CHECK(at == -1);
      }

      if (std::string(policy) == "lru") {
        // Negative controls: the comparison sees a different slot count or placement.
        CHECK(FirstDifference(run.plans, Replay(run, policy, run.slots - 1, true)) >= 0);
        CHECK(FirstDifference(run.plans, Replay(run, policy, run.slots, false)) >= 0);
      }
    }
  }
  ::unsetenv("KAIROX_DEVICE_PROFILE");
}

namespace {

// The RAM tier's run: its trace (with the tier's per-step reads, bytes and resident groups),
// its per-step log (hits, loads, evictions), and what the replay needs to match it.
struct TierRun {
  std::string trace, log;
  int slots = 0;
  std::vector<float> placement;
  kx::sim::BundleFile file;
  uint64_t neuron_bytes = 0;
  int64_t loads = 0, bytes = 0;
};

TierRun RunTier(const std::string& policy) {
  TierRun out;
  out.trace = TempDir() + "/tier-" + policy + ".kxtr";
  out.log = TempDir() + "/tier-" + policy + ".csv";
  {
    kx::EngineOptions o;
    o.n_threads = 2;
    o.n_ctx = 128;
    o.sidecar = Sparse().sidecar;
    o.ram_budget = "25%";
    o.policy = policy;
    o.trace_path = out.trace;
    o.tier_log = out.log;
    auto e = kx::test::LoadEngine(Sparse().model, o);
    kx::SparseRuntime* sparse = e->sparse();
    REQUIRE(sparse != nullptr);
    REQUIRE(sparse->tier() != nullptr);
    for (int32_t t : kx::test::RandomTokens(29, kTokens)) {
      REQUIRE(e->Eval(std::span<const int32_t>(&t, 1)).ok());
    }
    const kx::sparse::Sidecar& sc = sparse->sidecar();
    out.slots = sparse->tier()->slots_per_layer();
    out.placement = sc.GroupFrequency();
    out.file.stride = kx::BundleTier::SlotBytes(sc);
    out.file.lead = sc.layer(0).bundles_file_offset % out.file.page;
    out.neuron_bytes = out.file.stride / kGroupSize;
    out.loads = sparse->tier()->stats().loads;
    out.bytes = sparse->tier()->stats().bytes_read;
    REQUIRE(sparse->CloseTrace().ok());
  }  // the tier closes its log
  return out;
}

// The tier log's (hits, loads, evictions) per layer step, in order.
std::vector<std::array<int64_t, 3>> ReadTierLog(const std::string& path) {
  std::vector<std::array<int64_t, 3>> rows;
  std::ifstream f(path);
  std::string line;
  REQUIRE(std::getline(f, line));  // header
  while (std::getline(f, line)) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    REQUIRE(cols.size() >= 12);  // the decode graph's stall columns follow (docs/tiers.md)
    rows.push_back({std::stoll(cols[5]), std::stoll(cols[6]), std::stoll(cols[7])});
  }
  return rows;
}

// The first layer step where the replay's reads, bytes, resident groups, hits, loads or
// evictions differ from the engine's, as text; "" when none does.
std::string FirstTierDifference(const TierRun& run, const std::string& policy, int slots) {
  const kx::sim::SimTrace t = [&] {
    auto tr = kx::sim::LoadSimTrace(run.trace, {});
    INFO(tr.status().ToString());
    REQUIRE(tr.ok());
    return std::move(tr).value();
  }();
  REQUIRE(t.n_steps == kTokens);
  const auto log = ReadTierLog(run.log);
  REQUIRE(log.size() == static_cast<size_t>(kTokens * kLayers));
  kx::sim::CpuModel cpu;  // any times: these policies plan from the activity alone
  cpu.ffn_rate = {{1.0, 1e9}};
  kx::sim::DiskTierConfig config;
  config.policy = policy;
  config.slots = slots;
  config.placement_frequency = run.placement;
  std::string diff;
  size_t i = 0;
  config.on_step = [&](const kx::sim::DiskStepEvent& e) {
    const kx::sparse::LayerStats& rec = t.recorded_stats(e.step, e.layer);
    const auto& row = log[i++];
    if (!diff.empty()) return;
    if (rec.reads != static_cast<uint64_t>(e.read_ops) ||
        rec.bytes_read != static_cast<uint64_t>(e.bytes_read) ||
        rec.resident_groups != static_cast<uint64_t>(e.resident_groups) || row[0] != e.hits ||
        row[1] != static_cast<int64_t>(e.plan.load.size()) ||
        row[2] != static_cast<int64_t>(e.plan.evict.size())) {
      std::ostringstream os;
      os << "token " << e.step << " layer " << e.layer << ": engine " << rec.reads << " reads "
         << rec.bytes_read << " B " << rec.resident_groups << " resident, hits/loads/evictions "
         << row[0] << "/" << row[1] << "/" << row[2] << "; replay " << e.read_ops << " reads "
         << e.bytes_read << " B " << e.resident_groups << " resident, " << e.hits << "/"
         << e.plan.load.size() << "/" << e.plan.evict.size();
      diff = os.str();
    }
  };
  auto r = kx::sim::SimulateDiskTier(t, {.bytes_per_s = 1e9, .latency_s = 1e-5}, cpu,
                                     run.neuron_bytes, run.file, config);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(i == log.size());
  if (diff.empty() && slots == run.slots) {
    CHECK(r->loads == static_cast<uint64_t>(run.loads));
    CHECK(r->bytes_read == static_cast<uint64_t>(run.bytes));
  }
  return diff;
}

}  // namespace

// The RAM ⇄ disk tier: the engine's BundleTier at --ram-budget 25 % with a trace, replayed by
// kairox-sim's disk tier with the same policy, slots and placement: the same reads (page
// runs), bytes, resident groups, hits, loads and evictions at every (token, layer), layer-0
// speculation included. The adaptive policies move λ with measured times and are left out.
TEST_CASE("kairox-sim reads what the engine's RAM tier reads, step by step", "[sim_engine]") {
  for (const char* policy : {"static", "lru", "lfu", "topk", "tam", "tam-t"}) {
    DYNAMIC_SECTION(policy) {
      const TierRun run = RunTier(policy);
      REQUIRE(run.slots == kGroups / 4);
      INFO(run.bytes << " B read by the engine, " << run.loads << " loads");
      CHECK(run.bytes > 0);  // the comparison is not of empty reads
      if (std::string(policy) != "static") CHECK(run.loads > 0);
      const std::string diff = FirstTierDifference(run, policy, run.slots);
      INFO(diff);
      CHECK(diff.empty());
      if (std::string(policy) == "lru") {
        // Negative control: one slot fewer, and the reads differ.
        CHECK(!FirstTierDifference(run, policy, run.slots - 1).empty());
      }
    }
  }
}
