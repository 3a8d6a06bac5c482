// Shared by the sparse FFN's down-projection ops (sparse_down_blocks.cu, sparse_down_rows.cu):
// their deterministic two-pass reduction. The listed groups are cut into chunks of a FIXED
// size (a constant of each op, never the GPU's SM count); each chunk's blocks write the
// chunk's partial y into the caller's workspace, and a second kernel adds the partials to y in
// chunk order. So y's bits depend only on the inputs — the same on every run and every GPU —
// at the price of n_chunks·n_embd·8 bytes of extra traffic (a few percent of the weights').
// With a single chunk the first kernel adds straight into y and the workspace is unused.
#pragma once

#include <stdint.h>

#include "kernels/cuda/compat.cuh"

namespace kx::cuda::sparse_down {

inline constexpr int kSumThreads = 256;

// The body of each op's second kernel: y[i] += (partial[0][i] + partial[1][i] + ...).
__device__ __forceinline__ void SumPartials(const float* partial, int64_t n_chunks, int64_t n,
                                            float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = partial[i];
  for (int64_t c = 1; c < n_chunks; ++c) s += partial[c * n + i];
  y[i] += s;
}

inline unsigned SumBlocks(int64_t n) {
  return static_cast<unsigned>((n + kSumThreads - 1) / kSumThreads);
}

}  // namespace kx::cuda::sparse_down
