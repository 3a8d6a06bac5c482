// dequantize: GGUF blocks → F16 or F32 rows (contract in dequantize.cuh). One thread per slice
// of a block (quant_decode.cuh), grid-stride over all rows; consecutive threads decode
// consecutive slices, so reads and writes stay contiguous across a warp. A one-time upload op:
// simple indexing (64-bit divisions per slice) rather than matvec's staging.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/quant_decode.cuh"

namespace kx::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kBlocksPerSm = 8;
constexpr int kDstAlign = 16;

struct DequantizeParams {
  const uint8_t* src;
  int64_t src_row_bytes;
  int64_t n_blocks;  // per row
  int64_t rows;
  void* dst;
  int64_t dst_row_stride;  // elements
};

// n consecutive values to dst (16-byte aligned when n·sizeof(*dst) >= 16, by the contract).
template <int kN>
__device__ __forceinline__ void StoreRun(const float (&v)[kN], float* dst) {
  if constexpr (kN % 4 == 0) {
#pragma unroll
    for (int k = 0; k < kN / 4; ++k) {
      reinterpret_cast<float4*>(dst)[k] =
          make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = v[i];
  }
}

__device__ __forceinline__ uint32_t HalfPair(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;
}

template <int kN>
__device__ __forceinline__ void StoreRun(const float (&v)[kN], __half* dst) {
  if constexpr (kN % 8 == 0) {
#pragma unroll
    for (int k = 0; k < kN / 8; ++k) {
      reinterpret_cast<uint4*>(dst)[k] =
          make_uint4(HalfPair(v[8 * k], v[8 * k + 1]), HalfPair(v[8 * k + 2], v[8 * k + 3]),
                     HalfPair(v[8 * k + 4], v[8 * k + 5]), HalfPair(v[8 * k + 6], v[8 * k + 7]));
    }
  } else if constexpr (kN == 4) {
    *reinterpret_cast<uint2*>(dst) = uint2{HalfPair(v[0], v[1]), HalfPair(v[2], v[3])};
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = __float2half_rn(v[i]);
  }
}

template <class T, class Out>
__global__ void __launch_bounds__(kThreadsPerBlock) DequantizeKernel(DequantizeParams p) {
  const int64_t per_row = p.n_blocks * T::kSlices;
  const int64_t total = per_row * p.rows;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total;
       g += step) {
    const int64_t row = g / per_row;
    const int64_t in_row = g - row * per_row;
    const int64_t blk = in_row / T::kSlices;
    const int s = static_cast<int>(in_row - blk * T::kSlices);
    typename T::Values v;
    T::Decode(p.src + row * p.src_row_bytes + blk * T::kBlockBytes, s, v);
    Out* dst = static_cast<Out*>(p.dst) + row * p.dst_row_stride + blk * T::kBlockElems;
#pragma unroll
    for (int j = 0; j < T::kRuns; ++j) {
      float values[T::kRunLen];
#pragma unroll
      for (int i = 0; i < T::kRunLen; ++i) values[i] = quant::ElementValue<T>(v, j, i);
      StoreRun(values, dst + T::RunStart(s, j));
    }
  }
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

template <class T, class Out>
kx_cuda_status Launch(const kx_cuda_dequantize_args& a, cudaStream_t stream) {
  const uintptr_t src = reinterpret_cast<uintptr_t>(a.src);
  if (!quant::CheckRows<T>("dequantize", quant::GgmlTypeName(a.type), src, a.src_row_bytes, a.n)) {
    return KX_CUDA_ERROR_INVALID_ARGUMENT;
  }
  if (a.dst_row_stride < a.n) return InvalidArgument("dequantize: dst_row_stride < n");
  if (reinterpret_cast<uintptr_t>(a.dst) % kDstAlign != 0 ||
      (a.dst_row_stride * static_cast<int64_t>(sizeof(Out))) % kDstAlign != 0) {
    return InvalidArgument(
        "dequantize: dst and dst_row_stride · element bytes must be multiples of 16 bytes");
  }
  const int64_t n_blocks = a.n / T::kBlockElems;
  const int64_t row_span = std::max<int64_t>(a.src_row_bytes, a.dst_row_stride * sizeof(Out));
  if (a.rows - 1 > (INT64_MAX - row_span) / row_span) {
    return InvalidArgument("dequantize: rows · row size overflows");
  }
  int device = 0;
  int sm_count = 0;
  KX_CUDA_CHECK(cudaGetDevice(&device));
  KX_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  DequantizeParams p{};
  p.src = static_cast<const uint8_t*>(a.src);
  p.src_row_bytes = a.src_row_bytes;
  p.n_blocks = n_blocks;
  p.rows = a.rows;
  p.dst = a.dst;
  p.dst_row_stride = a.dst_row_stride;
  const int64_t slices = n_blocks * T::kSlices * a.rows;
  const int64_t blocks = std::min<int64_t>((slices + kThreadsPerBlock - 1) / kThreadsPerBlock,
                                           int64_t{sm_count} * kBlocksPerSm);
  auto* kernel = &DequantizeKernel<T, Out>;
  KX_CUDA_CHECK(
      KX_LAUNCH(kernel, dim3(static_cast<unsigned>(blocks)), kThreadsPerBlock, stream, p));
  return KX_CUDA_OK;
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_dequantize(const kx_cuda_dequantize_args* args, void* stream) {
  using kx::cuda::InvalidArgument;
  namespace quant = kx::cuda::quant;
  if (args == nullptr) return InvalidArgument("dequantize: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_dequantize_args)) {
    return InvalidArgument("dequantize: args->struct_size is too small");
  }
  if (args->rows < 0 || args->n < 0) return InvalidArgument("dequantize: rows < 0 or n < 0");
  if (args->rows == 0 || args->n == 0) return KX_CUDA_OK;
  if (args->src == nullptr || args->dst == nullptr) {
    return InvalidArgument("dequantize: src and dst must be non-NULL");
  }
  if (args->dst_type != quant::kF16 && args->dst_type != quant::kF32) {
    return kx::cuda::RecordError(KX_CUDA_ERROR_UNSUPPORTED,
                                 "dequantize: dst_type must be F32 (0) or F16 (1)");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool to_half = args->dst_type == quant::kF16;
  return quant::WithDecoder("dequantize", args->type, reinterpret_cast<uintptr_t>(args->src),
                            args->src_row_bytes, args->n, [&](auto decoder) {
                              using T = decltype(decoder);
                              return to_half ? kx::cuda::Launch<T, __half>(*args, s)
                                             : kx::cuda::Launch<T, float>(*args, s);
                            });
}

KX_CUDA_REGISTER_OP(dequantize, kx_cuda_dequantize)
