// Helpers for the simulator tests: traces written with TraceWriter from
// per-group active counts, and a hardware profile of round numbers.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "sim/simulator.h"
#include "sparse/trace.h"

namespace kx::sim::test_util {

// [step][layer][group] = predicted-active neurons of the group (its first ones).
using Counts = std::vector<std::vector<std::vector<int>>>;

inline std::string TempTracePath(const std::string& tag) {
  return "/tmp/kx_sim_test_" + tag + "_" + std::to_string(::getpid()) + ".kxtr";
}

// Writes `counts` as a trace with `n_groups · gs` neurons per layer.
inline void WriteTrace(const std::string& path, int gs, const Counts& counts) {
  REQUIRE(!counts.empty());
  const int n_layer = static_cast<int>(counts[0].size());
  const int n_groups = static_cast<int>(counts[0][0].size());
  sparse::TraceHeader h;
  h.n_ff.assign(n_layer, static_cast<uint32_t>(n_groups * gs));
  h.group_size = static_cast<uint32_t>(gs);
  auto writer = sparse::TraceWriter::Create(path, h);
  REQUIRE(writer.ok());
  std::vector<uint64_t> bits(static_cast<size_t>(h.words(0)));
  for (size_t s = 0; s < counts.size(); ++s) {
    for (int l = 0; l < n_layer; ++l) {
      std::fill(bits.begin(), bits.end(), 0);
      for (int g = 0; g < n_groups; ++g) {
        for (int j = 0; j < counts[s][l][g]; ++j) {
          const int n = g * gs + j;
          bits[n >> 6] |= uint64_t{1} << (n & 63);
        }
      }
      REQUIRE((*writer)->AddLayer(static_cast<int>(s), l, bits.data(), nullptr, nullptr).ok());
    }
  }
  REQUIRE((*writer)->Close().ok());
}

inline SimTrace LoadOrFail(const std::string& path, SimTraceOptions o = {}) {
  auto t = LoadSimTrace(path, o);
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  return std::move(t).value();
}

// Every time a round number of microseconds: a bundle of 4 neurons x 1000 B
// takes 1 + 4 = 5 µs on the link, a critical copy 1 + 1 = 2 µs, a neuron 1 µs
// on the GPU (plus 1 µs launch) and 2 µs on the CPU.
inline SimHardware RoundHardware() {
  SimHardware hw;
  hw.name = "round";
  hw.h2d_bytes_per_s = 1e9;
  hw.d2h_bytes_per_s = 1e9;
  hw.copy_latency_s = 1e-6;
  hw.device_bytes_per_s = 1e9;
  hw.cpu_bytes_per_s = 0.5e9;
  hw.launch_s = 1e-6;
  return hw;
}

inline SimCosts RoundCosts(double non_ffn_us) {
  SimCosts c;
  c.neuron_bytes = 1000;
  c.hidden_bytes = 1000;
  c.non_ffn_s = non_ffn_us * 1e-6;
  c.per_token_s = 0;
  return c;
}

inline SimResult RunOrFail(const SimTrace& t, const SimHardware& hw, const SimCosts& c,
                           const SimConfig& config) {
  auto r = Simulate(t, hw, c, config);
  INFO(config.policy << " at " << config.budget << ": " << r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

}  // namespace kx::sim::test_util

namespace kx::sim::test_util {

// A bursty random trace: per group a two-state chain (on stays on with 0.8),
// groups of lower index on more often, 1..gs active neurons when on.
inline Counts RandomCounts(int n_steps, int n_layer, int n_groups, int gs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> active(1, gs);
  constexpr double kPersist = 0.8;
  Counts c(n_steps, std::vector<std::vector<int>>(n_layer, std::vector<int>(n_groups, 0)));
  std::vector<std::vector<uint8_t>> on(n_layer, std::vector<uint8_t>(n_groups, 0));
  for (int s = 0; s < n_steps; ++s) {
    for (int l = 0; l < n_layer; ++l) {
      for (int g = 0; g < n_groups; ++g) {
        const double rate = 0.6 / (1.0 + g * 0.15);
        const double p_on = on[l][g] ? kPersist : rate * (1 - kPersist) / (1 - rate);
        on[l][g] = u(rng) < p_on;
        c[s][l][g] = on[l][g] ? active(rng) : 0;
      }
    }
  }
  return c;
}

}  // namespace kx::sim::test_util
