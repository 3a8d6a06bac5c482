#include "graph/task_graph.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/check.h"
#include "base/timer.h"

namespace kx::graph {

int TaskGraph::CheckedId(int id) const {
  KX_CHECK_MSG(id >= 0 && id < num_nodes(), "TaskGraph: node id out of range");
  return id;
}

int TaskGraph::AddNode(Node node) {
  finalized_ = false;
  nodes_.push_back(std::move(node));
  return num_nodes() - 1;
}

int TaskGraph::Add(TaskFn fn, void* ctx, int n_parts, const char* name) {
  Node n;
  n.fn = fn;
  n.ctx = ctx;
  n.n_parts = n_parts;
  n.name = name ? name : "";
  const int id = AddNode(std::move(n));
  if (build_error_.ok() && fn == nullptr) {
    build_error_ = absl::InvalidArgumentError(
        absl::StrFormat("task graph: node %d ('%s') has a null task function", id, name));
  }
  if (build_error_.ok() && n_parts < 1) {
    build_error_ = absl::InvalidArgumentError(absl::StrFormat(
        "task graph: node %d ('%s') has n_parts = %d; it must be >= 1", id, name, n_parts));
  }
  return id;
}

int TaskGraph::AddExternal(const char* name) {
  Node n;
  n.external = true;
  n.n_parts = 0;
  n.name = name ? name : "";
  return AddNode(std::move(n));
}

void TaskGraph::Depend(int before, int after) {
  finalized_ = false;
  const int n = num_nodes();
  if (build_error_.ok() && (before < 0 || before >= n || after < 0 || after >= n)) {
    build_error_ = absl::InvalidArgumentError(absl::StrFormat(
        "task graph: Depend(%d, %d) names a node that does not exist (ids are 0..%d)", before,
        after, n - 1));
    return;
  }
  edges_.emplace_back(before, after);
}

void TaskGraph::SetTag(int id, int tag) {
  finalized_ = false;
  if (id < 0 || id >= num_nodes()) {
    if (build_error_.ok()) {
      build_error_ = absl::InvalidArgumentError(absl::StrFormat(
          "task graph: SetTag(%d, %d) names a node that does not exist (ids are 0..%d)", id, tag,
          num_nodes() - 1));
    }
    return;
  }
  if (build_error_.ok() && (tag < kNoTag || tag > kMaxTag)) {
    build_error_ = absl::InvalidArgumentError(
        absl::StrFormat("task graph: node %d ('%s') has tag %d; tags are -1 (none) or 0..%d", id,
                        nodes_[id].name, tag, kMaxTag));
  }
  nodes_[id].tag = tag;
}

std::string TaskGraph::CycleMessage(const std::vector<int>& indegree_left) const {
  // Every node left with a positive in-degree after Kahn's pass has a
  // predecessor that is also left: walking predecessors must revisit a node.
  const int n = num_nodes();
  std::vector<int> pred_on_cycle(n, -1);
  for (const auto& [b, a] : edges_) {
    if (indegree_left[a] > 0 && indegree_left[b] > 0) pred_on_cycle[a] = b;
  }
  int start = 0;
  while (start < n && indegree_left[start] == 0) ++start;
  std::vector<int> seen_at(n, -1);
  std::vector<int> walk;
  int v = start;
  while (seen_at[v] < 0) {
    seen_at[v] = static_cast<int>(walk.size());
    walk.push_back(v);
    v = pred_on_cycle[v];
  }
  // walk[seen_at[v]..] is the cycle, in predecessor order: print it forwards.
  std::string msg = "task graph: the dependencies form a cycle: ";
  for (int i = static_cast<int>(walk.size()) - 1; i >= seen_at[v]; --i) {
    absl::StrAppend(&msg, walk[i], " '", nodes_[walk[i]].name, "' -> ");
  }
  absl::StrAppend(&msg, v, " '", nodes_[v].name, "'");
  return msg;
}

absl::Status TaskGraph::Finalize() {
  finalized_ = false;
  armed_ = false;
  if (!build_error_.ok()) return build_error_;
  const int n = num_nodes();

  // Compact successor arrays (CSR) and predecessor counts.
  std::vector<int> out_degree(n, 0);
  for (Node& node : nodes_) node.n_preds = 0;
  for (const auto& [b, a] : edges_) {
    ++out_degree[b];
    ++nodes_[a].n_preds;
  }
  succs_.assign(edges_.size(), 0);
  int offset = 0;
  for (int i = 0; i < n; ++i) {
    nodes_[i].succ_begin = nodes_[i].succ_end = offset;
    offset += out_degree[i];
  }
  for (const auto& [b, a] : edges_) succs_[nodes_[b].succ_end++] = a;

  // Kahn's pass: every node must be reachable in topological order.
  std::vector<int> indegree_left(n);
  std::vector<int> order;
  order.reserve(n);
  for (int i = 0; i < n; ++i) {
    indegree_left[i] = nodes_[i].n_preds;
    if (indegree_left[i] == 0) order.push_back(i);
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const Node& node = nodes_[order[k]];
    for (int s = node.succ_begin; s < node.succ_end; ++s) {
      if (--indegree_left[succs_[s]] == 0) order.push_back(succs_[s]);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    return absl::InvalidArgumentError(CycleMessage(indegree_left));
  }

  roots_.clear();
  total_parts_ = 0;
  n_sinks_ = 0;
  max_tag_ = kNoTag;
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    if (!node.external) total_parts_ += node.n_parts;
    if (!node.external && node.n_preds == 0) roots_.push_back(i);
    if (node.succ_begin == node.succ_end) ++n_sinks_;
    max_tag_ = std::max(max_tag_, node.tag);
  }
  if (total_parts_ > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("task graph: %d parts in all; at most %d are supported", total_parts_,
                        std::numeric_limits<int32_t>::max()));
  }
  state_ = std::make_unique<NodeState[]>(static_cast<size_t>(n));
  n_externals_ = static_cast<int>(
      std::count_if(nodes_.begin(), nodes_.end(), [](const Node& node) { return node.external; }));
  signal_log_ = std::make_unique<SignalRecord[]>(static_cast<size_t>(std::max(n_externals_, 1)));
  // Every part is queued exactly once per run, so the ring never fills.
  ready_.Init(std::max<int64_t>(total_parts_, 1));
  finalized_ = true;
  return absl::OkStatus();
}

