// Replays checked against times computed by hand, and properties that hold by
// construction: static never reloads, a full budget hits every needed group,
// the stall parts add up to the wall time, replays are deterministic.
#include <cstdio>
#include <fstream>

#include "catch2/catch.hpp"
#include "device/device_profile.h"
#include "sim/sim_report.h"
#include "sim_test_util.h"
#include "test_util.h"

namespace kx::sim {
namespace {

using test_util::Counts;

constexpr double kUs = 1e-6;
// Times are sums of a few microsecond terms in double: equal to ~1e-12 relative.
Approx Us(double us) { return Approx(us * kUs).epsilon(1e-9).margin(1e-15); }

TEST_CASE("sim: static placement, 1 layer x 4 groups, by hand", "[sim][hand]") {
  // Mean intensities 1, 0.25, 0.375, 0.125: two slots hold groups 0 and 2.
  const Counts counts = {{{4, 2, 1, 0}}, {{4, 0, 2, 1}}};
  const std::string path = test_util::TempTracePath("static");
  test_util::WriteTrace(path, 4, counts);
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  SimConfig config;
  config.policy = "static";
  config.budget = 0.5;
  const SimResult r =
      test_util::RunOrFail(t, test_util::RoundHardware(), test_util::RoundCosts(10), config);
  // Step 0: attention 0–10; GPU g0+g2 = 5 neurons: up 10–12, compute 1+5 = 6 → 18, down → 20;
  //         CPU g1 = 2 neurons = 4 µs. Step 1: attention 20–30; GPU 4+2 = 6 neurons: up 30–32,
  //         compute 7 → 39, down → 41; CPU g3 = 2 µs.
  CHECK(r.slots_per_layer == 2);
  CHECK(r.seconds == Us(41));
  CHECK(r.tokens_per_s == Approx(2 / (41 * kUs)).epsilon(1e-9));
  CHECK(r.loads == 0);
  CHECK(r.reload_bytes == 0);
  CHECK(r.groups_needed == 6);
  CHECK(r.hits == 4);
  CHECK(r.hit_rate == Approx(4.0 / 6));
  CHECK(r.gpu_neuron_share == Approx(11.0 / 14));
  CHECK(r.stalls.gpu_s == Us(13));
  CHECK(r.stalls.h2d_critical_s == Us(8));
  CHECK(r.stalls.cpu_s == 0);
  CHECK(r.stalls.h2d_background_s == 0);
  CHECK(r.stalls.other_s == Us(20));
  CHECK(r.cpu_busy_s == Us(6));
  CHECK(r.gpu_busy_s == Us(13));
}

TEST_CASE("sim: the calibrated CPU rate curve prices the CPU branch, by hand", "[sim][hand]") {
  // The static case above with a slow CPU whose rate depends on the CPU's share of the layer's
  // 16 neurons: 0.05 GB/s at 1/16, 0.1 GB/s at 2/16.
  const Counts counts = {{{4, 2, 1, 0}}, {{4, 0, 2, 1}}};
  const std::string path = test_util::TempTracePath("curve");
  test_util::WriteTrace(path, 4, counts);
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  SimConfig config;
  config.policy = "static";
  config.budget = 0.5;
  SimHardware hw = test_util::RoundHardware();
  hw.cpu_ffn.ffn_rate = {{1.0 / 16, 0.05e9}, {2.0 / 16, 0.1e9}};
  const SimResult r = test_util::RunOrFail(t, hw, test_util::RoundCosts(10), config);
  // Step 0: the CPU's g1 = 2 neurons, 2000 B at 0.1 GB/s = 20 µs, longer than the GPU's 10:
  //         10 → 30. Step 1: attention 30–40; g3 = 1 neuron, 1000 B at 0.05 GB/s = 20 µs, the
  //         GPU's path 11 µs: 40 → 60.
  CHECK(r.seconds == Us(60));
  CHECK(r.cpu_busy_s == Us(40));
  CHECK(r.stalls.cpu_s == Us(40));
  CHECK(r.stalls.other_s == Us(20));
  hw.cpu_ffn.ffn_rate = {{0.5, 1e9}, {0.25, 1e9}};  // unsorted: refused
  CHECK(!Simulate(t, hw, test_util::RoundCosts(10), config).ok());
}

// 1 layer x 4 groups, two steps; LRU at 50 % from a placement of g0, g2: the two reload
// cases below.
SimTrace LruTrace() {
  const Counts counts = {{{0, 2, 0, 1}}, {{0, 4, 0, 2}}};
  const std::string path = test_util::TempTracePath("lru");
  test_util::WriteTrace(path, 4, counts);
  SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  return t;
}

SimConfig LruConfig() {
  SimConfig config;
  config.policy = "lru";
  config.budget = 0.5;
  config.placement_frequency = {0.9f, 0.1f, 0.8f, 0.05f};  // places g0, g2
  return config;
}

TEST_CASE("sim: LRU reloads that become usable together, by hand", "[sim][hand]") {
  const SimTrace t = LruTrace();
  const SimConfig config = LruConfig();
  const SimResult r =
      test_util::RunOrFail(t, test_util::RoundHardware(), test_util::RoundCosts(2), config);
  // Step 0: attention 0–2; LRU evicts g0, g2 and loads g1 (link 2–7), g3 (7–12); nothing
  //         resident is needed (g1, g3 are late: loading), so no GPU part: CPU 3 neurons = 6 µs
  //         → 8.
  // Step 1: attention 8–10; g1 landed at 7, but g3 is on the link until 12, and the layer's
  //         loads become usable together (the engine's one event per layer): g1 and g3 are
  //         both late, no GPU part; CPU 4 + 2 neurons = 12 µs → 22.
  CHECK(r.seconds == Us(22));
  CHECK(r.loads == 2);
  CHECK(r.evictions == 2);
  CHECK(r.reload_bytes == 8000);
  CHECK(r.reload_bytes_per_token == 4000);
  CHECK(r.groups_needed == 4);
  CHECK(r.hits == 0);
  CHECK(r.late == 4);  // g1 and g3 in both steps
  CHECK(r.stalls.cpu_s == Us(18));
  CHECK(r.stalls.h2d_background_s == 0);
  CHECK(r.stalls.h2d_critical_s == 0);
  CHECK(r.stalls.gpu_s == 0);
  CHECK(r.stalls.other_s == Us(4));
  CHECK(r.reload_link_s == Us(10));
}

TEST_CASE("sim: the host's copies into pinned staging lengthen the CPU branch, by hand",
          "[sim][hand]") {
  // The LRU case above with staging at 1 GB/s: each 4000-byte reload costs the host 4 µs.
  const SimTrace t = LruTrace();
  const SimConfig config = LruConfig();
  SimHardware hw = test_util::RoundHardware();
  hw.staging_bytes_per_s = 1e9;
  const SimResult r = test_util::RunOrFail(t, hw, test_util::RoundCosts(2), config);
  // Step 0: attention 0–2; LRU loads g1, g3: the host stages 8000 B (8 µs) before the CPU's
  //         3 neurons (6 µs): 2 → 16; the link is not delayed (g1 2–7, g3 7–12).
  // Step 1: attention 16–18; both landed by 12, so g1 and g3 are resident and needed: up
  //         18–20, compute 1 + 6 = 7 → 27, down → 29; nothing on the CPU, nothing to load.
  CHECK(r.seconds == Us(29));
  CHECK(r.staging_s == Us(8));
  CHECK(r.loads == 2);
  CHECK(r.hits == 2);
  CHECK(r.late == 2);
  CHECK(r.cpu_busy_s == Us(14));
  CHECK(r.stalls.cpu_s == Us(14));
  CHECK(r.stalls.h2d_critical_s == Us(4));
  CHECK(r.stalls.gpu_s == Us(7));
  CHECK(r.stalls.other_s == Us(4));
  CHECK(r.stalls.total() == Us(29));
  hw.staging_bytes_per_s = -1;  // refused
  CHECK(!Simulate(t, hw, test_util::RoundCosts(2), config).ok());
  // Not modelled (0): the LRU case's 22 µs.
  hw.staging_bytes_per_s = 0;
  const SimResult free = test_util::RunOrFail(t, hw, test_util::RoundCosts(2), config);
  CHECK(free.seconds == Us(22));
  CHECK(free.staging_s == 0);
}

TEST_CASE("sim: per-token and shape-derived non-FFN times", "[sim][hand]") {
  const Counts counts = {{{4, 0, 0, 0}}};
  const std::string path = test_util::TempTracePath("shape");
  test_util::WriteTrace(path, 4, counts);
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  SimCosts c = test_util::RoundCosts(0);
  c.non_ffn_s = -1;
  c.attn_bytes = 3000;  // 3 µs on the device + 1 µs launch
  c.per_token_s = -1;
  c.head_bytes = 5000;  // 5 µs + 1 µs launch
  SimConfig config;
  config.policy = "static";
  config.budget = 0.25;
  const SimResult r = test_util::RunOrFail(t, test_util::RoundHardware(), c, config);
  // attention 0–4; GPU g0: up 4–6, compute 1+4 → 11, down → 13; head 13–19.
  CHECK(r.seconds == Us(19));
  CHECK(r.stalls.other_s == Us(10));
}

TEST_CASE("sim: static never reloads; its hits grow with the budget", "[sim][property]") {
  auto rng = kx::test::SeededRng(1313);
  const std::string path = test_util::TempTracePath("static_prop");
  test_util::WriteTrace(path, 8, test_util::RandomCounts(50, 3, 32, 8, rng()));
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  uint64_t last_hits = 0;
  for (double budget : {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0}) {
    SimConfig config;
    config.policy = "static";
    config.budget = budget;
    const SimResult r =
        test_util::RunOrFail(t, test_util::RoundHardware(), test_util::RoundCosts(3), config);
    INFO("budget " << budget);
    CHECK(r.loads == 0);
    CHECK(r.evictions == 0);
    CHECK(r.reload_bytes == 0);
    CHECK(r.hits >= last_hits);  // top-K sets are nested
    last_hits = r.hits;
    if (budget == 0.0) {
      CHECK(r.hits == 0);
      CHECK(r.stalls.gpu_s == 0);
    }
  }
}

TEST_CASE("sim: at a 100 % budget every needed group is a hit", "[sim][property]") {
  auto rng = kx::test::SeededRng(4242);
  const std::string path = test_util::TempTracePath("full");
  test_util::WriteTrace(path, 8, test_util::RandomCounts(40, 2, 24, 8, rng()));
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  // tam-t (and tam-t-adaptive) evict residents whose score fell below τ even
  // with free slots, by design, so they can miss at any budget.
  for (const char* name : {"static", "lru", "lfu", "topk", "tam", "tam-adaptive"}) {
    SimConfig config;
    config.policy = name;
    config.budget = 1.0;
    const SimResult r =
        test_util::RunOrFail(t, test_util::RoundHardware(), test_util::RoundCosts(3), config);
    INFO(name);
    CHECK(r.groups_needed > 0);
    CHECK(r.hits == r.groups_needed);
    CHECK(r.hit_rate == 1.0);
    CHECK(r.loads == 0);
    CHECK(r.stalls.cpu_s == 0);  // nothing left for the CPU: the GPU branch is longer
  }
}

TEST_CASE("sim: the stall parts add up to the wall time; replays are deterministic",
          "[sim][property]") {
  auto rng = kx::test::SeededRng(777);
  const std::string path = test_util::TempTracePath("sum");
  test_util::WriteTrace(path, 8, test_util::RandomCounts(60, 3, 32, 8, rng()));
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  for (std::string_view name : policy::PolicyNames()) {
    for (double budget : {0.1, 0.4, 0.8}) {
      SimConfig config;
      config.policy = std::string(name);
      config.budget = budget;
      const SimResult a =
          test_util::RunOrFail(t, test_util::RoundHardware(), test_util::RoundCosts(3), config);
      const SimResult b =
          test_util::RunOrFail(t, test_util::RoundHardware(), test_util::RoundCosts(3), config);
      INFO(name << " at " << budget);
      CHECK(a.stalls.total() == Approx(a.seconds).epsilon(1e-12));
      CHECK(a.seconds == b.seconds);
      CHECK(a.reload_bytes == b.reload_bytes);
      CHECK(a.hits == b.hits);
      CHECK(a.hits + a.late <= a.groups_needed);
      CHECK(a.tokens == 60);
    }
  }
}

TEST_CASE("sim: reports carry every row", "[sim][report]") {
  SimResult r;
  r.hardware = "round";
  r.policy = "tam";
  r.budget = 0.3;
  r.tokens = 2;
  r.tokens_per_s = 1234.5;
  const std::string md = FormatMarkdown({r, r});
  CHECK(md.find("| round | tam | 30 % | 1234.5 |") != std::string::npos);
  const std::string csv = FormatCsv({r});
  CHECK(csv.find("hardware,policy,budget") == 0);
  CHECK(csv.find("round,tam,0.3,") != std::string::npos);
  const std::string json = FormatJson({r}, "{\"trace\": \"x.kxtr\"}");
  CHECK(json.find("\"trace\": \"x.kxtr\"") != std::string::npos);
  CHECK(json.find("\"tokens_per_s\": 1234.5") != std::string::npos);
}

TEST_CASE("sim: bad inputs get clear errors", "[sim][errors]") {
  SECTION("a missing trace") {
    auto t = LoadSimTrace("/nonexistent/dir/x.kxtr", {});
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().ToString().find("/nonexistent/dir/x.kxtr") != std::string::npos);
  }
  SECTION("a file that is not a trace") {
    const std::string path = test_util::TempTracePath("garbage");
    std::ofstream(path) << "this is not a trace, just some text of a few dozen bytes\n";
    auto t = LoadSimTrace(path, {});
    std::remove(path.c_str());
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().ToString().find(path) != std::string::npos);
  }
  SECTION("a step without all its layers") {
    const std::string path = test_util::TempTracePath("holes");
    sparse::TraceHeader h;
    h.n_ff = {16, 16};
    h.group_size = 4;
    auto w = sparse::TraceWriter::Create(path, h);
    REQUIRE(w.ok());
    const uint64_t bits = 0x13;
    REQUIRE((*w)->AddLayer(0, 0, &bits, nullptr, nullptr).ok());
    REQUIRE((*w)->AddLayer(0, 1, &bits, nullptr, nullptr).ok());
    REQUIRE((*w)->AddLayer(1, 0, &bits, nullptr, nullptr).ok());
    REQUIRE((*w)->Close().ok());
    auto t = LoadSimTrace(path, {});
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().message().find("step 1 has no record for layer 1") != std::string::npos);
    // The whole first step alone replays.
    SimTraceOptions o;
    o.max_steps = 1;
    auto first = LoadSimTrace(path, o);
    std::remove(path.c_str());
    REQUIRE(first.ok());
    CHECK(first->n_steps == 1);
    CHECK(first->counts(0, 1)[0] == 2);  // bits 0, 1 of group 0
    CHECK(first->counts(0, 1)[1] == 1);  // bit 4
  }
  const std::string path = test_util::TempTracePath("ok");
  test_util::WriteTrace(path, 4, {{{1, 2, 3, 4}}});
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  SECTION("skipping every step") {
    const std::string p2 = test_util::TempTracePath("skip");
    test_util::WriteTrace(p2, 4, {{{1, 2, 3, 4}}});
    SimTraceOptions o;
    o.first_step = 5;
    auto skipped = LoadSimTrace(p2, o);
    std::remove(p2.c_str());
    REQUIRE_FALSE(skipped.ok());
    CHECK(skipped.status().message().find("no step to replay") != std::string::npos);
  }
  SECTION("an unknown policy") {
    SimConfig config;
    config.policy = "belady";
    auto r = Simulate(t, test_util::RoundHardware(), test_util::RoundCosts(1), config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(r.status().message().find("belady") != std::string::npos);
    CHECK(r.status().message().find("tam-adaptive") != std::string::npos);
  }
  SECTION("a budget that is not a share") {
    SimConfig config;
    config.budget = 1.5;
    auto r = Simulate(t, test_util::RoundHardware(), test_util::RoundCosts(1), config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("budget 1.5") != std::string::npos);
  }
  SECTION("a bad hardware profile") {
    SimHardware hw = test_util::RoundHardware();
    hw.h2d_bytes_per_s = 0;
    auto r = Simulate(t, hw, test_util::RoundCosts(1), SimConfig{});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("host-to-device bandwidth") != std::string::npos);
    hw = test_util::RoundHardware();
    hw.cpu_bytes_per_s = -1;
    r = Simulate(t, hw, test_util::RoundCosts(1), SimConfig{});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("CPU memory bandwidth") != std::string::npos);
    auto named = LoadDeviceProfile("no-such-gpu");
    REQUIRE_FALSE(named.ok());
    CHECK(named.status().message().find("rtx4090-pcie4") != std::string::npos);
  }
  SECTION("a placement frequency of the wrong size") {
    SimConfig config;
    config.placement_frequency = {0.5f};
    auto r = Simulate(t, test_util::RoundHardware(), test_util::RoundCosts(1), config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("placement frequency") != std::string::npos);
  }
}

}  // namespace
}  // namespace kx::sim
