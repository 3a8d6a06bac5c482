#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/rms_norm.cuh"

namespace kx::cuda {
namespace {

struct RmsNormParams {
  const float* src;
  const float* weight;
  const float* residual;  // may be null
  float* dst;
  int64_t n;
  double eps;
};

constexpr int kWarp = 32;
constexpr int kMaxThreads = 256;
constexpr int kMaxWarps = kMaxThreads / kWarp;
constexpr int kVec4 = 4;
constexpr int kVec4AlignBytes = 16;

__device__ __forceinline__ double WarpSum(double v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// (x · scale) · w: two roundings, as the CPU's expression rounds.
__device__ __forceinline__ float Norm(float x, float scale, float w) {
  return __fmul_rn(__fmul_rn(x, scale), w);
}

// One block per row. Memory-bound: the row is read twice (the second time mostly from L1/L2),
// written once. The sum of squares is in double like the CPU's, so the scale rounds the same
// way; its cost (n / blockDim double adds per thread) hides under the loads.
template <int kVec>
__global__ void __launch_bounds__(kMaxThreads) RmsNormKernel(RmsNormParams p) {
  __shared__ double warp_sums[kMaxWarps];
  const int64_t row_off = static_cast<int64_t>(blockIdx.x) * p.n;
  const float* src = p.src + row_off;
  const float* residual = p.residual != nullptr ? p.residual + row_off : nullptr;
  float* dst = p.dst + row_off;
  const int64_t n_vec = p.n / kVec;

  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
    if constexpr (kVec == kVec4) {
      const float4 x = reinterpret_cast<const float4*>(src)[v];
      sum += static_cast<double>(x.x) * x.x + static_cast<double>(x.y) * x.y +
             static_cast<double>(x.z) * x.z + static_cast<double>(x.w) * x.w;
    } else {
      sum += static_cast<double>(src[v]) * src[v];
    }
  }
  sum = WarpSum(sum);
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) warp_sums[warp] = sum;
  __syncthreads();
  // Every thread adds the warp sums in the same order: one scale for the whole row.
  double total = 0.0;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) total += warp_sums[w];
  const float scale = static_cast<float>(1.0 / sqrt(total / static_cast<double>(p.n) + p.eps));

  for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
    // The residual add rounds on its own (__fadd_rn), as the CPU's x += ffo does after the
    // norm; nvcc would otherwise fuse it into an FMA.
    if constexpr (kVec == kVec4) {
      const float4 x = reinterpret_cast<const float4*>(src)[v];
      const float4 w = reinterpret_cast<const float4*>(p.weight)[v];
      float4 y = make_float4(Norm(x.x, scale, w.x), Norm(x.y, scale, w.y), Norm(x.z, scale, w.z),
                             Norm(x.w, scale, w.w));
      if (residual != nullptr) {
        const float4 r = reinterpret_cast<const float4*>(residual)[v];
        y = make_float4(__fadd_rn(r.x, y.x), __fadd_rn(r.y, y.y), __fadd_rn(r.z, y.z),
                        __fadd_rn(r.w, y.w));
      }
      reinterpret_cast<float4*>(dst)[v] = y;
    } else {
      const float y = Norm(src[v], scale, p.weight[v]);
      dst[v] = residual != nullptr ? __fadd_rn(residual[v], y) : y;
    }
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kVec4AlignBytes == 0; }

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_rms_norm(const kx_cuda_rms_norm_args* args, void* stream) {
  using kx::cuda::InvalidArgument;
  if (args == nullptr) return InvalidArgument("rms_norm: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_rms_norm_args)) {
    return InvalidArgument("rms_norm: args->struct_size is too small");
  }
  if (args->n_rows < 0) return InvalidArgument("rms_norm: n_rows < 0");
  if (args->n_rows == 0) return KX_CUDA_OK;
  if (args->n <= 0) return InvalidArgument("rms_norm: n must be positive");
  if (args->n_rows > 0x7fffffff) return InvalidArgument("rms_norm: n_rows exceeds the grid");
  if (!(args->eps >= 0.0f)) return InvalidArgument("rms_norm: eps must be >= 0");
  if (args->src == nullptr || args->weight == nullptr || args->dst == nullptr) {
    return InvalidArgument("rms_norm: src, weight and dst must be non-NULL");
  }
  kx::cuda::RmsNormParams p{};
  p.src = args->src;
  p.weight = args->weight;
  p.residual = args->residual;
  p.dst = args->dst;
  p.n = args->n;
  p.eps = static_cast<double>(args->eps);

  using kx::cuda::Aligned16;
  const bool vec4 = p.n % kx::cuda::kVec4 == 0 && Aligned16(p.src) && Aligned16(p.weight) &&
                    Aligned16(p.dst) && (p.residual == nullptr || Aligned16(p.residual));
  const int vec = vec4 ? kx::cuda::kVec4 : 1;
  // Enough whole warps for one vector per thread, up to kMaxThreads (small rows, such as
  // one head of the QK-norm, get one warp).
  const int64_t warps = (p.n / vec + kx::cuda::kWarp - 1) / kx::cuda::kWarp;
  const int threads =
      static_cast<int>(std::clamp<int64_t>(warps, 1, kx::cuda::kMaxWarps)) * kx::cuda::kWarp;
  const unsigned grid = static_cast<unsigned>(args->n_rows);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  auto* kernel = vec4 ? &kx::cuda::RmsNormKernel<kx::cuda::kVec4> : &kx::cuda::RmsNormKernel<1>;
  KX_CUDA_CHECK(KX_LAUNCH(kernel, grid, threads, s, p));
  return KX_CUDA_OK;
}

KX_CUDA_REGISTER_OP(rms_norm, kx_cuda_rms_norm)