void TaskGraph::Reset() {
  KX_CHECK_MSG(finalized_, "TaskGraph::Reset before a successful Finalize");
  // A run that completed leaves the ring empty; a Reset without a run in
  // between (roots still queued) empties it.
  if (!ready_.LooksEmpty()) ready_.Clear();
  const int n = num_nodes();
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    NodeState& st = state_[i];
    st.pending.store(InitialPending(node), std::memory_order_relaxed);
    st.parts_left.store(node.n_parts, std::memory_order_relaxed);
    st.signalled.store(0, std::memory_order_relaxed);
  }
  last_signalled_tag_.store(kNoTag, std::memory_order_relaxed);
  for (int i = 0; i < n_externals_; ++i) signal_log_[i].ns.store(0, std::memory_order_relaxed);
  signal_log_n_.store(0, std::memory_order_relaxed);
  for (int root : roots_) {
    for (int p = 0; p < nodes_[root].n_parts; ++p) KX_CHECK(ready_.TryPush(Pack(root, p)));
  }
  // Release: a thread that later sees this counter (an executor, a Signal
  // through its RMWs) sees the state stored above.
  sinks_left_.store(n_sinks_, std::memory_order_release);
  armed_ = true;
}

void TaskGraph::Signal(int id) {
  const Node& node = nodes_[CheckedId(id)];
  KX_CHECK_MSG(node.external, "TaskGraph::Signal on a node that is not an external");
  const int was = state_[id].signalled.exchange(1, std::memory_order_acq_rel);
  KX_CHECK_MSG(was == 0,
               "TaskGraph::Signal: external signalled twice in one run (or before Reset)");
  // Each external is signalled once per run: the log has a record for every signal.
  SignalRecord& rec = signal_log_[signal_log_n_.fetch_add(1, std::memory_order_relaxed)];
  rec.tag = node.tag;
  rec.ns.store(NowNs(), std::memory_order_release);
  last_signalled_tag_.store(node.tag, std::memory_order_relaxed);
  Release(id, nullptr);
}

void TaskGraph::Release(int id, Keep* keep) {
  const int32_t before = state_[id].pending.fetch_sub(1, std::memory_order_acq_rel);
  KX_CHECK_MSG(before >= 1, "TaskGraph: a node was released more often than it has predecessors");
  if (before == 1) MakeReady(id, keep);
}

void TaskGraph::MakeReady(int id, Keep* keep) {
  const Node& node = nodes_[id];
  if (node.external) {
    // Signalled and every predecessor done: nothing to run. Recursion depth is
    // bounded by the longest chain of externals.
    CompleteNode(id, keep);
    return;
  }
  int p = 0;
  if (keep != nullptr && !keep->taken) {
    *keep->part = Part{id, 0};
    keep->taken = true;
    p = 1;
  }
  if (p == node.n_parts) return;  // handed to the completing thread: nobody to wake
  for (; p < node.n_parts; ++p) {
    KX_CHECK_MSG(ready_.TryPush(Pack(id, p)), "TaskGraph: ready ring full (a part queued twice)");
  }
  if (n_externals_ > 0) WakeSleepers();
}

