#include <math.h>
#include <stdio.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/op_registry.h"

namespace kx::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kVec4 = 4;
constexpr int kVec4AlignBytes = 16;
// A grid-stride loop over at most this many blocks per SM: enough to keep the memory
// system busy, few enough that each thread handles several vectors of a large array.
constexpr int kBlocksPerSm = 8;

// The tanh-GELU's constants: model/llama_ffn_activation.h kGeluTanhScale (√(2/π)) and
// kGeluTanhCubic, repeated because this module cannot include the engine's headers.
constexpr float kGeluTanhScale = 0.7978845608028654f;
constexpr float kGeluTanhCubic = 0.044715f;

// Each op rounds every operation on its own (the _rn intrinsics are never contracted into
// FMAs), in the CPU expression's order, so only expf can differ from the CPU.
struct AddOp {
  static constexpr bool kBinary = true;
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

struct ScaleOp {
  static constexpr bool kBinary = false;
  float scale;
  __device__ float operator()(float a, float) const { return __fmul_rn(a, scale); }
};

struct SwigluOp {
  static constexpr bool kBinary = true;
  __device__ float operator()(float g, float up) const {
    return __fmul_rn(g / __fadd_rn(1.0f, expf(-g)), up);
  }
};

struct GegluOp {
  static constexpr bool kBinary = true;
  __device__ float operator()(float g, float up) const {
    // g·σ(2y), as model/llama_ffn_activation.h GeluTanh evaluates it.
    const float cubic = __fmul_rn(__fmul_rn(__fmul_rn(kGeluTanhCubic, g), g), g);
    const float y = __fmul_rn(kGeluTanhScale, __fadd_rn(g, cubic));
    return __fmul_rn(g / __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, y))), up);
  }
};

// dst[i] = op(a[i], b[i]) (b unread for unary ops). With kVec, the first n/4·4 elements go
// through 16-byte loads and stores, the rest one by one.
template <typename Op, bool kVec>
__global__ void __launch_bounds__(kThreads)
    ElementwiseKernel(const float* a, const float* b, float* dst, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_begin = 0;
  if constexpr (kVec) {
    const int64_t n_vec = n / kVec4;
    for (int64_t v = first; v < n_vec; v += stride) {
      const float4 x = reinterpret_cast<const float4*>(a)[v];
      float4 y = x;
      if constexpr (Op::kBinary) y = reinterpret_cast<const float4*>(b)[v];
      reinterpret_cast<float4*>(dst)[v] =
          make_float4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w));
    }
    scalar_begin = n_vec * kVec4;
  }
  for (int64_t i = scalar_begin + first; i < n; i += stride) {
    dst[i] = op(a[i], Op::kBinary ? b[i] : 0.0f);
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kVec4AlignBytes == 0; }

// "<op>: <what>" as the thread's error (a stack buffer: a launcher never throws).
kx_cuda_status InvalidArgument(const char* op, const char* what) {
  char message[128];
  snprintf(message, sizeof message, "%s: %s", op, what);
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

template <typename Op>
cudaError_t Launch(const float* a, const float* b, float* dst, int64_t n, Op op,
                   cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  KX_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  KX_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const bool vec = Aligned16(a) && Aligned16(dst) && (!Op::kBinary || Aligned16(b));
  const int64_t units = vec ? std::max<int64_t>(n / kVec4, 1) : n;
  const int64_t blocks =
      std::min<int64_t>((units + kThreads - 1) / kThreads, int64_t{sm_count} * kBlocksPerSm);
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(blocks, 1));
  // A short array (a bias, one head) gets only the warps it needs.
  const int threads =
      static_cast<int>(std::min<int64_t>(kThreads, (units + kWarp - 1) / kWarp * kWarp));
  if (vec) {
    auto* kernel = &ElementwiseKernel<Op, true>;
    return KX_LAUNCH(kernel, grid, threads, stream, a, b, dst, n, op);
  }
  auto* kernel = &ElementwiseKernel<Op, false>;
  return KX_LAUNCH(kernel, grid, threads, stream, a, b, dst, n, op);
}

// The launchers' shared checks: struct size, n, pointers (b only for binary ops).
template <typename Args>
kx_cuda_status Check(const char* op, const Args* args, const float* a, const float* b,
                     bool binary) {
  if (args == nullptr) return InvalidArgument(op, "args is NULL");
  if (args->struct_size < sizeof(Args))
    return InvalidArgument(op, "args->struct_size is too small");
  if (args->n < 0) return InvalidArgument(op, "n < 0");
  if (args->n > 0 && (a == nullptr || (binary && b == nullptr) || args->dst == nullptr)) {
    return InvalidArgument(
        op, binary ? "inputs and dst must be non-NULL" : "src and dst must be non-NULL");
  }
  return KX_CUDA_OK;
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_add(const kx_cuda_add_args* args, void* stream) {
  const kx_cuda_status st = kx::cuda::Check("add", args, args ? args->a : nullptr,
                                            args ? args->b : nullptr, /*binary=*/true);
  if (st != KX_CUDA_OK || args->n == 0) return st;
  KX_CUDA_CHECK(kx::cuda::Launch(args->a, args->b, args->dst, args->n, kx::cuda::AddOp{},
                                 static_cast<cudaStream_t>(stream)));
  return KX_CUDA_OK;
}

extern "C" kx_cuda_status kx_cuda_scale(const kx_cuda_scale_args* args, void* stream) {
  const kx_cuda_status st =
      kx::cuda::Check("scale", args, args ? args->src : nullptr, nullptr, /*binary=*/false);
  if (st != KX_CUDA_OK || args->n == 0) return st;
  KX_CUDA_CHECK(kx::cuda::Launch(args->src, nullptr, args->dst, args->n,
                                 kx::cuda::ScaleOp{args->scale},
                                 static_cast<cudaStream_t>(stream)));
  return KX_CUDA_OK;
}

extern "C" kx_cuda_status kx_cuda_swiglu(const kx_cuda_swiglu_args* args, void* stream) {
  const kx_cuda_status st = kx::cuda::Check("swiglu", args, args ? args->gate : nullptr,
                                            args ? args->up : nullptr, /*binary=*/true);
  if (st != KX_CUDA_OK || args->n == 0) return st;
  KX_CUDA_CHECK(kx::cuda::Launch(args->gate, args->up, args->dst, args->n, kx::cuda::SwigluOp{},
                                 static_cast<cudaStream_t>(stream)));
  return KX_CUDA_OK;
}

extern "C" kx_cuda_status kx_cuda_geglu(const kx_cuda_geglu_args* args, void* stream) {
  const kx_cuda_status st = kx::cuda::Check("geglu", args, args ? args->gate : nullptr,
                                            args ? args->up : nullptr, /*binary=*/true);
  if (st != KX_CUDA_OK || args->n == 0) return st;
  KX_CUDA_CHECK(kx::cuda::Launch(args->gate, args->up, args->dst, args->n, kx::cuda::GegluOp{},
                                 static_cast<cudaStream_t>(stream)));
  return KX_CUDA_OK;
}

KX_CUDA_REGISTER_OP(add, kx_cuda_add)
KX_CUDA_REGISTER_OP(scale, kx_cuda_scale)
KX_CUDA_REGISTER_OP(swiglu, kx_cuda_swiglu)
KX_CUDA_REGISTER_OP(geglu, kx_cuda_geglu)
