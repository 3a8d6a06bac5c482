// Unit tests of the per-token task DAG (lib/graph/task_graph.h) and the CPU
// executor (lib/graph/cpu_executor.h): shapes (chain, diamond, fan-out/in),
// multi-part tasks, externals signalled before and during a run, many
// Reset+Run cycles, and the plan errors Finalize reports.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "catch2/catch.hpp"
#include "graph/cpu_executor.h"
#include "graph/task_graph.h"

namespace kx::graph {
namespace {

constexpr int kMaxNodes = 4096;
constexpr int kMaxParts = 16;

// What the tasks of a test record: for every (node, part) how often it ran
// and the global sequence number at which it started, and per node the
// sequence number at which it completed (stamped by its last part).
struct Recorder {
  std::atomic<int64_t> seq{1};
  std::atomic<int> runs[kMaxNodes][kMaxParts] = {};
  std::atomic<int> parts_done[kMaxNodes] = {};
  std::atomic<int64_t> started[kMaxNodes] = {};
  std::atomic<int64_t> completed[kMaxNodes] = {};

  void Clear(int n) {
    for (int i = 0; i < n; ++i) {
      for (auto& r : runs[i]) r.store(0);
      parts_done[i].store(0);
      started[i].store(0);
      completed[i].store(0);
    }
  }
};

struct TaskCtx {
  Recorder* rec;
  int node;
};

void RecordTask(void* ctx, int part, int n_parts) {
  auto* t = static_cast<TaskCtx*>(ctx);
  Recorder& r = *t->rec;
  const int64_t s = r.seq.fetch_add(1);
  int64_t zero = 0;
  r.started[t->node].compare_exchange_strong(zero, s);
  r.runs[t->node][part].fetch_add(1);
  if (r.parts_done[t->node].fetch_add(1) + 1 == n_parts)
    r.completed[t->node].store(r.seq.fetch_add(1));
}

// A graph whose CPU tasks record into `rec`; ctxs must not move once used.
struct Builder {
  TaskGraph g;
  Recorder* rec;
  std::vector<TaskCtx> ctxs = std::vector<TaskCtx>(kMaxNodes);
  explicit Builder(Recorder* r) : rec(r) {}
  int Task(int n_parts = 1, const char* name = "t") {
    const int id = g.num_nodes();
    ctxs[id] = {rec, id};
    return g.Add(RecordTask, &ctxs[id], n_parts, name);
  }
};

// Every part of every CPU task ran once, and each task started only after
// all its (CPU) predecessors completed.
void CheckRun(const TaskGraph& g, const Recorder& r,
              const std::vector<std::pair<int, int>>& edges) {
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (g.is_external(i)) continue;
    for (int p = 0; p < g.n_parts(i); ++p) REQUIRE(r.runs[i][p].load() == 1);
    REQUIRE(r.completed[i].load() > 0);
  }
  for (const auto& [b, a] : edges) {
    if (g.is_external(b) || g.is_external(a)) continue;
    REQUIRE(r.completed[b].load() < r.started[a].load());
  }
}

TEST_CASE("graph: a chain runs in order on 1 and 2 threads", "[graph]") {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    CpuExecutor exec(pool);
    auto rec = std::make_unique<Recorder>();
    Builder b(rec.get());
    constexpr int kLen = 200;
    std::vector<std::pair<int, int>> edges;
    int prev = b.Task();
    for (int i = 1; i < kLen; ++i) {
      const int cur = b.Task();
      b.g.Depend(prev, cur);
      edges.emplace_back(prev, cur);
      prev = cur;
    }
    REQUIRE(b.g.Finalize().ok());
    b.g.Reset();
    const RunStats st = exec.Run(b.g);
    CheckRun(b.g, *rec, edges);
    REQUIRE(st.parts_run == kLen);
    REQUIRE(st.wall_ns > 0);
    for (int i = 1; i < kLen; ++i) REQUIRE(rec->completed[i - 1].load() < rec->started[i].load());
  }
}

