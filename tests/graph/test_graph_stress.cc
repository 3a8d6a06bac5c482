// Stress test of TaskGraph + CpuExecutor: random DAGs (seeded), random
// n_parts, random externals signalled from a helper thread with random
// delays (some before Run starts, some while it runs, some before their own
// predecessors completed). Inside every part the task checks that all its
// predecessors completed (a CPU task: its completion stamp; an external: its
// signal, and recursively its own predecessors) and that this part had not
// run before in this run. Meant to run under ThreadSanitizer too.
//
// New random graphs are drawn (each run kRunsPerGraph times) until 10^6 CPU
// tasks (nodes run, ~3.5 parts each) were run in all; KAIROX_GRAPH_STRESS_SCALE
// (a factor, default 1) scales that target.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "base/timer.h"
#include "catch2/catch.hpp"
#include "graph/cpu_executor.h"
#include "graph/task_graph.h"
#include "test_util.h"

namespace kx::graph {
namespace {

constexpr int kRunsPerGraph = 40;
constexpr int kMinNodes = 200;
constexpr int kMaxNodes = 2000;
constexpr int kMaxPreds = 4;
constexpr int kMaxParts = 6;
constexpr double kExternalFraction = 0.08;
constexpr int64_t kTargetTasks = 1'000'000;
// The helper's longest pause between two signals.
constexpr int64_t kBusyPauseNs = 5'000;

// The random plan, in node ids (not the build order).
struct Plan {
  std::vector<int> n_parts;             // 0 for externals
  std::vector<std::vector<int>> preds;  // per node
  std::vector<int> part_base;           // index of (node, 0) in the per-part arrays
  int total_parts = 0;
};

// Run-time records the tasks check and write; atomics only.
struct Shared {
  const Plan* plan = nullptr;
  std::unique_ptr<std::atomic<int>[]> part_runs;     // per part: runs this run
  std::unique_ptr<std::atomic<int>[]> parts_done;    // per CPU node
  std::unique_ptr<std::atomic<int64_t>[]> done_seq;  // per node: CPU completion / signal
  std::atomic<int64_t> seq{1};
  std::atomic<int64_t> errors{0};
  std::atomic<int> first_error_node{-1};

