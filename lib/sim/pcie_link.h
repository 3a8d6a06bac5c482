// The host-to-device direction of the PCIe link as the simulator models it:
// one copy at a time, each taking latency + bytes / bandwidth. Background
// reloads wait in a FIFO; a critical copy (the layer's input going up)
// preempts every reload that has not started yet but waits for the one in
// flight — the engine copies reloads in whole bundles on the background stream,
// so a critical copy waits at most one bundle (KAIROX §8).
//
// Time only moves forward: every call takes a time >= the previous call's.
//
//   PcieLink link;
//   link.Enqueue({layer, group, seconds, bytes}, now);
//   link.Advance(now, &landed);                       // reloads that landed by `now`
//   PcieLink::Copy c = link.Critical(now, seconds);   // c.start - now: waited on a reload
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace kx::sim {

struct Reload {
  int layer = 0;
  int group = 0;
  double seconds = 0;  // on the link: latency + bytes / bandwidth
  uint64_t bytes = 0;
  double issued = 0;  // set by Enqueue
  double start = -1;  // set once it holds the link
  double end = -1;
};

class PcieLink {
 public:
  struct Copy {
    double start = 0;
    double end = 0;
  };

  // Queues a reload issued at `now`.
  void Enqueue(Reload r, double now);
  // Moves the link to `now`: appends the reloads that landed at or before
  // `now` to *landed (in landing order) and fixes the start of the one that
  // holds the link at `now`, if any (it cannot be preempted any more).
  void Advance(double now, std::vector<Reload>* landed);
  // A critical copy asked for at `now` (call Advance(now) first): starts when
  // the in-flight reload, if any, has landed, ahead of every queued one.
  Copy Critical(double now, double seconds);

  int queued() const { return static_cast<int>(queue_.size()); }
  // Seconds the link spent on reloads that have landed, and on critical copies.
  double reload_busy_s() const { return reload_busy_s_; }
  double critical_busy_s() const { return critical_busy_s_; }

 private:
  std::deque<Reload> queue_;  // front: in flight (start >= 0) or next to start
  double free_at_ = 0;        // when the last copy given the link ends
  double reload_busy_s_ = 0;
  double critical_busy_s_ = 0;
};

}  // namespace kx::sim
