// Work stealing inside one P-part task (task_graph.h): the task's work is n_units units
// (chunks of a matvec's rows), split into P contiguous ranges, one per part. Part i takes
// units from the FRONT of its own range, one at a time, and once that is empty steals from
// the BACK of the range with the most units left. So an owner streams forward through its
// rows with its prefetchers warm, a thief works inward from the far end, and the two meet
// wherever the faster thread got to: a thread whose core runs slower for a while (a
// vCPU's host) no longer holds the other one at the task's join (docs/dag.md).
//
// Each range is one 64-bit atomic, its next unit (front) and its end packed together, and
// both ends move by compare-and-swap on that word, so a unit is handed out exactly once
// and the owner and a thief can never take the same last unit. Claims are relaxed: they
// order nothing but themselves; what a unit writes is published by the task graph's own
// completion (the part that ran it completes after it).
//
// Usage (one object per P-part node; Arm before each run, single-threaded):
//   kx::graph::PartRanges ranges(n_parts);
//   ranges.Arm(n_units);                     // e.g. in the plan's Run, before TaskGraph::Reset
//   // in part `part`:
//   int64_t u;
//   while (ranges.Take(part, &u)) Compute(u);
// Thread-safety: Take from any threads, each part by one thread at a time; Arm and Init
// must not overlap a Take.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace kx::graph {

class PartRanges {
 public:
  explicit PartRanges(int n_parts = 1) { Init(n_parts); }
  PartRanges(const PartRanges&) = delete;
  PartRanges& operator=(const PartRanges&) = delete;
  PartRanges(PartRanges&&) = default;
  PartRanges& operator=(PartRanges&&) = default;

  // n_parts ranges, all empty until Arm. Values < 1 mean 1.
  void Init(int n_parts);
  int n_parts() const { return n_parts_; }

  // Part i owns units [n_units·i/P, n_units·(i+1)/P). n_units < 2^31 (KX_CHECK).
  void Arm(int64_t n_units);

  // Part `part`'s next unit: the front of its own range, else (a steal) the back of the
  // range with the most units left. False once every range is empty.
  bool Take(int part, int64_t* unit);
  // The front of part's own range only (false once it is empty).
  bool TakeOwn(int part, int64_t* unit);
  // The back of the other range with the most left (false once all are empty).
  bool Steal(int part, int64_t* unit);

  // Units taken by Steal since Init (a statistic: relaxed).
  int64_t stolen() const;

 private:
  // One cache line per range: each owner's CAS stays in its own core's cache until a thief
  // comes.
  struct alignas(64) Range {
    std::atomic<uint64_t> bounds{0};  // next (low 32 bits), end (high 32 bits)
    std::atomic<int64_t> stolen{0};   // units this part stole (by the thread running it)
  };
  static uint64_t Pack(uint32_t next, uint32_t end) {
    return (static_cast<uint64_t>(end) << 32) | next;
  }
  static uint32_t Next(uint64_t b) { return static_cast<uint32_t>(b); }
  static uint32_t End(uint64_t b) { return static_cast<uint32_t>(b >> 32); }

  std::unique_ptr<Range[]> ranges_;
  int n_parts_ = 1;
};

}  // namespace kx::graph
