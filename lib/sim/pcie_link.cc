#include "sim/pcie_link.h"

#include <algorithm>

#include "base/check.h"

namespace kx::sim {

void PcieLink::Enqueue(Reload r, double now) {
  r.issued = now;
  r.start = -1;
  r.end = -1;
  queue_.push_back(r);
}

void PcieLink::Advance(double now, std::vector<Reload>* landed) {
  while (!queue_.empty()) {
    Reload& r = queue_.front();
    if (r.start < 0) {
      const double start = std::max(free_at_, r.issued);
      // A reload that would start exactly at `now` has not started: a critical
      // copy asked for at the same instant goes first.
      if (start >= now) return;
      r.start = start;
      r.end = start + r.seconds;
      free_at_ = r.end;
    }
    if (r.end > now) return;  // in flight at `now`
    reload_busy_s_ += r.seconds;
    landed->push_back(r);
    queue_.pop_front();
  }
}

PcieLink::Copy PcieLink::Critical(double now, double seconds) {
  KX_CHECK_MSG(queue_.empty() || queue_.front().start < 0 || queue_.front().end > now,
               "PcieLink::Critical: call Advance(now) first");
  Copy c;
  // free_at_ covers the in-flight reload and earlier critical copies; queued
  // reloads that have not started do not count (they are preempted).
  c.start = std::max(now, free_at_);
  c.end = c.start + seconds;
  free_at_ = c.end;
  critical_busy_s_ += seconds;
  return c;
}

}  // namespace kx::sim
