// kairox-sim's options for the paper's sweeps, by hand: regrouping a trace (merge, split, a
// group size that does not divide the layer), replaying the actual sets instead of the
// predicted ones, and planning one layer ahead.
#include <cstdio>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "sim_test_util.h"

namespace kx::sim {
namespace {

// One layer of 16 neurons in groups of 4; predicted bits at neurons 0-5 and 12, actual at
// neurons 1 and 13 (a predictor that over-predicts, as the 7B traces' does).
void WriteSmallTrace(const std::string& path, bool with_actual) {
  sparse::TraceHeader h;
  h.n_ff = {16};
  h.group_size = 4;
  auto writer = sparse::TraceWriter::Create(path, h);
  REQUIRE(writer.ok());
  const uint64_t predicted = 0b0001'0000'0011'1111;  // neurons 0-5, 12
  const uint64_t actual = (uint64_t{1} << 1) | (uint64_t{1} << 13);
  for (int step = 0; step < 2; ++step) {
    REQUIRE(
        (*writer)->AddLayer(step, 0, &predicted, with_actual ? &actual : nullptr, nullptr).ok());
  }
  REQUIRE((*writer)->Close().ok());
}

std::vector<int> Counts(const SimTrace& t, int step) {
  const uint16_t* c = t.counts(step, 0);
  return std::vector<int>(c, c + t.n_groups);
}

TEST_CASE("sim: --group-size merges and splits the trace's groups", "[sim][options]") {
  const std::string path = test_util::TempTracePath("regroup");
  WriteSmallTrace(path, /*with_actual=*/true);
  const SimTrace own = test_util::LoadOrFail(path);
  CHECK(own.group_size == 4);
  CHECK(own.trace_group_size == 4);
  CHECK(Counts(own, 0) == std::vector<int>{4, 2, 0, 1});

  SimTraceOptions o;
  o.group_size = 8;  // merge pairs
  const SimTrace merged = test_util::LoadOrFail(path, o);
  CHECK(merged.group_size == 8);
  CHECK(merged.trace_group_size == 4);
  CHECK(merged.n_groups == 2);
  CHECK(Counts(merged, 1) == std::vector<int>{6, 1});

  o.group_size = 2;  // split
  const SimTrace split = test_util::LoadOrFail(path, o);
  CHECK(split.n_groups == 8);
  CHECK(Counts(split, 0) == std::vector<int>{2, 2, 2, 0, 0, 0, 1, 0});

  o.group_size = 3;  // 16 = 5 × 3 + 1: a short last group
  const SimTrace odd = test_util::LoadOrFail(path, o);
  CHECK(odd.n_groups == 6);
  CHECK(Counts(odd, 0) == std::vector<int>{3, 3, 0, 0, 1, 0});
  CHECK(odd.group_neurons(0, 4) == 3);
  CHECK(odd.group_neurons(0, 5) == 1);
  std::remove(path.c_str());
}

TEST_CASE("sim: use_actual replays the neurons that fired", "[sim][options]") {
  const std::string path = test_util::TempTracePath("actual");
  WriteSmallTrace(path, /*with_actual=*/true);
  SimTraceOptions o;
  o.use_actual = true;
  const SimTrace actual = test_util::LoadOrFail(path, o);
  CHECK(Counts(actual, 0) == std::vector<int>{1, 0, 0, 1});
  CHECK(actual.records_from_actual == 0);  // not a fallback: asked for

  WriteSmallTrace(path, /*with_actual=*/false);
  auto missing = LoadSimTrace(path, o);
  REQUIRE_FALSE(missing.ok());
  CHECK(std::string(missing.status().message()).find("no actual neuron set") != std::string::npos);
  std::remove(path.c_str());
}

// 1 layer × 4 groups of 4, LRU with 2 slots holding 0 and 1; group 2 is needed at step 0 and
// group 3 at step 1 (4 neurons each). RoundHardware: a bundle takes 5 µs on the link, a
// critical copy 2 µs, a neuron 2 µs on the CPU and 1 µs on the GPU (+1 µs launch); 3 µs of
// non-FFN per layer.
TEST_CASE("sim: lookahead plans the next layer's loads so they serve this step", "[sim][options]") {
  const std::string path = test_util::TempTracePath("lookahead");
  test_util::WriteTrace(path, 4, {{{0, 0, 4, 0}}, {{0, 0, 0, 4}}});
  const SimTrace t = test_util::LoadOrFail(path);
  std::remove(path.c_str());
  SimConfig config;
  config.policy = "lru";
  config.budget = 0.5;
  config.placement_frequency = {0.9f, 0.8f, 0.0f, 0.0f};
  const SimHardware hw = test_util::RoundHardware();
  const SimCosts costs = test_util::RoundCosts(3);

  // Without: step 0 (t0 = 3) loads 2 (evicting 0) and computes it on the CPU (8 µs, ends 11);
  // step 1 (t0 = 14) loads 3 (evicting 1, least recent) and computes it on the CPU: 22 µs, no
  // hit.
  const SimResult own = test_util::RunOrFail(t, hw, costs, config);
  CHECK(own.seconds == Approx(22e-6));
  CHECK(own.hits == 0);
  CHECK(own.loads == 2);

  // With: at step 0's t0 = 3 the plan for step 1 is made too: 3 is loaded behind 2 (3-8, 8-13,
  // evicting 1; 2 is loading, so not evictable). At step 1 (t0 = 14) both have landed: 3 is
  // a hit, computed on the GPU: up 2 + launch 1 + 4 + down 2 = 9 µs, ending at 23 µs.
  config.lookahead = true;
  const SimResult ahead = test_util::RunOrFail(t, hw, costs, config);
  CHECK(ahead.seconds == Approx(23e-6));
  CHECK(ahead.hits == 1);
  CHECK(ahead.groups_needed == 2);
  CHECK(ahead.loads == 2);
  CHECK(ahead.reload_bytes == 8000);
  CHECK(ahead.stalls.gpu_s == Approx(5e-6));
  CHECK(ahead.stalls.h2d_critical_s == Approx(4e-6));
  CHECK(ahead.stalls.cpu_s == Approx(8e-6));
}

}  // namespace
}  // namespace kx::sim