TEST_CASE("graph: diamond with multi-part tasks", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  auto rec = std::make_unique<Recorder>();
  Builder b(rec.get());
  const int a = b.Task(1, "a");
  const int l = b.Task(5, "left");
  const int r = b.Task(3, "right");
  const int d = b.Task(2, "join");
  const std::vector<std::pair<int, int>> edges = {{a, l}, {a, r}, {l, d}, {r, d}};
  for (auto [x, y] : edges) b.g.Depend(x, y);
  REQUIRE(b.g.Finalize().ok());
  REQUIRE(b.g.total_parts() == 11);
  b.g.Reset();
  const RunStats st = exec.Run(b.g);
  REQUIRE(st.parts_run == 11);
  CheckRun(b.g, *rec, edges);
  // The join started after the last part of both sides.
  REQUIRE(rec->started[d].load() > rec->completed[l].load());
  REQUIRE(rec->started[d].load() > rec->completed[r].load());
}

TEST_CASE("graph: fan-out then fan-in", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  auto rec = std::make_unique<Recorder>();
  Builder b(rec.get());
  constexpr int kWidth = 300;
  const int src = b.Task(1, "src");
  const int dst = b.Task(4, "dst");
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < kWidth; ++i) {
    const int mid = b.Task(1 + i % 3, "mid");
    b.g.Depend(src, mid);
    b.g.Depend(mid, dst);
    edges.emplace_back(src, mid);
    edges.emplace_back(mid, dst);
  }
  REQUIRE(b.g.Finalize().ok());
  b.g.Reset();
  const RunStats st = exec.Run(b.g);
  REQUIRE(st.parts_run == b.g.total_parts());
  CheckRun(b.g, *rec, edges);
}

TEST_CASE("graph: parts of one task see their index and count", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  TaskGraph g;
  constexpr int kParts = 13;
  std::atomic<int> seen[kParts] = {};
  std::atomic<int> bad_count{0};
  struct Ctx {
    std::atomic<int>* seen;
    std::atomic<int>* bad;
  } ctx{seen, &bad_count};
  g.Add(
      [](void* c, int part, int n) {
        auto* x = static_cast<Ctx*>(c);
        if (n != kParts || part < 0 || part >= n)
          x->bad->fetch_add(1);
        else
          x->seen[part].fetch_add(1);
      },
      &ctx, kParts, "split");
  REQUIRE(g.Finalize().ok());
  g.Reset();
  exec.Run(g);
  REQUIRE(bad_count.load() == 0);
  for (auto& s : seen) REQUIRE(s.load() == 1);
}

TEST_CASE("graph: externals signalled before and during the run", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  auto rec = std::make_unique<Recorder>();
  Builder b(rec.get());
  // early (root external, signalled before Run) -> t1
  // t0 -> late (external with a predecessor, signalled during Run) -> t2
  // t0 -> eager (external signalled before its predecessor t0 completed) -> t3
  const int early = b.g.AddExternal("early");
  const int late = b.g.AddExternal("late");
  const int eager = b.g.AddExternal("eager");
  b.g.SetTag(late, 7);
  const int t0 = b.Task(2, "t0");
  const int t1 = b.Task(1, "t1");
  const int t2 = b.Task(3, "t2");
  const int t3 = b.Task(1, "t3");
  b.g.Depend(early, t1);
  b.g.Depend(t0, late);
  b.g.Depend(late, t2);
  b.g.Depend(t0, eager);
  b.g.Depend(eager, t3);
  REQUIRE(b.g.Finalize().ok());
  REQUIRE(b.g.max_tag() == 7);
  bool saw_external_wait = false;
  for (int rep = 0; rep < 20; ++rep) {
    rec->Clear(b.g.num_nodes());
    b.g.Reset();
    b.g.Signal(early);
    b.g.Signal(eager);  // t0 has not run yet: t3 must still wait for it
    std::thread io([&] {
      // Signal `late` once t0 completed, after a short pause so the executor
      // is likely waiting on it.
      while (rec->completed[t0].load() == 0) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      b.g.Signal(late);
    });
    const RunStats st = exec.Run(b.g);
    io.join();
    CheckRun(b.g, *rec, {{t0, t2}, {t0, t3}});
    REQUIRE(rec->started[t2].load() > rec->completed[t0].load());
    REQUIRE(rec->started[t3].load() > rec->completed[t0].load());
    REQUIRE(st.parts_run == 7);
    REQUIRE(st.external_wait_ns >= 0);
    REQUIRE(st.external_wait_ns <= st.wall_ns);
    REQUIRE(st.idle_wait_ns <= st.wall_ns * pool.size());
    const auto& by_tag = exec.external_wait_by_tag();
    REQUIRE(by_tag.size() == 8);
    int64_t tagged = 0;
    for (int64_t ns : by_tag) tagged += ns;
    REQUIRE(tagged <= st.external_wait_ns);
    // Only `late` is tagged, and only it can end a stall after t0.
    if (by_tag[7] > 0) saw_external_wait = true;
  }
  // One run in twenty at least stalled measurably on the late signal.
  REQUIRE(saw_external_wait);
}

