// Co-activation statistics of one FFN layer's neurons, and the on-disk form
// of an ActivityMatrix (profiles written by the engine, read by grouping and
// its benchmark).
//
// C[i][j] is the number of profiled tokens on which neurons i and j were both
// active; C[i][i] is how often neuron i was active. It is computed as one
// GEMM, Aᵀ·A over the 0/1 token × neuron matrix A, unpacked to floats a chunk
// of tokens at a time, so a 16k-token profile of a 1536-neuron layer costs a
// few GEMM calls rather than a million pair loops.
//
// Usage:
//   kx::sparse::ActivityMatrix profile = ...;        // tokens × n_ff bits
//   kx::sparse::Coactivation c = kx::sparse::ComputeCoactivation(profile, 2);
//   float both = c.at(3, 17);                         // tokens with 3 and 17 active
//
//   KX_RETURN_IF_ERROR(kx::sparse::WriteActivity(profile, "layer07.kxact"));
//   KX_ASSIGN_OR_RETURN(auto back, kx::sparse::ReadActivity("layer07.kxact"));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sparse/activity.h"

namespace kx::sparse {

struct Coactivation {
  int n = 0;                  // neurons
  int64_t n_tokens = 0;       // tokens the counts were taken over
  std::vector<float> counts;  // n × n, row-major, symmetric; exact integers (see below)

  float at(int i, int j) const {
    return counts[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)];
  }
  // Activation count of neuron i (the diagonal).
  float frequency(int i) const { return at(i, i); }
};

// Counts are accumulated in float, which represents every integer up to 2^24
// exactly; profiles longer than that are a caller bug (KX_CHECK).
inline constexpr int64_t kMaxCoactivationTokens = int64_t{1} << 24;

// C = Aᵀ·A for the activity matrix `a` (see above). The GEMM runs on oneDNN,
// whose GNU OpenMP team is capped at `n_threads` (≥ 1) for the duration of the
// call so it does not spin against kairox's own thread pool; the calling
// thread's previous OpenMP thread count is restored afterwards.
// Thread-safety: may be called from several threads at once.
Coactivation ComputeCoactivation(const ActivityMatrix& a, int n_threads = 1);

// ActivityMatrix files ("kxact"), little-endian:
//   char[8]  magic "KXACT\0\0\1"   (the last byte is the format version, 1)
//   u32      n_neurons
//   u32      words_per_row         (= ceil(n_neurons / 64), checked on read)
//   u64      n_tokens
//   u64      bits[n_tokens][words_per_row]   bit n of row t = neuron n active on token t
// Bits past n_neurons in the last word of a row are zero.
absl::Status WriteActivity(const ActivityMatrix& a, const std::string& path);
absl::StatusOr<ActivityMatrix> ReadActivity(const std::string& path);

}  // namespace kx::sparse
