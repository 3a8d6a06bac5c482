// kairox-sim's RAM ⇄ disk tier and calibrated CPU model, by hand: the disk queue, the rate
// curve's interpolation, the page runs of BundleTier::ReadGroups, and a two-layer replay
// with prefetch and layer-0 speculation whose every microsecond is computed below.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "sim/cpu_model.h"
#include "sim/disk_tier.h"
#include "sim_test_util.h"

namespace {

using kx::sim::test_util::Counts;

constexpr double kUs = 1e-6;

std::vector<kx::sim::PageRun> Runs(const kx::sim::BundleFile& f, int n_groups,
                                   std::vector<int32_t> groups) {
  std::vector<kx::sim::PageRun> runs;
  kx::sim::PageRuns(f, n_groups, groups, &runs);
  return runs;
}

// A neuron of 1024 B costs 1 µs at 1.024 GB/s; a layer's non-FFN part 10 µs; a token's 5 µs.
kx::sim::CpuModel RoundCpu() {
  kx::sim::CpuModel cpu;
  cpu.ffn_rate = {{1.0, 1.024e9}};
  cpu.layer_s = 10 * kUs;
  cpu.token_s = 5 * kUs;
  return cpu;
}

}  // namespace

TEST_CASE("disk queue: a read costs latency + bytes / bandwidth, one at a time", "[sim][disk]") {
  const kx::sim::DiskLink link{.bytes_per_s = 1e9, .latency_s = 2 * kUs};
  CHECK(link.ReadSeconds(3000) == Approx(5 * kUs));
  kx::sim::DiskQueue q(link);
  CHECK(q.Submit(0, 3000) == Approx(5 * kUs));        // 2 + 3 µs
  CHECK(q.Submit(1 * kUs, 1000) == Approx(8 * kUs));  // waits for the first: 5 + 2 + 1
  CHECK(q.Submit(20 * kUs, 0) == Approx(22 * kUs));   // an idle disk starts at once
  CHECK(q.busy_s() == Approx(10 * kUs));
}

TEST_CASE("CPU model: the FFN rate interpolates between measured points", "[sim][cpu]") {
  kx::sim::CpuModel m;
  m.ffn_rate = {{0.1, 2e9}, {0.5, 4e9}, {1.0, 10e9}};
  CHECK(m.FfnBytesPerS(0.3) == Approx(3e9));
  CHECK(m.FfnBytesPerS(0.75) == Approx(7e9));
  CHECK(m.FfnBytesPerS(0.05) == Approx(2e9));  // the end points' rates outside
  CHECK(m.FfnBytesPerS(1.0) == Approx(10e9));
  // 300 of 1000 neurons of 1000 B at 3 GB/s: 100 µs.
  CHECK(m.FfnSeconds(300, 1000, 1000) == Approx(100 * kUs));
  CHECK(m.FfnSeconds(0, 1000, 1000) == 0);
  m.layer_s = 7 * kUs;
  m.layer_s_per_ctx = 0.5 * kUs;
  CHECK(m.LayerSeconds(10) == Approx(12 * kUs));
  REQUIRE(kx::sim::ValidateCpuModel(m).ok());

  kx::sim::CpuModel bad = m;
  bad.ffn_rate = {{0.5, 4e9}, {0.1, 2e9}};
  CHECK(kx::sim::ValidateCpuModel(bad).message().find("increasing") != std::string::npos);
  bad.ffn_rate = {{1.5, 4e9}};
  CHECK(!kx::sim::ValidateCpuModel(bad).ok());
  bad.ffn_rate.clear();
  CHECK(!kx::sim::ValidateCpuModel(bad).ok());
}

TEST_CASE("CPU profile: rates in GB/s become seconds for a model's shape", "[sim][cpu]") {
  auto r = kx::sim::ParseCpuRates(
      R"({"ffn_gb_per_s": [[0.5, 2.0], [1.0, 4.0]], "attn_gb_per_s": 2.0, "kv_gb_per_s": 1.0,
          "head_gb_per_s": 5.0, "layer_overhead_us": 3.0, "token_overhead_us": 7.0})",
      "test.json");
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  const kx::sim::CpuModel m =
      r->ToModel({.attn_bytes = 20000, .kv_bytes_per_ctx = 500, .head_bytes = 100000});
  CHECK(m.layer_s == Approx(13 * kUs));           // 20000 B / 2 GB/s + 3 µs
  CHECK(m.layer_s_per_ctx == Approx(0.5 * kUs));  // 500 B / 1 GB/s
  CHECK(m.token_s == Approx(27 * kUs));           // 100000 B / 5 GB/s + 7 µs
  CHECK(m.FfnBytesPerS(0.75) == Approx(3e9));

  auto missing = kx::sim::ParseCpuRates(R"({"ffn_gb_per_s": [[1.0, 4.0]]})", "p.json");
  REQUIRE(!missing.ok());
  CHECK(missing.status().message().find("p.json") != std::string::npos);
  CHECK(missing.status().message().find("attn_gb_per_s") != std::string::npos);
  auto shape = kx::sim::ParseCpuRates(R"({"ffn_gb_per_s": [1.0, 4.0], "attn_gb_per_s": 1,
                                          "head_gb_per_s": 1})",
                                      "p.json");
  CHECK(!shape.ok());
  CHECK(!kx::sim::ParseCpuRates("not json", "p.json").ok());
  CHECK(kx::sim::LoadCpuRates("/nonexistent/kx_cpu.json").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("page runs: whole pages, merged across small gaps, as the tier reads", "[sim][disk]") {
  kx::sim::BundleFile f;
  f.stride = 6000;  // bundles straddle pages: group 0 = pages 0-1, group 3 = pages 4-5
  auto runs = Runs(f, 8, {0, 3});
  REQUIRE(runs.size() == 1);  // the 2-page gap (2, 3) is read through
  CHECK(runs[0].first_page == 0);
  CHECK(runs[0].pages == 6);
  f.max_gap_pages = 1;
  runs = Runs(f, 8, {0, 3});
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].pages == 2);
  CHECK(runs[1].first_page == 4);
  CHECK(runs[1].pages == 2);
  runs = Runs(f, 8, {0, 1});  // sharing page 1: one run of pages 0-2
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].pages == 3);
  CHECK(Runs(f, 8, {}).empty());
  f.lead = 4000;  // the span starts late in its first page: group 0 = pages 0-2
  runs = Runs(f, 8, {0});
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].pages == 3);
}