  void Fail(int node) {
    if (errors.fetch_add(1) == 0) first_error_node.store(node);
  }
  // True once `node` completed as the executor sees it.
  bool Complete(int node) const {
    if (done_seq[node].load(std::memory_order_acquire) == 0) return false;
    if (plan->n_parts[node] > 0) return true;
    // An external completes when signalled and its predecessors completed.
    for (int p : plan->preds[node]) {
      if (!Complete(p)) return false;
    }
    return true;
  }
};

struct TaskCtx {
  Shared* sh;
  int node;
};

void StressTask(void* ctx, int part, int n_parts) {
  auto* t = static_cast<TaskCtx*>(ctx);
  Shared& sh = *t->sh;
  const Plan& plan = *sh.plan;
  if (n_parts != plan.n_parts[t->node] || part < 0 || part >= n_parts) {
    sh.Fail(t->node);
    return;
  }
  for (int p : plan.preds[t->node]) {
    if (!sh.Complete(p)) sh.Fail(t->node);
  }
  if (sh.part_runs[plan.part_base[t->node] + part].fetch_add(1) != 0) sh.Fail(t->node);
  // A little work so parts overlap across threads.
  volatile int sink = 0;
  for (int i = 0; i < (t->node & 15); ++i) sink = sink + i;
  if (sh.parts_done[t->node].fetch_add(1, std::memory_order_acq_rel) + 1 == n_parts) {
    sh.done_seq[t->node].store(sh.seq.fetch_add(1), std::memory_order_release);
  }
}

Plan RandomPlan(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> n_dist(kMinNodes, kMaxNodes);
  const int n = n_dist(rng);
  // Generate over a topological order, then scatter the order over the ids.
  std::vector<int> id_of(n);
  for (int i = 0; i < n; ++i) id_of[i] = i;
  std::shuffle(id_of.begin(), id_of.end(), rng);
  Plan plan;
  plan.n_parts.assign(n, 0);
  plan.preds.assign(n, {});
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> parts_dist(1, kMaxParts);
  for (int k = 0; k < n; ++k) {
    const int id = id_of[k];
    plan.n_parts[id] = u(rng) < kExternalFraction ? 0 : parts_dist(rng);
    if (k == 0) continue;
    // Mostly recent predecessors (layer-like), sometimes far back.
    const int n_preds = std::uniform_int_distribution<int>(0, kMaxPreds)(rng);
    for (int e = 0; e < n_preds; ++e) {
      const int window = u(rng) < 0.8 ? std::min(k, 16) : k;
      const int before = k - 1 - std::uniform_int_distribution<int>(0, window - 1)(rng);
      plan.preds[id].push_back(id_of[before]);  // duplicates are allowed
    }
  }
  plan.part_base.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    plan.part_base[i] = plan.total_parts;
    plan.total_parts += plan.n_parts[i];
  }
  return plan;
}

double Scale() {
  const char* s = std::getenv("KAIROX_GRAPH_STRESS_SCALE");
  const double v = s ? std::atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

TEST_CASE("graph stress: random DAGs, parts and externals", "[graph][stress]") {
  std::mt19937_64 rng = test::SeededRng(20260611);
  const int64_t target_tasks = std::max<int64_t>(1, static_cast<int64_t>(kTargetTasks * Scale()));
  int64_t tasks_run = 0, parts_run = 0, externals_signalled = 0;
  const int64_t start = NowNs();

  for (int gi = 0; tasks_run < target_tasks; ++gi) {
    const Plan plan = RandomPlan(rng);
    const int n = static_cast<int>(plan.n_parts.size());
    Shared sh;
    sh.plan = &plan;
    sh.part_runs = std::make_unique<std::atomic<int>[]>(plan.total_parts + 1);
    sh.parts_done = std::make_unique<std::atomic<int>[]>(n);
    sh.done_seq = std::make_unique<std::atomic<int64_t>[]>(n);
    std::vector<TaskCtx> ctxs(n);

    TaskGraph g;
    std::vector<int> externals;
    for (int i = 0; i < n; ++i) {
      ctxs[i] = {&sh, i};
      const std::string name = "n" + std::to_string(i);
      if (plan.n_parts[i] == 0) {
        REQUIRE(g.AddExternal(name.c_str()) == i);
        g.SetTag(i, i % 30);
        externals.push_back(i);
      } else {
        REQUIRE(g.Add(StressTask, &ctxs[i], plan.n_parts[i], name.c_str()) == i);
      }
    }
    for (int i = 0; i < n; ++i) {
      for (int p : plan.preds[i]) g.Depend(p, i);
    }
    REQUIRE(g.Finalize().ok());
    REQUIRE(g.total_parts() == plan.total_parts);

    // 2 threads mostly; 3 sometimes, more threads than the CI machine's cores.
    const int threads = gi % 4 == 3 ? 3 : 2;
    ThreadPool pool(threads);
    ThreadPool::HotScope hot(pool);
    CpuExecutor exec(pool);
    for (int run = 0; run < kRunsPerGraph; ++run) {
      for (int i = 0; i < plan.total_parts; ++i) sh.part_runs[i].store(0);
      for (int i = 0; i < n; ++i) {
        sh.parts_done[i].store(0);
        sh.done_seq[i].store(0);
      }
      g.Reset();
      // The helper signals externals in a random order with random pauses;
      // the first few may land before Run starts.
      std::vector<int> order = externals;
      std::shuffle(order.begin(), order.end(), rng);
      const uint64_t helper_seed = rng();
      std::thread helper([&g, &sh, order, helper_seed] {
        std::mt19937_64 hr(helper_seed);
        for (int id : order) {
          const int pause = static_cast<int>(hr() % 8);
          if (pause == 0) {
            std::this_thread::yield();
          } else if (pause == 1) {
            const int64_t until = NowNs() + kBusyPauseNs;
            while (NowNs() < until) {
            }
          }
          // Stamp before signalling: tasks that see the external complete
          // must see the stamp.
          sh.done_seq[id].store(sh.seq.fetch_add(1), std::memory_order_release);
          g.Signal(id);
        }
      });
      const RunStats st = exec.Run(g);
      helper.join();
      REQUIRE(sh.errors.load() == 0);
      REQUIRE(st.parts_run == plan.total_parts);
      for (int i = 0; i < plan.total_parts; ++i) {
        if (sh.part_runs[i].load() != 1) FAIL("part " << i << " ran " << sh.part_runs[i].load());
      }
      for (int i = 0; i < n; ++i) {
        if (sh.done_seq[i].load() == 0) FAIL("node " << i << " never completed");
      }
      tasks_run += n - static_cast<int64_t>(externals.size());
      parts_run += st.parts_run;
      externals_signalled += static_cast<int64_t>(externals.size());
    }
    if (sh.errors.load() != 0) FAIL("first bad node: " << sh.first_error_node.load());
  }
  const double seconds = static_cast<double>(NowNs() - start) * 1e-9;
  std::fprintf(stderr, "graph stress: %lld tasks, %lld parts, %lld externals in %.2f s\n",
               static_cast<long long>(tasks_run), static_cast<long long>(parts_run),
               static_cast<long long>(externals_signalled), seconds);
}

}  // namespace
}  // namespace kx::graph
