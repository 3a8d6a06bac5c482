// Synthetic predictor training data with a planted low-rank rule, for the
// predictor tests and benchmark (real hidden states come from profiling).
//   x_t ~ N(0, 1)^n_in, then feature i scaled by s_i and shifted by c_i (a few
//       outlier channels, like a residual stream's);
//   label(t, n) = [v_nᵀ·relu(U·x_t) > c_n]  (U: planted_rank × n_in, v_n: planted_rank),
// with c_n set so neuron n fires on a target fraction of tokens drawn from a
// skewed distribution (a few hot neurons, many rare ones), and optional label
// noise (each bit flipped with probability label_noise).
#pragma once

#include <cstddef>  // activity.h uses size_t without including it
#include <cstdint>
#include <vector>

#include "sparse/activity.h"

namespace kx::sparse {

struct PlantedData {
  int64_t n_tokens = 0;
  int n_in = 0, n_out = 0;
  std::vector<float> x;  // n_tokens × n_in
  ActivityMatrix labels;
};

PlantedData MakePlantedData(int64_t n_tokens, int n_in, int n_out, int planted_rank, uint64_t seed,
                            double label_noise = 0.0);

}  // namespace kx::sparse
