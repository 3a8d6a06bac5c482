// A per-token task DAG: built once (a plan), run many times (once per token).
//
// Nodes are CPU tasks, each split into n_parts independently schedulable
// parts, or externals — nodes no executor runs, completed by Signal(id) from
// any thread (an I/O completion, a device event). A node completes when all
// its parts ran (CPU) or when it was signalled and its predecessors completed
// (external); its successors become ready when all their predecessors have
// completed. Readiness is counted with atomics and ready parts go through a
// lock-free bounded MPMC ring (ready_queue.h): after Finalize(), Reset(),
// Signal() and the executor side allocate nothing and take no lock.
//
// Usage:
//   kx::graph::TaskGraph g;
//   int attn = g.Add(AttnTask, &layer_ctx, /*n_parts=*/2, "attn.3");
//   int read = g.AddExternal("read.3");          // an I/O read, signalled when it lands
//   g.SetTag(read, 3);                            // stall time is reported per tag
//   int ffn = g.Add(FfnTask, &layer_ctx, 4, "ffn.3");
//   g.Depend(attn, ffn);
//   g.Depend(read, ffn);
//   KX_RETURN_IF_ERROR(g.Finalize());
//   kx::graph::CpuExecutor exec(pool);            // cpu_executor.h
//   for (each token) {
//     g.Reset();                                  // arm; Signal(read) is allowed from here on
//     issue_io([&] { g.Signal(read); });
//     exec.Run(g);                                // returns when every node completed
//   }
//
// Externals with predecessors: the external completes when BOTH it was
// signalled AND all its predecessors completed, in either order (its pending
// count is n_predecessors + 1, the signal being one more "predecessor"). So a
// signal may arrive early, and successors of an external still never run
// before the external's own predecessors. Every external must be signalled
// exactly once per run; a second Signal in one run (or a Signal before
// Reset) is a KX_CHECK failure.
//
// Thread-safety: building (Add, AddExternal, Depend, SetTag, Finalize) and
// Reset are single-threaded and must not overlap a run. Signal is
// thread-safe and may be called from any thread between Reset and the end of
// the run. The graph must outlive every Signal call made on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/ready_queue.h"

namespace kx::graph {

// One part of a CPU task: part in [0, n_parts).
using TaskFn = void (*)(void* ctx, int part, int n_parts);

// The tag of a node with none; tags are otherwise in [0, kMaxTag].
inline constexpr int kNoTag = -1;
inline constexpr int kMaxTag = 1 << 16;

class TaskGraph {
 public:
  TaskGraph() = default;
  TaskGraph(const TaskGraph&) = delete;
  TaskGraph& operator=(const TaskGraph&) = delete;

  // ---- Building the plan (single-threaded). Changing a finalized graph
  // un-finalizes it: call Finalize() again before the next Reset().

  // A CPU task of n_parts parts, each run as fn(ctx, part, n_parts). Returns
  // its node id (ids are 0, 1, 2, ... in order of creation). Bad arguments
  // (null fn, n_parts < 1) are reported by Finalize().
  int Add(TaskFn fn, void* ctx, int n_parts = 1, const char* name = "");
  // A node completed by Signal(id) (see the file comment for predecessors).
  int AddExternal(const char* name);
  // `after` may start only once `before` completed. Bad ids are reported by
  // Finalize(); a duplicate edge is harmless.
  void Depend(int before, int after);
  // An optional small integer label (e.g. the layer index), kNoTag or in
  // [0, kMaxTag]; CpuExecutor attributes external wait time to it.
  void SetTag(int id, int tag);
  // Validates the plan (ids, parts, tags, no cycle), builds the compact
  // successor arrays and the run state. InvalidArgument naming the offending
  // node(s) otherwise; the graph then stays un-finalized.
  absl::Status Finalize();

  // ---- Running (after Finalize).

  // Re-arms every counter for one more run and queues the ready roots. No
  // allocation. Must not overlap a run or a Signal of the previous run.
  void Reset();
  // Completes external `id` (once its predecessors completed). Thread-safe.
  void Signal(int id);

  // ---- Inspection.
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  bool finalized() const { return finalized_; }
  // Parts of all CPU tasks together: what one run executes.
  int64_t total_parts() const { return total_parts_; }
  const std::string& name(int id) const { return nodes_[CheckedId(id)].name; }
  bool is_external(int id) const { return nodes_[CheckedId(id)].external; }
  int n_parts(int id) const { return nodes_[CheckedId(id)].n_parts; }
  int tag(int id) const { return nodes_[CheckedId(id)].tag; }
  // The largest tag in use (kNoTag when none); valid after Finalize.
  int max_tag() const { return max_tag_; }
  // The graph in Graphviz dot: CPU tasks as ellipses with their parts,
  // externals as dashed boxes, tags in the labels.
  std::string ToDot() const;

