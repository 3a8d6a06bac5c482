#include <algorithm>

#include "kernels/cuda/axpy_rows_f16.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"

namespace kx::cuda {
namespace {

struct AxpyRowsF16Params {
  const __half* w;       // [n_rows][w_row_stride], device
  int64_t n_cols;        // > 0
  int64_t w_row_stride;  // >= n_cols
  const int32_t* rows;   // [n_active] row indices, device
  const float* coeff;    // [n_active], coeff[k] scales row rows[k], device
  int64_t n_active;      // > 0
  float* dst;            // [n_cols], accumulated into, device
};

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
  auto* kernel = &AxpyRowsF16Kernel<kVec>;
  return KX_LAUNCH(kernel, grid, kThreadsPerBlock, stream, p, rows_per_split);
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_axpy_rows_f16(const kx_cuda_axpy_rows_f16_args* args,
                                                void* stream) {
  using kx::cuda::InvalidArgument;
  if (args == nullptr) return InvalidArgument("axpy_rows_f16: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_axpy_rows_f16_args)) {
    return InvalidArgument("axpy_rows_f16: args->struct_size is too small");
  }
  if (args->n_active < 0) return InvalidArgument("axpy_rows_f16: n_active < 0");
  if (args->n_active == 0) return KX_CUDA_OK;
  if (args->n_rows <= 0 || args->n_cols <= 0) {
    return InvalidArgument("axpy_rows_f16: n_rows and n_cols must be positive");
  }
  if (args->w_row_stride < args->n_cols) {
    return InvalidArgument("axpy_rows_f16: w_row_stride < n_cols");
  }
  if (args->w == nullptr || args->rows == nullptr || args->coeff == nullptr ||
      args->dst == nullptr) {
    return InvalidArgument("axpy_rows_f16: w, rows, coeff and dst must be non-NULL");
  }
  kx::cuda::AxpyRowsF16Params p{};
  p.w = reinterpret_cast<const __half*>(args->w);
  p.n_cols = args->n_cols;
  p.w_row_stride = args->w_row_stride;
  p.rows = args->rows;
  p.coeff = args->coeff;
  p.n_active = args->n_active;
  p.dst = args->dst;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  KX_CUDA_CHECK(kx::cuda::CanUseWideLoads(p) ? kx::cuda::Launch<kx::cuda::kWideVec>(p, s)
                                             : kx::cuda::Launch<1>(p, s));
  return KX_CUDA_OK;
}

KX_CUDA_REGISTER_OP(axpy_rows_f16, kx_cuda_axpy_rows_f16)
