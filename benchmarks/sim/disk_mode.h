// kairox-sim --ram-budget: the RAM ⇄ disk tier replay (lib/sim/disk_tier.h) for a list of
// budgets and policies, printed as a table or CSV, with the trace's own tier records (a
// trace made under --ram-budget has them) compared step by step where they exist.
#pragma once

#include <string>
#include <vector>

#include "shape.h"
#include "sim/cpu_model.h"
#include "sim/sim_trace.h"

namespace kx::sim_cli {

struct DiskModeArgs {
  std::vector<std::string> policies;
  std::vector<double> budgets;  // shares of each layer's groups with a RAM slot, [0, 1]
  double disk_gb_per_s = 0;
  double disk_latency_us = 0;
  double copy_gb_per_s = 0;
  bool prefetch = true;
  bool speculate = true;
  bool trace_placement = false;  // the oracle instead of the sidecar's calibration frequency
  uint32_t time_from_step = 0;
  bool csv = false;
};

// Prints the rows; returns the process exit code (errors on stderr).
int RunDiskMode(const DiskModeArgs& args, const sim::SimTrace& trace, const ModelShape& shape,
                const sim::CpuModel& cpu);

}  // namespace kx::sim_cli