TEST_CASE("graph: a stall over a chain of externals is split at their signals", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  auto rec = std::make_unique<Recorder>();
  Builder b(rec.get());
  // t0 -> up (tag 1) -> kernels (tag 2) -> down (tag 1) -> t1, as the decode graph's device
  // externals: each signalled 300 us after the one before, nothing to run meanwhile.
  const int t0 = b.Task(1, "t0");
  const int up = b.g.AddExternal("up");
  const int kernels = b.g.AddExternal("kernels");
  const int down = b.g.AddExternal("down");
  const int t1 = b.Task(1, "t1");
  b.g.SetTag(up, 1);
  b.g.SetTag(kernels, 2);
  b.g.SetTag(down, 1);
  b.g.Depend(t0, up);
  b.g.Depend(up, kernels);
  b.g.Depend(kernels, down);
  b.g.Depend(down, t1);
  REQUIRE(b.g.Finalize().ok());
  bool split = false;
  for (int rep = 0; rep < 10 && !split; ++rep) {
    rec->Clear(b.g.num_nodes());
    b.g.Reset();
    std::thread dev([&] {
      while (rec->completed[t0].load() == 0) std::this_thread::yield();
      for (int id : {up, kernels, down}) {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        b.g.Signal(id);
      }
    });
    const RunStats st = exec.Run(b.g);
    dev.join();
    const auto& by_tag = exec.external_wait_by_tag();
    REQUIRE(by_tag.size() == 3);
    for (int64_t ns : by_tag) REQUIRE(ns >= 0);
    REQUIRE(by_tag[0] + by_tag[1] + by_tag[2] <= st.external_wait_ns);
    REQUIRE(st.external_wait_ns <= st.wall_ns);
    // The middle signal made nothing ready, yet the stall before it went to its tag.
    if (by_tag[1] > 0 && by_tag[2] > 0) split = true;
  }
  REQUIRE(split);
}

TEST_CASE("graph: a graph of externals only, all signalled before Run", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  TaskGraph g;
  const int a = g.AddExternal("a");
  const int b = g.AddExternal("b");
  const int c = g.AddExternal("c");
  g.Depend(a, b);
  g.Depend(b, c);
  REQUIRE(g.Finalize().ok());
  g.Reset();
  g.Signal(c);  // out of order: c completes only after a and b
  g.Signal(b);
  g.Signal(a);
  REQUIRE(g.AllDone());
  const RunStats st = exec.Run(g);
  REQUIRE(st.parts_run == 0);
}

TEST_CASE("graph: the empty graph runs", "[graph]") {
  ThreadPool pool(2);
  CpuExecutor exec(pool);
  TaskGraph g;
  REQUIRE(g.Finalize().ok());
  g.Reset();
  REQUIRE(exec.Run(g).parts_run == 0);
}

TEST_CASE("graph: Reset and run 1000 times", "[graph]") {
  ThreadPool pool(2);
  ThreadPool::HotScope hot(pool);
  CpuExecutor exec(pool);
  auto rec = std::make_unique<Recorder>();
  Builder b(rec.get());
  // Two layers of (attention -> {ffn parts, read external} -> merge).
  std::vector<std::pair<int, int>> edges;
  std::vector<int> reads;
  int prev = b.Task(1, "embed");
  for (int layer = 0; layer < 2; ++layer) {
    const int attn = b.Task(2, "attn");
    const int read = b.g.AddExternal("read");
    b.g.SetTag(read, layer);
    const int ffn = b.Task(3, "ffn");
    const int merge = b.Task(1, "merge");
    for (auto [x, y] :
         {std::pair{prev, attn}, {attn, ffn}, {attn, read}, {ffn, merge}, {read, merge}}) {
      b.g.Depend(x, y);
      edges.emplace_back(x, y);
    }
    reads.push_back(read);
    prev = merge;
  }
  REQUIRE(b.g.Finalize().ok());
  constexpr int kRuns = 1000;
  for (int run = 0; run < kRuns; ++run) {
    rec->Clear(b.g.num_nodes());
    b.g.Reset();
    // Every other run signals one read before Run starts.
    if (run % 2 == 0) b.g.Signal(reads[0]);
    std::thread io([&, run] {
      for (size_t i = (run % 2 == 0) ? 1 : 0; i < reads.size(); ++i) b.g.Signal(reads[i]);
    });
    const RunStats st = exec.Run(b.g);
    io.join();
    REQUIRE(st.parts_run == b.g.total_parts());
    CheckRun(b.g, *rec, edges);
  }
}

