// kairox-gpu-check's output: a progress line per case on stderr, then one table on stdout
// (and optionally JSON).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/gpu_check/runner.h"

namespace kx::gpu_check {

struct DeviceSummary {
  std::string name;  // empty: no GPU (emulator only)
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::string module_path;
  double copy_bytes_per_second = 0.0;  // device-to-device copy, read + write
};

void PrintProgress(const CheckRow& row);

// Columns: model, op, shape, type, max abs err, max rel err, tolerance (abs + rel·|want|),
// result, µs per launch, GB/s (the op's bytes moved / time), % of the copy bandwidth.
void PrintTable(const std::vector<CheckRow>& rows, const DeviceSummary& device, bool emulator_only);

bool WriteJson(const std::string& path, const std::vector<CheckRow>& rows,
               const DeviceSummary& device, uint64_t seed);

}  // namespace kx::gpu_check
