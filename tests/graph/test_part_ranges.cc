// PartRanges (graph/part_ranges.h): every unit is taken exactly once, by its owner from the
// front in order or by a thief from the back, whatever the timing. A seeded randomized
// stress with 2-4 threads, each running one part, some parts slowed at random so that
// stealing really happens (asserted), many runs on one object re-armed; meant to run under
// ThreadSanitizer too (.ci/run's tsan_tests).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "base/timer.h"
#include "catch2/catch.hpp"
#include "graph/part_ranges.h"
#include "test_util.h"

namespace kx::graph {
namespace {

// Busy-waits ns nanoseconds (a slowed part; sleeping would hand the core away too coarsely).
void Spin(int64_t ns) {
  const int64_t until = NowNs() + ns;
  while (NowNs() < until) {
  }
}

// What one part took in one run, in order.
struct Taken {
  std::vector<int64_t> own, stolen;
};

TEST_CASE("PartRanges: one part takes its units in order, then there is nothing to steal") {
  PartRanges r(1);
  r.Arm(5);
  int64_t u = -1;
  for (int64_t want = 0; want < 5; ++want) {
    REQUIRE(r.Take(0, &u));
    CHECK(u == want);
  }
  CHECK_FALSE(r.Take(0, &u));
  CHECK(r.stolen() == 0);
  r.Arm(0);
  CHECK_FALSE(r.Take(0, &u));
}

TEST_CASE("PartRanges: a part that never runs is taken whole from its back") {
  PartRanges r(3);
  r.Arm(10);  // ranges [0, 3), [3, 6), [6, 10)
  std::vector<int64_t> got;
  int64_t u;
  // Part 0 alone: its own front first, then the fuller of the others from the back.
  while (r.Take(0, &u)) got.push_back(u);
  const std::vector<int64_t> want = {0, 1, 2, 9, 5, 8, 4, 7, 3, 6};
  CHECK(got == want);
  CHECK(r.stolen() == 7);
  CHECK_FALSE(r.Take(1, &u));
  CHECK_FALSE(r.Take(2, &u));
  // More parts than units: some ranges are empty from the start.
  r.Arm(2);
  got.clear();
  while (r.Take(2, &u)) got.push_back(u);
  CHECK(got == std::vector<int64_t>{1, 0});
}

TEST_CASE("PartRanges: under random timing every unit is taken exactly once") {
  std::mt19937_64 rng = test::SeededRng(20261202);
  const int kRuns = test::kSanitized ? 100 : 2000;
  int64_t stolen_total = 0, runs_with_steals = 0;
  for (int threads : {2, 3, 4}) {
    PartRanges r(threads);  // one object for every run: Arm re-arms it
    int64_t stolen_before = 0;
    for (int run = 0; run < kRuns; ++run) {
      const int64_t n_units = std::uniform_int_distribution<int64_t>(0, 300)(rng);
      // Per part: how long each unit takes (0-2 us), one part in three 5-20x slower.
      std::vector<int64_t> unit_ns(threads);
      for (int64_t& ns : unit_ns) {
        ns = std::uniform_int_distribution<int64_t>(0, 2000)(rng);
        if (rng() % 3 == 0) ns = ns * std::uniform_int_distribution<int64_t>(5, 20)(rng) + 5000;
      }
      r.Arm(n_units);
      std::vector<std::atomic<int>> count(static_cast<size_t>(n_units));
      for (auto& c : count) c.store(0, std::memory_order_relaxed);
      std::vector<Taken> taken(threads);
      std::atomic<int> ready{0};
      auto body = [&](int part) {
        // Start together, so that the parts overlap.
        ready.fetch_add(1);
        while (ready.load() < threads) {
        }
        int64_t u;
        while (r.TakeOwn(part, &u)) {
          count[u].fetch_add(1, std::memory_order_relaxed);
          taken[part].own.push_back(u);
          Spin(unit_ns[part]);
        }
        while (r.Steal(part, &u)) {
          count[u].fetch_add(1, std::memory_order_relaxed);
          taken[part].stolen.push_back(u);
          Spin(unit_ns[part]);
        }
      };
      std::vector<std::thread> pool;
      for (int p = 1; p < threads; ++p) pool.emplace_back(body, p);
      body(0);
      for (std::thread& t : pool) t.join();

      INFO("threads " << threads << ", run " << run << ", units " << n_units);
      int64_t bad = 0;
      for (auto& c : count) bad += c.load(std::memory_order_relaxed) != 1;
      REQUIRE(bad == 0);
      int64_t stolen_run = 0;
      for (int p = 0; p < threads; ++p) {
        // The owner took a prefix of its own range, in order; nobody else took from it
        // anything but its back.
        const int64_t begin = n_units * p / threads, end = n_units * (p + 1) / threads;
        const std::vector<int64_t>& own = taken[p].own;
        for (size_t i = 0; i < own.size(); ++i) REQUIRE(own[i] == begin + static_cast<int64_t>(i));
        const int64_t owner_end = begin + static_cast<int64_t>(own.size());
        for (int q = 0; q < threads; ++q) {
          int64_t last = end;  // a thief takes one range's units downwards
          for (int64_t u : taken[q].stolen) {
            if (u < begin || u >= end) continue;
            REQUIRE(q != p);
            REQUIRE(u >= owner_end);
            REQUIRE(u < last);
            last = u;
          }
        }
        stolen_run += static_cast<int64_t>(taken[p].stolen.size());
      }
      REQUIRE(r.stolen() - stolen_before == stolen_run);
      stolen_before = r.stolen();
      stolen_total += stolen_run;
      runs_with_steals += stolen_run > 0;
    }
  }
  INFO("stolen units " << stolen_total << " in " << runs_with_steals << " runs");
  // The slowed parts make stealing happen (so the checks above covered it), in many runs.
  CHECK(runs_with_steals > kRuns / 4);
}

}  // namespace
}  // namespace kx::graph
