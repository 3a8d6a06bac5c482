// kairox-sim's output: one row per (hardware, policy, budget) as a markdown
// table, CSV (benchmarks/sim/plot.py reads it) or JSON.
//
//   std::vector<kx::sim::SimResult> rows = ...;
//   std::fputs(kx::sim::FormatMarkdown(rows).c_str(), stdout);
#pragma once

#include <string>
#include <vector>

#include "sim/simulator.h"

namespace kx::sim {

// Columns: hardware, policy, budget %, tok/s, reload KB/token, hit %, GPU
// neuron %, then the stall breakdown in µs per token (GPU, CPU, H2D critical,
// H2D background, other) and the final mean λ.
std::string FormatMarkdown(const std::vector<SimResult>& rows);
// The same fields, unrounded, one header line; field names as in FormatJson.
std::string FormatCsv(const std::vector<SimResult>& rows);
// {"results": [{...}, ...]} plus `extra` (a JSON object's text, or empty)
// merged in at the top level (the inputs the program ran with).
std::string FormatJson(const std::vector<SimResult>& rows, const std::string& extra_json);

}  // namespace kx::sim
