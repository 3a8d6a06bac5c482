// The calibration frequency of a neuron group: the mean of its neurons' (groups of
// group_size consecutive neurons in bundle order; the last may be short). What placement
// ranks bundles by — the device FFN's and the RAM tier's first placement, and kairox-sim's.
// Header-only, so kairox-sim, which reads the sidecar's tensors without a model, shares it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kx::sparse {

// dst[g] for g < ceil(n_ff / group_size): the mean of freq[g·group_size, …).
inline void GroupMeanFrequency(const float* freq, int64_t n_ff, int group_size, float* dst) {
  for (int64_t g = 0; g * group_size < n_ff; ++g) {
    const int64_t end = std::min<int64_t>((g + 1) * group_size, n_ff);
    double sum = 0;
    for (int64_t j = g * group_size; j < end; ++j) sum += freq[j];
    dst[g] = static_cast<float>(sum / static_cast<double>(end - g * group_size));
  }
}

}  // namespace kx::sparse
