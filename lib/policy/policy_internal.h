// Pieces shared by the built-in policies (not part of the public API).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "policy/policy.h"

namespace kx::policy::internal {

// Predictor outputs are trusted to be in [0,1], but a NaN or a slightly
// negative value must never make a group "needed" or poison a score.
inline float ClampIntensity(float a) {
  if (!(a > 0.0f)) return 0.0f;  // also NaN
  return a < 1.0f ? a : 1.0f;
}

// How many loads fit the window (int64 max when unlimited).
inline int64_t MaxLoads(const Window& w, uint64_t bundle_bytes) {
  if (w.bytes == 0) return std::numeric_limits<int64_t>::max();
  KX_CHECK_MSG(bundle_bytes > 0,
               "a byte window needs PlacementStats.bundle_bytes: call Place before PlanLayer");
  return static_cast<int64_t>(w.bytes / bundle_bytes);
}

enum class Bottleneck { kNone, kIo, kCpu };

// Algorithm 1's GetSystemBottleneck with a hysteresis margin, so that a
// balanced pipeline does not flip λ every step.
inline Bottleneck Classify(const Feedback& fb, double margin) {
  if (fb.io_wait_s > 0 && fb.io_wait_s > (1.0 + margin) * fb.cpu_s) return Bottleneck::kIo;
  if (fb.cpu_s > 0 && fb.cpu_s > (1.0 + margin) * fb.io_wait_s) return Bottleneck::kCpu;
  return Bottleneck::kNone;
}

// Checks that s and r describe the same model (a caller bug otherwise).
void CheckShape(const PlacementStats& s, const Residency& r);

// Fills each layer's free slots with its most frequent absent groups (ties by
// group id), appending (layer, group) to loads, most frequent first.
void PlaceTopKByFrequency(const PlacementStats& s, const Residency& r,
                          std::vector<std::pair<int, int>>* loads);

// Reserves the plan's vectors for a whole layer once, so steady-state calls
// never allocate.
inline void PreparePlan(int n_groups, Plan* out) {
  out->clear();
  if (static_cast<int>(out->load.capacity()) < n_groups) out->load.reserve(n_groups);
  if (static_cast<int>(out->evict.capacity()) < n_groups) out->evict.reserve(n_groups);
}

std::unique_ptr<Policy> NewStaticPolicy();
// frequency_keyed: LFU (ActiveFlow) rather than LRU.
std::unique_ptr<Policy> NewRecencyPolicy(bool frequency_keyed);
std::unique_ptr<Policy> NewTopKPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewTamPolicy(const PolicyOptions& options, bool evict_below_tau,
                                     bool adaptive);

}  // namespace kx::policy::internal
