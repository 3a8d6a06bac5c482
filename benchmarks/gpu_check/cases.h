// The op families kairox-gpu-check runs: one function per family, one file each
// (cases_<family>.cc). A new op of the CUDA module gets a case in its family's file, and the
// family is listed in kFamilies (gpu_check.cc) — the check fails while a registered op has
// no case.
#pragma once

#include <random>
#include <vector>

#include "benchmarks/gpu_check/check_case.h"
#include "benchmarks/gpu_check/quant_blocks.h"

namespace kx::gpu_check {

// Activations' scale (kWeightScale, quant_blocks.h, is the weights'): real-model magnitudes.
inline constexpr float kActScale = 1.0f;

void AddMatvecCases(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases);
void AddLayerCases(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases);
void AddSparseCases(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases);

}  // namespace kx::gpu_check
