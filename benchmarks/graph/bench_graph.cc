// bench_graph: the dispatch overhead of the task graph (lib/graph) per task
// and per part, against the current engine's way (one ThreadPool::Run per op).
//
//   bench_graph [--repeats N] [--threads 1,2] [--json PATH]
//     --repeats N   tokens timed per case; the median token is reported (default 2000)
//     --threads L   pool sizes to measure (default 1,2)
//     --json PATH   also write the results as JSON
//
// Every task body is empty, so the time is pure dispatch. Graph shapes, each
// one token's worth (SmolLM2-135M has 30 layers, ~8 ops per layer):
//   chain    240 tasks x 1 part in a line
//   chain2   240 tasks x 2 parts in a line (the engine's op sequence, split in 2)
//   wide     30 layers x 8 independent tasks x 2 parts; each task of layer l
//            depends on all 8 of layer l-1 (64 edges per layer)
//   wide+join  the same with one empty 1-part join task between layers
//            (16 edges per layer, 29 more tasks)
// A token's time is Reset() + CpuExecutor::Run() on a hot pool ("reset ns":
// the Reset() part alone). The baseline
// "pool.Run/op" runs one empty ThreadPool::Run per task (240 per token), which
// is what the engine's forward pass pays today (with 1 thread ThreadPool::Run
// is a plain call). Reported: median ns per token, per task and per part, the
// threads' idle share inside Run, and the ratio to the baseline.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "base/timer.h"
#include "graph/cpu_executor.h"
#include "graph/task_graph.h"
#include "nlohmann/json.hpp"

namespace {

constexpr int kLayers = 30;
constexpr int kOpsPerLayer = 8;
constexpr int kTasks = kLayers * kOpsPerLayer;
constexpr int kWarmupTokens = 50;

void EmptyTask(void*, int, int) {}

struct Shape {
  const char* name;
  int parts;
  bool wide;
  bool join;  // wide: one 1-part join task between layers instead of all-to-all edges
};
constexpr Shape kShapes[] = {{"chain", 1, false, false},
                             {"chain2", 2, false, false},
                             {"wide", 2, true, false},
                             {"wide+join", 2, true, true}};

void Build(const Shape& s, kx::graph::TaskGraph* g) {
  std::vector<int> prev;
  for (int l = 0; l < kLayers; ++l) {
    std::vector<int> cur;
    for (int k = 0; k < kOpsPerLayer; ++k) {
      const int id = g->Add(EmptyTask, nullptr, s.parts, "op");
      if (s.wide) {
        for (int p : prev) g->Depend(p, id);
      } else if (g->num_nodes() > 1) {
        g->Depend(id - 1, id);
      }
      cur.push_back(id);
    }
    if (s.join && l + 1 < kLayers) {
      const int join = g->Add(EmptyTask, nullptr, 1, "join");
      for (int c : cur) g->Depend(c, join);
      cur = {join};
    }
    prev = cur;
  }
}

double Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? static_cast<double>(v[n / 2]) : 0.5 * static_cast<double>(v[n / 2 - 1] + v[n / 2]);
}

std::vector<int> ParseList(const char* s) {
  std::vector<int> out;
  while (*s) {
    out.push_back(std::atoi(s));
    while (*s && *s != ',') ++s;
    if (*s == ',') ++s;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 2000;
  std::vector<int> thread_counts = {1, 2};
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      thread_counts = ParseList(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--threads 1,2] [--json PATH]\n", argv[0]);
      return 2;
    }
  }

  nlohmann::json results = nlohmann::json::array();
  std::printf("%-8s %-14s %7s %6s %12s %9s %10s %10s %8s %9s\n", "threads", "method", "tasks",
              "parts", "ns/token", "reset ns", "ns/task", "ns/part", "idle%", "x pool.Run");
  for (int threads : thread_counts) {
    kx::ThreadPool pool(threads);
    kx::ThreadPool::HotScope hot(pool);

    // Baseline: one empty pool.Run per op.
    std::vector<int64_t> base_ns;
    for (int t = 0; t < kWarmupTokens + repeats; ++t) {
      const int64_t t0 = kx::NowNs();
      for (int op = 0; op < kTasks; ++op) pool.Run([](int, int) {});
      if (t >= kWarmupTokens) base_ns.push_back(kx::NowNs() - t0);
    }
    const double base = Median(base_ns);
    std::printf("%-8d %-14s %7d %6s %12.0f %9s %10.1f %10s %8s %9.3f\n", threads, "pool.Run/op",
                kTasks, "-", base, "-", base / kTasks, "-", "-", 1.0);
    results.push_back({{"threads", threads},
                       {"method", "pool.Run/op"},
                       {"tasks", kTasks},
                       {"ns_per_token", base},
                       {"ns_per_task", base / kTasks}});

    for (const Shape& s : kShapes) {
      kx::graph::TaskGraph g;
      Build(s, &g);
      if (!g.Finalize().ok()) {
        std::fprintf(stderr, "graph %s does not finalize\n", s.name);
        return 1;
      }
      kx::graph::CpuExecutor exec(pool);
      std::vector<int64_t> token_ns, reset_ns;
      int64_t idle = 0, wall = 0;
      for (int t = 0; t < kWarmupTokens + repeats; ++t) {
        const int64_t t0 = kx::NowNs();
        g.Reset();
        const int64_t t1 = kx::NowNs();
        const kx::graph::RunStats st = exec.Run(g);
        if (t >= kWarmupTokens) {
          token_ns.push_back(kx::NowNs() - t0);
          reset_ns.push_back(t1 - t0);
          idle += st.idle_wait_ns;
          wall += st.wall_ns;
        }
      }
      const double med = Median(token_ns);
      const double reset = Median(reset_ns);
      const int64_t parts = g.total_parts();
      // Share of the threads' time spent with nothing ready.
      const double idle_pct =
          100.0 * static_cast<double>(idle) / (static_cast<double>(wall) * threads);
      const std::string method = std::string("graph:") + s.name;
      std::printf("%-8d %-14s %7d %6lld %12.0f %9.0f %10.1f %10.1f %8.1f %9.3f\n", threads,
                  method.c_str(), g.num_nodes(), static_cast<long long>(parts), med, reset,
                  med / g.num_nodes(), med / static_cast<double>(parts), idle_pct, med / base);
      results.push_back({{"threads", threads},
                         {"method", method},
                         {"tasks", g.num_nodes()},
                         {"parts", parts},
                         {"ns_per_token", med},
                         {"reset_ns", reset},
                         {"ns_per_task", med / g.num_nodes()},
                         {"ns_per_part", med / static_cast<double>(parts)},
                         {"idle_pct", idle_pct},
                         {"ratio_to_pool_run", med / base}});
    }
  }
  if (json_path) {
    std::ofstream f(json_path);
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path);
      return 1;
    }
    f << nlohmann::json{{"bench", "graph"}, {"repeats", repeats}, {"results", results}}.dump(2)
      << "\n";
  }
  return 0;
}
