// sparse_ffn_merge (sparse_ffn_merge.cuh): one thread per 4 elements (float4) when every
// pointer is 16-byte aligned, per element otherwise. Absent inputs are template flags rather
// than zeros read from memory, so a NULL costs no bandwidth.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/sparse_ffn_merge.cuh"

namespace kx::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kVec = 4;
constexpr int64_t kMaxGridX = 0x7fffffff;

struct MergeParams {
  int64_t n;
  const float* residual;
  const float* device_partial;
  const float* host_partial;
  float* dst;
};

// dst = residual + (device + host) for one element; absent inputs contribute nothing (a lone
// input is passed on exactly, not added to a zero).
template <bool kResidual, bool kDevice, bool kHost>
__device__ __forceinline__ float Merge(float r, float d, float h) {
  float ffn = 0.0f;
  if constexpr (kDevice && kHost) {
    ffn = d + h;
  } else if constexpr (kDevice) {
    ffn = d;
  } else if constexpr (kHost) {
    ffn = h;
  }
  if constexpr (!kResidual) return ffn;
  if constexpr (!kDevice && !kHost) return r;
  return r + ffn;
}

template <bool kPresent>
__device__ __forceinline__ float4 Load4(const float* p, int64_t t) {
  if constexpr (kPresent) return reinterpret_cast<const float4*>(p)[t];
  return float4{0.0f, 0.0f, 0.0f, 0.0f};
}
template <bool kPresent>
__device__ __forceinline__ float Load1(const float* p, int64_t i) {
  if constexpr (kPresent) return p[i];
  return 0.0f;
}

template <bool kResidual, bool kDevice, bool kHost, bool kWide>
__global__ void __launch_bounds__(kThreadsPerBlock) SparseFfnMergeKernel(MergeParams p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kWide) {
    // Elements 4t .. 4t+3; the launcher guarantees n % 4 == 0 and 16-byte alignment.
    if (t * kVec >= p.n) return;
    const float4 r = Load4<kResidual>(p.residual, t);
    const float4 d = Load4<kDevice>(p.device_partial, t);
    const float4 h = Load4<kHost>(p.host_partial, t);
    float4 out;
    out.x = Merge<kResidual, kDevice, kHost>(r.x, d.x, h.x);
    out.y = Merge<kResidual, kDevice, kHost>(r.y, d.y, h.y);
    out.z = Merge<kResidual, kDevice, kHost>(r.z, d.z, h.z);
    out.w = Merge<kResidual, kDevice, kHost>(r.w, d.w, h.w);
    reinterpret_cast<float4*>(p.dst)[t] = out;
  } else {
    if (t >= p.n) return;
    p.dst[t] = Merge<kResidual, kDevice, kHost>(Load1<kResidual>(p.residual, t),
                                                Load1<kDevice>(p.device_partial, t),
                                                Load1<kHost>(p.host_partial, t));
  }
}

template <bool kResidual, bool kDevice, bool kHost>
cudaError_t LaunchWith(const MergeParams& p, bool wide, cudaStream_t stream) {
  const int64_t threads = wide ? p.n / kVec : p.n;
  const auto blocks = static_cast<unsigned>((threads + kThreadsPerBlock - 1) / kThreadsPerBlock);
  if (wide) {
    auto* kernel = &SparseFfnMergeKernel<kResidual, kDevice, kHost, true>;
    return KX_LAUNCH(kernel, blocks, kThreadsPerBlock, stream, p);
  }
  auto* kernel = &SparseFfnMergeKernel<kResidual, kDevice, kHost, false>;
  return KX_LAUNCH(kernel, blocks, kThreadsPerBlock, stream, p);
}

template <bool kResidual, bool kDevice>
cudaError_t DispatchHost(const MergeParams& p, bool wide, cudaStream_t stream) {
  return p.host_partial != nullptr ? LaunchWith<kResidual, kDevice, true>(p, wide, stream)
                                   : LaunchWith<kResidual, kDevice, false>(p, wide, stream);
}

template <bool kResidual>
cudaError_t DispatchDevice(const MergeParams& p, bool wide, cudaStream_t stream) {
  return p.device_partial != nullptr ? DispatchHost<kResidual, true>(p, wide, stream)
                                     : DispatchHost<kResidual, false>(p, wide, stream);
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

kx_cuda_status Launch(const kx_cuda_sparse_ffn_merge_args& a, cudaStream_t stream) {
  if (a.n < 0) return InvalidArgument("sparse_ffn_merge: n < 0");
  if (a.n == 0) return KX_CUDA_OK;
  if (a.dst == nullptr) return InvalidArgument("sparse_ffn_merge: dst is NULL");
  if (a.n > kMaxGridX) return InvalidArgument("sparse_ffn_merge: n is too large");
  const MergeParams p{a.n, a.residual, a.device_partial, a.host_partial, a.dst};
  // NULL pointers are "aligned": they are never read.
  const bool wide = a.n % kVec == 0 && Aligned16(a.residual) && Aligned16(a.device_partial) &&
                    Aligned16(a.host_partial) && Aligned16(a.dst);
  KX_CUDA_CHECK(a.residual != nullptr ? DispatchDevice<true>(p, wide, stream)
                                      : DispatchDevice<false>(p, wide, stream));
  return KX_CUDA_OK;
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_sparse_ffn_merge(const kx_cuda_sparse_ffn_merge_args* args,
                                                   void* stream) {
  if (args == nullptr) return kx::cuda::InvalidArgument("sparse_ffn_merge: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_sparse_ffn_merge_args)) {
    return kx::cuda::InvalidArgument("sparse_ffn_merge: args->struct_size is too small");
  }
  return kx::cuda::Launch(*args, static_cast<cudaStream_t>(stream));
}

KX_CUDA_REGISTER_OP(sparse_ffn_merge, kx_cuda_sparse_ffn_merge)
