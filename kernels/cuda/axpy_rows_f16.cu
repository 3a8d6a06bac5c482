#include <algorithm>

#include "kernels/cuda/axpy_rows_f16.cuh"
#include "kernels/cuda/common.cuh"

namespace kx::cuda {
namespace {

constexpr int kThreadsPerBlock = 128;
// Halves per 16-byte load.
constexpr int kWideVec = 8;
constexpr int kWideAlignBytes = 16;
// Enough blocks to keep every SM busy with several resident blocks.
constexpr int kBlocksPerSm = 8;
// Below this many rows per block the atomics into dst cost more than the split gains.
constexpr int64_t kMinRowsPerSplit = 16;
constexpr int64_t kMaxGridY = 65535;

// Block (x, y): columns [x * kThreadsPerBlock * kVec, ...) and active rows
// [y * rows_per_split, (y + 1) * rows_per_split). Each thread owns kVec consecutive
// columns, sums its rows in registers, then adds into dst once.
template <int kVec>
__global__ void __launch_bounds__(kThreadsPerBlock)
    AxpyRowsF16Kernel(AxpyRowsF16Params p, int64_t rows_per_split) {
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  // With kVec > 1 the launcher guarantees n_cols % kVec == 0.
  if (col0 >= p.n_cols) return;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t k_end = min(p.n_active, k_begin + rows_per_split);

  float acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;

#pragma unroll 4
  for (int64_t k = k_begin; k < k_end; ++k) {
    // Same address across the warp: one broadcast load each.
    const int64_t row = __ldg(p.rows + k);
    const float c = __ldg(p.coeff + k);
    const __half* src = p.w + row * p.w_row_stride + col0;
    if constexpr (kVec == kWideVec) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src));
      const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
      for (int i = 0; i < kVec / 2; ++i) {
        const float2 f = __half22float2(h2[i]);
        acc[2 * i] = fmaf(c, f.x, acc[2 * i]);
        acc[2 * i + 1] = fmaf(c, f.y, acc[2 * i + 1]);
      }
    } else {
      acc[0] = fmaf(c, __half2float(src[0]), acc[0]);
    }
  }
  if (k_end <= k_begin) return;
#pragma unroll
  for (int i = 0; i < kVec; ++i) atomicAdd(p.dst + col0 + i, acc[i]);
}

bool CanUseWideLoads(const AxpyRowsF16Params& p) {
  return p.n_cols % kWideVec == 0 && p.w_row_stride % kWideVec == 0 &&
         reinterpret_cast<uintptr_t>(p.w) % kWideAlignBytes == 0;
}

template <int kVec>
cudaError_t Launch(const AxpyRowsF16Params& p, cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  KX_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  KX_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const int64_t col_threads = (p.n_cols + kVec - 1) / kVec;
  const int64_t grid_x = (col_threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  // Split the rows so that the whole grid fills the GPU, but not into slivers.
  const int64_t max_splits =
      std::max<int64_t>(1, (p.n_active + kMinRowsPerSplit - 1) / kMinRowsPerSplit);
  const int64_t wanted = std::max<int64_t>(1, int64_t{sm_count} * kBlocksPerSm / grid_x);
  int64_t splits = std::min({wanted, max_splits, kMaxGridY});
  const int64_t rows_per_split = (p.n_active + splits - 1) / splits;
  splits = (p.n_active + rows_per_split - 1) / rows_per_split;
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(splits));
  AxpyRowsF16Kernel<kVec><<<grid, kThreadsPerBlock, 0, stream>>>(p, rows_per_split);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAxpyRowsF16(const AxpyRowsF16Params& params, cudaStream_t stream) {
  if (params.n_active == 0) return cudaSuccess;
  return CanUseWideLoads(params) ? Launch<kWideVec>(params, stream) : Launch<1>(params, stream);
}

}  // namespace kx::cuda