namespace {
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex word must be a plain 32-bit atomic");
uint32_t* FutexWord(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }
}  // namespace

void TaskGraph::WakeSleepers() {
  // A read-modify-write, not a load: it reads the latest sleepers_, so either it sees
  // SleepForWork's increment or that increment reads from it, and then the sleeper's
  // re-check sees the push (or the last sink's completion) made before it. (Not a fence:
  // TSan does not support those.)
  if (sleepers_.fetch_add(0, std::memory_order_seq_cst) == 0) return;
  wake_seq_.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, FutexWord(&wake_seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

bool TaskGraph::SleepForWork(int64_t timeout_ns, Part* part) {
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = wake_seq_.load(std::memory_order_seq_cst);
  const bool got = TryPopPart(part);
  if (!got && !AllDone()) {
    timespec ts;
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000);
    syscall(SYS_futex, FutexWord(&wake_seq_), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return got;
}

void TaskGraph::CompleteNode(int id, Keep* keep) {
  const Node& node = nodes_[id];
  for (int s = node.succ_begin; s < node.succ_end; ++s) Release(succs_[s], keep);
  // Only sinks are counted: every other node is an ancestor of a sink, whose
  // completion needs every Release above, so "all sinks done" means "all done"
  // with one shared RMW per sink instead of one per node.
  if (node.succ_begin == node.succ_end) {
    const int32_t before = sinks_left_.fetch_sub(1, std::memory_order_acq_rel);
    KX_CHECK_MSG(before >= 1, "TaskGraph: a sink completed twice in one run");
    if (before == 1 && n_externals_ > 0) WakeSleepers();  // the run is over
  }
}

void TaskGraph::BeginRun() {
  KX_CHECK_MSG(finalized_, "TaskGraph: run before a successful Finalize");
  KX_CHECK_MSG(armed_, "TaskGraph: run without Reset since the last run");
  armed_ = false;
}

bool TaskGraph::TryPopPart(Part* part) {
  uint64_t v;
  if (!ready_.TryPop(&v)) return false;
  part->node = static_cast<int>(v >> 32);
  part->part = static_cast<int>(v & 0xffffffffu);
  return true;
}

bool TaskGraph::RunPart(Part part, Part* next) {
  const Node& node = nodes_[part.node];
  node.fn(node.ctx, part.part, node.n_parts);
  const int32_t before = state_[part.node].parts_left.fetch_sub(1, std::memory_order_acq_rel);
  KX_CHECK_MSG(before >= 1, "TaskGraph: a task part ran twice in one run");
  Keep keep{next, false};
  if (before == 1) CompleteNode(part.node, &keep);
  return keep.taken;
}

void TaskGraph::EndRun() {
  KX_CHECK_MSG(AllDone(), "TaskGraph: run ended before every node completed");
  KX_CHECK_MSG(ready_.LooksEmpty(), "TaskGraph: run ended with parts still queued");
  for (int i = 0; i < num_nodes(); ++i) {
    const NodeState& st = state_[i];
    KX_CHECK_MSG(st.pending.load(std::memory_order_relaxed) == 0,
                 "TaskGraph: a node did not get all its predecessors this run");
    KX_CHECK_MSG(st.parts_left.load(std::memory_order_relaxed) == 0,
                 "TaskGraph: a task did not run all its parts this run");
    KX_CHECK_MSG(!nodes_[i].external || st.signalled.load(std::memory_order_relaxed) == 1,
                 "TaskGraph: an external completed without a Signal");
  }
}

std::string TaskGraph::ToDot() const {
  std::string dot = "digraph task_graph {\n  rankdir=TB;\n";
  for (int i = 0; i < num_nodes(); ++i) {
    const Node& node = nodes_[i];
    std::string label = absl::StrCat("#", i, " ", absl::StrReplaceAll(node.name, {{"\"", "\\\""}}));
    if (!node.external) absl::StrAppend(&label, "\\nparts=", node.n_parts);
    if (node.tag != kNoTag) absl::StrAppend(&label, "\\ntag=", node.tag);
    absl::StrAppend(&dot, "  n", i, " [label=\"", label, "\"",
                    node.external ? ", shape=box, style=dashed" : "", "];\n");
  }
  for (const auto& [b, a] : edges_) absl::StrAppend(&dot, "  n", b, " -> n", a, ";\n");
  dot += "}\n";
  return dot;
}

}  // namespace kx::graph