TEST_CASE("disk tier replay: two layers, prefetch and speculation by hand", "[sim][disk]") {
  // Groups 0 and 1 are placed (static), 2 and 3 come from the disk when needed.
  const Counts counts = {{{4, 4, 2, 0}, {4, 4, 0, 2}}, {{4, 0, 0, 4}, {4, 4, 0, 0}}};
  const std::string path = kx::sim::test_util::TempTracePath("disk_tier");
  kx::sim::test_util::WriteTrace(path, 4, counts);
  const kx::sim::SimTrace t = kx::sim::test_util::LoadOrFail(path);
  std::remove(path.c_str());
  const kx::sim::DiskLink disk{.bytes_per_s = 4.096e9, .latency_s = 2 * kUs};  // a page: 3 µs
  kx::sim::BundleFile file;
  file.stride = 4096;  // a group is one page
  kx::sim::DiskTierConfig config;
  config.policy = "static";
  config.slots = 2;
  config.placement_frequency = {0.9f, 0.8f, 0.1f, 0.05f, 0.9f, 0.8f, 0.1f, 0.05f};
  std::vector<kx::sim::DiskStepEvent> events;
  config.on_step = [&](const kx::sim::DiskStepEvent& e) { events.push_back(e); };

  SECTION("prefetch one layer ahead, layer 0 speculated") {
    // Token 0: L0 at 10 µs reads g2 (done 13) and prepares L1, whose g3 queues behind (16);
    // L0 waits 3, computes 10 neurons → 23. L1 at 33 speculates token 1's L0 from token 0's
    // (g2: 33-36); its own read landed at 16: no wait; 10 neurons → 43; head → 48.
    // Token 1: L0 at 58 tops up g3 (58-61; g2 is already in the mirror), waits 3 → 61,
    // 8 neurons → 69; L1 at 79 needs only residents, 8 neurons → 87; head → 92. At 79 it
    // also speculates a token 2 that never comes (g3), as the engine does: read, not waited.
    auto r = kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->seconds == Approx(92 * kUs));
    CHECK(r->tokens == 2);
    CHECK(r->read_ops == 5);
    CHECK(r->bytes_read == 5 * 4096);
    CHECK(r->io_wait_s == Approx(6 * kUs));
    CHECK(r->ffn_s == Approx(36 * kUs));
    CHECK(r->other_s == Approx(50 * kUs));
    CHECK(r->hits == 7);  // g0, g1 / g0, g1 / g0 / g0, g1
    CHECK(r->groups_needed == 10);
    REQUIRE(events.size() == 4);
    CHECK(events[2].step == 1);
    CHECK(events[2].layer == 0);
    CHECK(events[2].read_ops == 2);  // the speculative read counts in the step, as the engine's
    CHECK(events[2].bytes_read == 2 * 4096);
    CHECK(events[2].resident_groups == 2);
    CHECK(events[3].read_ops == 0);
  }
  SECTION("without prefetch every read waits") {
    config.prefetch = false;
    auto r = kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config);
    REQUIRE(r.ok());
    CHECK(r->seconds == Approx(95 * kUs));  // 51 µs + 44 µs, three 3-µs waits
    CHECK(r->read_ops == 3);
    CHECK(r->io_wait_s == Approx(9 * kUs));
  }
  SECTION("only the decode is timed from --time-from-step") {
    config.timed_from_step = 1;
    auto r = kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config);
    REQUIRE(r.ok());
    CHECK(r->tokens == 1);
    CHECK(r->seconds == Approx(44 * kUs));  // 92 - 48
    CHECK(r->read_ops == 2);  // token 1's top-up and its speculation (token 0's is not timed)
    config.timed_from_step = 2;
    CHECK(!kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config).ok());
  }
  SECTION("errors name what is wrong") {
    config.slots = 5;
    auto r = kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config);
    REQUIRE(!r.ok());
    CHECK(r.status().message().find("slots") != std::string::npos);
    config.slots = 2;
    config.policy = "nope";
    CHECK(!kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config).ok());
    config.policy = "static";
    CHECK(!kx::sim::SimulateDiskTier(t, {.bytes_per_s = 0}, RoundCpu(), 1024, file, config).ok());
    CHECK(!kx::sim::SimulateDiskTier(t, disk, kx::sim::CpuModel{}, 1024, file, config).ok());
    config.placement_frequency.pop_back();
    CHECK(!kx::sim::SimulateDiskTier(t, disk, RoundCpu(), 1024, file, config).ok());
  }
}
