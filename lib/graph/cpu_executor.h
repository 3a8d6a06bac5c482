// Runs a TaskGraph on the persistent kx::ThreadPool: one pool.Run per graph
// run, in which every thread (the caller is thread 0) loops — pop a ready
// part, run it, complete it (which queues the successors it made ready) —
// until every node completed. A thread that completes a node runs one of the
// successors it made ready itself (see TaskGraph::RunPart) and queues the
// rest. A thread with nothing ready spins (pause, then yield after 20 us of
// waiting), so keep the pool hot (ThreadPool::HotScope) around a token's runs.
// In a graph with externals, once every thread waits past those 20 us only a
// Signal can make progress, and the threads sleep instead of yielding
// (TaskGraph::SleepForWork), leaving the cores to whoever signals (docs/dag.md:
// with the RAM tier's reads, 1.5x tg on a loaded machine).
// Run returns only once every external was signalled: an external that is
// never signalled makes it wait forever.
//
// Cost (bench_graph, empty tasks, 2 threads, quiet machine): ~20 ns per task along a chain,
// ~60 ns per part when each task has 2 parts — about one ThreadPool::Run per
// op; every edge is an atomic decrement of the successor's counter, so a
// join node is cheaper than all-to-all edges between layers.
//
// Usage:
//   kx::ThreadPool pool(2);
//   kx::ThreadPool::HotScope hot(pool);
//   kx::graph::CpuExecutor exec(pool);
//   g.Reset();
//   kx::graph::RunStats st = exec.Run(g);   // st.external_wait_ns: stalled on I/O
//
// Stall accounting takes a timestamp only when a thread goes from working to
// waiting or back, never per task. The counters of one run:
//   parts_run        task parts executed, over all threads (== g.total_parts()).
//   wall_ns          Run's wall time on the calling thread, pool start-up included.
//   idle_wait_ns     summed over threads: time inside the run with nothing ready
//                    to pop — from the failed pop to the next successful pop or
//                    to the thread's exit. A worker counts as waiting from its
//                    arrival in the run; time before it arrives is not counted.
//                    Includes waiting for other threads' parts (not enough
//                    parallelism) and waiting for externals.
//   external_wait_ns wall time, as seen by thread 0, during which every
//                    thread of the pool was waiting (or not yet arrived) with
//                    nodes unfinished: no part running and none ready, so only
//                    a Signal could make progress. That is the time the token
//                    stalled on externals (I/O, device events).
// external_wait_by_tag(): each such stall interval is also added to the tag
// of the external signalled last when the interval ended (the signal that
// ended the stall, up to a race between near-simultaneous signals). A signal
// inside a stall that made nothing ready splits it: the piece before goes to
// that signal's tag (TaskGraph logs each signal's time), so a chain upload →
// kernels → download of externals charges a stall to the part that was
// running, however late thread 0 noticed the signals.
//
// Thread-safety: one Run at a time per executor (and per pool).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "graph/task_graph.h"

namespace kx::graph {

struct RunStats {
  int64_t parts_run = 0;
  int64_t wall_ns = 0;
  int64_t idle_wait_ns = 0;
  int64_t external_wait_ns = 0;
};

class CpuExecutor {
 public:
  explicit CpuExecutor(ThreadPool& pool);
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  // Runs g (finalized and Reset) to completion on the pool: returns when
  // every node, externals included, completed. KX_CHECKs that each node
  // completed exactly once.
  RunStats Run(TaskGraph& g);

  // The last run's external_wait_ns split by tag: entry t is the stall time
  // ended by a signal of an external tagged t (g.max_tag() + 1 entries).
  const std::vector<int64_t>& external_wait_by_tag() const { return wait_by_tag_; }

 private:
  // Per-thread results, one cache line each so threads do not false-share.
  struct alignas(64) ThreadStats {
    int64_t parts_run = 0;
    int64_t idle_ns = 0;
  };

  void Work(TaskGraph& g, int ith, int nth);

  ThreadPool& pool_;
  std::vector<ThreadStats> per_thread_;
  std::vector<int64_t> wait_by_tag_;
  int64_t external_wait_ns_ = 0;  // written by thread 0 only
  // Threads in the waiting state (or not yet arrived) in the current run.
  alignas(64) std::atomic<int> waiting_threads_{0};
};

}  // namespace kx::graph