TEST_CASE("graph: Finalize rejects a cycle and names it", "[graph]") {
  TaskGraph g;
  auto nop = [](void*, int, int) {};
  const int a = g.Add(nop, nullptr, 1, "a");
  const int b = g.Add(nop, nullptr, 1, "bee");
  const int c = g.AddExternal("sea");
  g.Depend(a, b);
  g.Depend(b, c);
  g.Depend(c, a);
  const absl::Status s = g.Finalize();
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  INFO(s.message());
  const std::string msg(s.message());
  REQUIRE(msg.find("cycle") != std::string::npos);
  REQUIRE(msg.find("'bee'") != std::string::npos);
  REQUIRE(msg.find("'sea'") != std::string::npos);
  REQUIRE_FALSE(g.finalized());

  TaskGraph self;
  const int x = self.Add(nop, nullptr, 1, "self");
  self.Depend(x, x);
  REQUIRE(self.Finalize().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("graph: Finalize rejects bad ids, parts and tags", "[graph]") {
  auto nop = [](void*, int, int) {};
  {
    TaskGraph g;
    g.Add(nop, nullptr);
    g.Depend(0, 5);
    const absl::Status s = g.Finalize();
    INFO(s.message());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(s.message()).find("Depend(0, 5)") != std::string::npos);
  }
  {
    TaskGraph g;
    g.Add(nop, nullptr);
    g.Depend(-1, 0);
    REQUIRE(g.Finalize().code() == absl::StatusCode::kInvalidArgument);
  }
  {
    TaskGraph g;
    g.Add(nop, nullptr, 0, "zero");
    const absl::Status s = g.Finalize();
    INFO(s.message());
    REQUIRE(std::string(s.message()).find("n_parts = 0") != std::string::npos);
  }
  {
    TaskGraph g;
    g.Add(nullptr, nullptr, 1, "nofn");
    REQUIRE(std::string(g.Finalize().message()).find("null task function") != std::string::npos);
  }
  {
    TaskGraph g;
    g.AddExternal("x");
    g.SetTag(0, -5);
    REQUIRE(g.Finalize().code() == absl::StatusCode::kInvalidArgument);
    TaskGraph h;
    h.SetTag(3, 1);
    REQUIRE(h.Finalize().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("graph: changing a finalized graph needs Finalize again", "[graph]") {
  TaskGraph g;
  auto nop = [](void*, int, int) {};
  g.Add(nop, nullptr);
  REQUIRE(g.Finalize().ok());
  REQUIRE(g.finalized());
  g.Add(nop, nullptr, 2);
  REQUIRE_FALSE(g.finalized());
  g.Depend(0, 1);
  REQUIRE(g.Finalize().ok());
  REQUIRE(g.total_parts() == 3);
}

TEST_CASE("graph: ToDot lists nodes, parts, tags and edges", "[graph]") {
  TaskGraph g;
  auto nop = [](void*, int, int) {};
  const int a = g.Add(nop, nullptr, 4, "attn.0");
  const int r = g.AddExternal("read \"q\"");
  g.SetTag(r, 3);
  g.Depend(a, r);
  REQUIRE(g.Finalize().ok());
  const std::string dot = g.ToDot();
  INFO(dot);
  REQUIRE(dot.find("digraph") != std::string::npos);
  REQUIRE(dot.find("attn.0\\nparts=4") != std::string::npos);
  REQUIRE(dot.find("read \\\"q\\\"") != std::string::npos);
  REQUIRE(dot.find("tag=3") != std::string::npos);
  REQUIRE(dot.find("style=dashed") != std::string::npos);
  REQUIRE(dot.find("n0 -> n1;") != std::string::npos);
}

}  // namespace
}  // namespace kx::graph