  // ---- The executor side (CpuExecutor; later a device executor).
  struct Part {
    int node;
    int part;
  };
  // Starts a run: KX_CHECKs the graph was Reset since the last run.
  void BeginRun();
  // Takes one ready part, if any. Lock-free; any thread.
  bool TryPopPart(Part* part);
  // Runs the part's function, then completes it: when it was the node's last
  // part, successors whose predecessors all completed are made ready. The
  // first part made ready is not queued but handed back in *next (true
  // returned): the caller runs it next, on a warm cache and without a trip
  // through the ring; the others are queued for any thread.
  bool RunPart(Part part, Part* next);
  // True once every node completed (an acquire: everything the tasks wrote
  // is visible to the caller).
  bool AllDone() const { return sinks_left_.load(std::memory_order_acquire) == 0; }
  // Ends a run: KX_CHECKs that every node completed exactly once.
  void EndRun();
  // A graph with externals can stall with every executor thread idle, when only a Signal
  // can make progress; spinning then takes the cores from the threads that signal (an I/O
  // completion thread, a device watcher). So an executor may sleep: returns a ready part at
  // once if there is one (true, *part set), else sleeps until parts are queued, the run
  // ends, or timeout_ns passed (a safety net; false). Without externals nothing wakes a
  // sleeper but the timeout: call only when has_externals().
  bool has_externals() const { return n_externals_ > 0; }
  bool SleepForWork(int64_t timeout_ns, Part* part);
  // The tag of the external signalled last (kNoTag if none this run): the
  // executor attributes a stall that a signal ended to it.
  int last_signalled_tag() const { return last_signalled_tag_.load(std::memory_order_relaxed); }
  // The signals of this run, in the order they were taken (one per external): when (NowNs,
  // taken in Signal before any successor is released) and the external's tag, so the
  // executor can split a stall at the signals inside it. signals_logged() counts records
  // claimed; signal_record(i) is false while record i is still being written.
  int signals_logged() const { return signal_log_n_.load(std::memory_order_acquire); }
  bool signal_record(int i, int64_t* ns, int* tag) const {
    const int64_t t = signal_log_[i].ns.load(std::memory_order_acquire);
    if (t == 0) return false;
    *ns = t;
    *tag = signal_log_[i].tag;
    return true;
  }

 private:
  struct Node {
    TaskFn fn = nullptr;
    void* ctx = nullptr;
    int n_parts = 1;
    int tag = kNoTag;
    bool external = false;
    std::string name;
    // Set by Finalize.
    int n_preds = 0;
    int succ_begin = 0, succ_end = 0;  // into succs_
  };
  // Per-node run state, one cache line each: parts of different nodes run on
  // different threads and would otherwise false-share their counters.
  struct alignas(64) NodeState {
    // Predecessors (plus the signal, for externals) not yet completed.
    std::atomic<int32_t> pending{0};
    // Parts not yet completed (CPU tasks).
    std::atomic<int32_t> parts_left{0};
    // 1 once Signal(id) was called this run (externals).
    std::atomic<int32_t> signalled{0};
  };

  int CheckedId(int id) const;
  int AddNode(Node node);
  int InitialPending(const Node& n) const { return n.n_preds + (n.external ? 1 : 0); }
  // Where a completing executor thread takes one newly ready part for itself
  // (null from Signal: everything is queued).
  struct Keep {
    Part* part;
    bool taken;
  };
  // One predecessor (or the signal) of `id` completed.
  void Release(int id, Keep* keep);
  // `id` became ready: queue its parts (one into *keep if free), or complete
  // it if external.
  void MakeReady(int id, Keep* keep);
  void CompleteNode(int id, Keep* keep);
  // Wakes SleepForWork's sleepers, if any (graphs with externals only).
  void WakeSleepers();
  std::string CycleMessage(const std::vector<int>& indegree_left) const;
  static uint64_t Pack(int node, int part) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(part);
  }

  // The plan.
  std::vector<Node> nodes_;
  std::vector<std::pair<int, int>> edges_;
  absl::Status build_error_;  // the first bad Add/Depend/SetTag, reported by Finalize
  bool finalized_ = false;
  std::vector<int> succs_;  // successor ids, grouped per node (CSR)
  std::vector<int> roots_;  // nodes with no predecessor that are CPU tasks
  int64_t total_parts_ = 0;
  int n_sinks_ = 0;
  int max_tag_ = kNoTag;

  // The run state.
  std::unique_ptr<NodeState[]> state_;
  ReadyQueue ready_;
  bool armed_ = false;  // Reset since the last run (owner thread only)
  alignas(64) std::atomic<int32_t> sinks_left_{0};
  std::atomic<int> last_signalled_tag_{kNoTag};
  // One record per external and run (Signal writes tag, then ns with release).
  struct SignalRecord {
    std::atomic<int64_t> ns{0};
    int tag = kNoTag;
  };
  std::unique_ptr<SignalRecord[]> signal_log_;
  int n_externals_ = 0;
  std::atomic<int> signal_log_n_{0};
  // SleepForWork: a futex word bumped by WakeSleepers, and the threads sleeping on it.
  alignas(64) std::atomic<uint32_t> wake_seq_{0};
  std::atomic<int32_t> sleepers_{0};
};

}  // namespace kx::graph
