// The PCIe link model: FIFO reloads, critical copies ahead of queued reloads
// but behind the one in flight.
#include "catch2/catch.hpp"
#include "sim/pcie_link.h"

namespace kx::sim {
namespace {

Reload Bundle(int group, double seconds) {
  Reload r;
  r.group = group;
  r.seconds = seconds;
  r.bytes = 100;
  return r;
}

TEST_CASE("link: reloads run back to back in issue order", "[sim][link]") {
  PcieLink link;
  std::vector<Reload> landed;
  link.Enqueue(Bundle(1, 5), 0);
  link.Enqueue(Bundle(2, 5), 0);
  link.Advance(4.9, &landed);
  CHECK(landed.empty());
  link.Advance(7, &landed);
  REQUIRE(landed.size() == 1);
  CHECK(landed[0].group == 1);
  CHECK(landed[0].end == 5);
  link.Advance(10, &landed);  // lands exactly at 10: done by 10
  REQUIRE(landed.size() == 2);
  CHECK(landed[1].group == 2);
  CHECK(landed[1].start == 5);
  CHECK(link.reload_busy_s() == 10);
  // A reload issued on an idle link starts when issued, not when the link freed.
  link.Enqueue(Bundle(3, 5), 20);
  link.Advance(24, &landed);
  CHECK(landed.size() == 2);
  link.Advance(25, &landed);
  REQUIRE(landed.size() == 3);
  CHECK(landed[2].start == 20);
}

TEST_CASE("link: a critical copy preempts queued reloads", "[sim][link]") {
  PcieLink link;
  std::vector<Reload> landed;
  link.Enqueue(Bundle(1, 5), 0);
  link.Enqueue(Bundle(2, 5), 0);
  link.Advance(0, &landed);  // issued at the same instant: not started yet
  const PcieLink::Copy c = link.Critical(0, 2);
  CHECK(c.start == 0);
  CHECK(c.end == 2);
  link.Advance(100, &landed);
  REQUIRE(landed.size() == 2);
  CHECK(landed[0].start == 2);
  CHECK(landed[0].end == 7);
  CHECK(landed[1].end == 12);
  CHECK(link.critical_busy_s() == 2);
}

TEST_CASE("link: a critical copy waits for the reload in flight, and only that one",
          "[sim][link]") {
  PcieLink link;
  std::vector<Reload> landed;
  for (int g = 0; g < 10; ++g) link.Enqueue(Bundle(g, 5), 0);
  link.Advance(1, &landed);
  CHECK(landed.empty());
  const PcieLink::Copy c = link.Critical(1, 2);
  CHECK(c.start == 5);  // not 50: the nine queued reloads wait
  CHECK(c.end == 7);
  // A second critical copy right after queues behind the first.
  const PcieLink::Copy d = link.Critical(1, 2);
  CHECK(d.start == 7);
  link.Advance(13.9, &landed);
  CHECK(landed.size() == 1);
  link.Advance(14, &landed);
  REQUIRE(landed.size() == 2);
  CHECK(landed[1].start == 9);  // after both critical copies
  CHECK(landed[1].end == 14);
}

TEST_CASE("link: an idle link serves a critical copy at once", "[sim][link]") {
  PcieLink link;
  std::vector<Reload> landed;
  link.Advance(3, &landed);
  const PcieLink::Copy c = link.Critical(3, 1.5);
  CHECK(c.start == 3);
  CHECK(c.end == 4.5);
  CHECK(link.queued() == 0);
}

}  // namespace
}  // namespace kx::sim
