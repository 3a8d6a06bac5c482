// A decode graph's plan as edges, read from TaskGraph::ToDot, for tests that check which
// node waits for which (test_device_graph.cc, test_device_layers_graph.cc).
//
//   const kx::test::GraphPlan p = kx::test::ParseGraphPlan(*engine->decode_task_graph());
//   CHECK(p.preds[p.Find(g, "ffn_in.0")] == std::set<int>{...});
//   CHECK_FALSE(p.Reaches(a, b));
#pragma once

#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "graph/task_graph.h"

namespace kx::test {

struct GraphPlan {
  std::vector<std::vector<int>> succs;
  std::vector<std::set<int>> preds;
  // The node called `name`; fails the test when there is none.
  int Find(const graph::TaskGraph& g, const std::string& name) const {
    for (int i = 0; i < g.num_nodes(); ++i) {
      if (g.name(i) == name) return i;
    }
    FAIL("no node " << name);
    return -1;
  }
  // Whether the node exists (a plan may leave nodes out, e.g. a device layer's CPU attention).
  static bool Has(const graph::TaskGraph& g, const std::string& name) {
    for (int i = 0; i < g.num_nodes(); ++i) {
      if (g.name(i) == name) return true;
    }
    return false;
  }
  // Whether `to` depends on `from`, directly or through other nodes.
  bool Reaches(int from, int to) const {
    std::vector<int> stack{from};
    std::vector<bool> seen(succs.size());
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      if (n == to) return true;
      if (seen[n]) continue;
      seen[n] = true;
      for (int s : succs[n]) stack.push_back(s);
    }
    return false;
  }
};

// The edges of g's Graphviz text ("  nB -> nA;").
inline GraphPlan ParseGraphPlan(const graph::TaskGraph& g) {
  GraphPlan p;
  p.succs.resize(g.num_nodes());
  p.preds.resize(g.num_nodes());
  std::istringstream in(g.ToDot());
  std::string line;
  while (std::getline(in, line)) {
    int b = 0, a = 0;
    if (std::sscanf(line.c_str(), " n%d -> n%d;", &b, &a) == 2) {
      p.succs[b].push_back(a);
      p.preds[a].insert(b);
    }
  }
  return p;
}

}  // namespace kx::test
