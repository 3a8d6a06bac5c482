// Runs a Case: on the emulator (host memory, the emulated launcher), on the GPU (device
// memory, the module's launcher), compares the outputs and times the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/gpu_check/check_case.h"
#include "benchmarks/gpu_check/gpu_module.h"

namespace kx::gpu_check {

// One buffer's bytes per Case::buffers entry (inputs included, unchanged).
using Outputs = std::vector<std::vector<uint8_t>>;

struct Comparison {
  double max_abs = 0.0;  // max |got - want| over the compared elements
  double max_rel = 0.0;  // max |got - want| / max(|want|, tol.abs)
  int64_t compared = 0;  // elements compared
  bool pass = false;
  std::string detail;  // the first failure, for the log ("" on a pass)
};

// One line of the table.
struct CheckRow {
  std::string model;
  std::string op;
  std::string shape;
  std::string type;
  Tolerance tol;
  Comparison cmp;
  double seconds = 0.0;  // per launch on the GPU, median; 0 when not timed
  uint64_t bytes_moved = 0;
  double emu_seconds = 0.0;  // the emulator's wall time for the case (its runs together)
};

// The whole check of one case: the emulator's result (the reference), then the GPU's
// (timed over `reps`), compared; gpu = null runs the emulator a second time instead (the
// self-test of the case code and the comparison).
CheckRow RunCase(const GpuModule* gpu, const Case& c, int reps);

// The rows the emulator computes: the whole op, or three windows of Case::emu_rows rows
// (first, middle, last) when the op is larger than that.
std::vector<RowWindow> EmulatedWindows(const Case& c);

// Runs `c` under the emulator over `windows`. False (and `error`) on a launcher error.
bool RunOnEmulator(const Case& c, void* launcher, const std::vector<RowWindow>& windows,
                   Outputs* out, std::string* error);

// Runs `c` whole on the GPU through `launcher` (the module's), then times it: the median over
// `reps` of a batch of back-to-back launches (about 2 ms each) divided by the batch size —
// the throughput of an op in a stream of kernels, as in decode — with the launches rotating
// over copies of the buffers that together exceed the L2, so weights come from DRAM.
// reps = 0: no timing.
bool RunOnGpu(const GpuModule& gpu, const Case& c, void* launcher, int reps, Outputs* out,
              double* seconds, std::string* error);

// Compares `got` with `want` on the elements inside `windows` (rows of windowed outputs;
// every element otherwise) against c.tol. With got_whole (`got` ran the whole op), also
// fails on any float output element of `got` that still holds the poison pattern (never
// written by the kernel).
Comparison Compare(const Case& c, const std::vector<RowWindow>& windows, const Outputs& want,
                   const Outputs& got, bool got_whole);

}  // namespace kx::gpu_check
