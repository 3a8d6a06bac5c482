// sparse_down_rows (sparse_down_rows.cuh). Block (x, y): 32 consecutive slices of the output
// (quant_decode.cuh's decoders, as matvec reads rows: 16 elements each for the legacy quant
// types, 4 or 8 for float rows, so 512 or 128-256 outputs) and neuron slots
// [128y, 128y + 128); its 8 warps take every 8th slot, each lane accumulating its slice over
// the warp's rows in registers (a warp reads 32 consecutive slices of a row: contiguous bytes).
// The warps' sums meet in shared memory and are added in warp order, then written to y (one
// chunk) or to the chunk's partial (several; sparse_down_common.cuh): no atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/sparse_down_common.cuh"
#include "kernels/cuda/sparse_down_rows.cuh"

namespace kx::cuda {
namespace {

constexpr int kRowsPerChunk = KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK;
constexpr int kWarpLanes = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpLanes;
constexpr int kSlicesPerBlock = kWarpLanes;
constexpr int64_t kMaxGridY = 65535;
constexpr int kKQuantBlock = 256;

struct DownRowsParams {
  const uint8_t* arena;
  uint64_t slot_stride, down_offset, row_bytes;
  const int32_t* slots;
  int64_t n_rows;  // n_listed·GS neuron slots
  int32_t group_size;
  int64_t n_embd, n_slices, n_chunks;
  const float* coef;
  float* y;        // n_chunks == 1
  float* partial;  // n_chunks > 1: [n_chunks][n_embd]
};

// Shared-memory index of output i of a block: one pad float per 32 spreads the lanes' strided
// writes (element 8s + 16j + i of slice s) over the banks; the reads are consecutive anyway.
__host__ __device__ constexpr int Padded(int i) { return i + i / kWarpLanes; }

template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) SparseDownRowsKernel(DownRowsParams p) {
  static_assert(kWarpLanes % T::kSlices == 0, "a block's slices cover whole quant blocks");
  constexpr int kSliceElems = T::kRuns * T::kRunLen;
  constexpr int kBlockOutputs = kSlicesPerBlock * kSliceElems;
  const int warp = threadIdx.x / kWarpLanes;
  const int lane = threadIdx.x % kWarpLanes;
  const int64_t slice = static_cast<int64_t>(blockIdx.x) * kSlicesPerBlock + lane;
  const int64_t block = slice / T::kSlices;
  const int s = static_cast<int>(slice % T::kSlices);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk;
  const int64_t r1 = min(p.n_rows, r0 + kRowsPerChunk);

  // Σ_r c_r·scale_r·q per element and Σ_r c_r·offset_r per run (one FMA per row for the
  // offset, not one per element).
  float acc[T::kRuns][T::kRunLen] = {};
  float acc_offset[T::kRuns] = {};
  if (slice < p.n_slices) {
#pragma unroll 2
    for (int64_t r = r0 + warp; r < r1; r += kWarpsPerBlock) {
      const float c = __ldg(p.coef + r);  // the same for the whole warp
      if (c == 0.0f) continue;
      const int64_t i = r / p.group_size;
      const int64_t j = r % p.group_size;
      const uint8_t* row = p.arena + static_cast<uint64_t>(__ldg(p.slots + i)) * p.slot_stride +
                           p.down_offset + j * p.row_bytes;
      typename T::Values v;
      T::Decode(row + block * T::kBlockBytes, s, v);
#pragma unroll
      for (int k = 0; k < T::kRuns; ++k) {
        float cs = c;
        if constexpr (T::kHasScale) cs = c * v.scale[k];
#pragma unroll
        for (int e = 0; e < T::kRunLen; ++e) acc[k][e] = fmaf(cs, v.q[k][e], acc[k][e]);
        if constexpr (T::kHasOffset) acc_offset[k] = fmaf(c, v.offset[k], acc_offset[k]);
      }
    }
  }
  __shared__ float sums[kWarpsPerBlock][Padded(kBlockOutputs)];
  // Outputs of this lane's slice, numbered from the block's first output.
  const int base = lane / T::kSlices * T::kBlockElems;
#pragma unroll
  for (int k = 0; k < T::kRuns; ++k) {
#pragma unroll
    for (int e = 0; e < T::kRunLen; ++e) {
      sums[warp][Padded(base + T::RunStart(s, k) + e)] = acc[k][e] + acc_offset[k];
    }
  }
  __syncthreads();

  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlockOutputs;
  for (int q = threadIdx.x; q < kBlockOutputs; q += kThreadsPerBlock) {
    const int64_t e = first + q;
    if (e >= p.n_embd) break;
    float sum = sums[0][Padded(q)];
#pragma unroll
    for (int w = 1; w < kWarpsPerBlock; ++w) sum += sums[w][Padded(q)];
    if (p.n_chunks == 1) {
      p.y[e] += sum;
    } else {
      p.partial[static_cast<int64_t>(blockIdx.y) * p.n_embd + e] = sum;
    }
  }
}

__global__ void __launch_bounds__(sparse_down::kSumThreads)
    SumDownRowsPartials(const float* partial, int64_t n_chunks, int64_t n, float* y) {
  sparse_down::SumPartials(partial, n_chunks, n, y);
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

template <class T>
kx_cuda_status LaunchAs(const kx_cuda_sparse_down_rows_args& a, DownRowsParams p,
                        cudaStream_t stream) {
  if constexpr (T::kBlockElems == kKQuantBlock) {
    // Refused in Launch already; this keeps the kernel from being instantiated for them.
    return RecordError(KX_CUDA_ERROR_UNSUPPORTED, "sparse_down_rows: K-quant down_t rows");
  } else {
    const char* name = quant::GgmlTypeName(static_cast<uint32_t>(a.down_type));
    if (!quant::CheckRows<T>("sparse_down_rows", name, a.down_offset,
                             static_cast<int64_t>(p.row_bytes), a.n_embd)) {
      return KX_CUDA_ERROR_INVALID_ARGUMENT;
    }
    p.n_slices = a.n_embd / T::kBlockElems * T::kSlices;
    const dim3 grid(static_cast<unsigned>((p.n_slices + kSlicesPerBlock - 1) / kSlicesPerBlock),
                    static_cast<unsigned>(p.n_chunks));
    auto* kernel = &SparseDownRowsKernel<T>;
    KX_CUDA_CHECK(KX_LAUNCH(kernel, grid, kThreadsPerBlock, stream, p));
    if (p.n_chunks > 1) {
      KX_CUDA_CHECK(KX_LAUNCH(SumDownRowsPartials, sparse_down::SumBlocks(p.n_embd),
                              sparse_down::kSumThreads, stream, p.partial, p.n_chunks, p.n_embd,
                              p.y));
    }
    return KX_CUDA_OK;
  }
}

kx_cuda_status Launch(const kx_cuda_sparse_down_rows_args& a, cudaStream_t stream) {
  if (a.n_listed < 0) return InvalidArgument("sparse_down_rows: n_listed < 0");
  if (a.n_listed == 0) return KX_CUDA_OK;
  const int32_t gs = a.group_size;
  if (gs != 4 && gs != 8 && gs != 16 && gs != 32) {
    return InvalidArgument("sparse_down_rows: group_size must be 4, 8, 16 or 32");
  }
  if (a.arena == nullptr || a.slots == nullptr || a.coef == nullptr || a.y == nullptr) {
    return InvalidArgument("sparse_down_rows: arena, slots, coef and y must be non-NULL");
  }
  if (reinterpret_cast<uintptr_t>(a.arena) % 16 != 0 || a.slot_stride % 16 != 0) {
    return InvalidArgument(
        "sparse_down_rows: arena must be 16-byte aligned, slot_stride a multiple of 16");
  }
  if (a.n_embd <= 0) return InvalidArgument("sparse_down_rows: n_embd must be positive");
  DownRowsParams p{};
  p.n_chunks = (a.n_listed * gs + kRowsPerChunk - 1) / kRowsPerChunk;
  if (p.n_chunks > kMaxGridY) return InvalidArgument("sparse_down_rows: too many groups");
  const uint64_t need = kx_cuda_sparse_down_rows_workspace_bytes(a.n_embd, a.n_listed, gs);
  if (need != 0 && (a.workspace == nullptr || a.workspace_bytes < need ||
                    reinterpret_cast<uintptr_t>(a.workspace) % 4 != 0)) {
    return InvalidArgument(
        "sparse_down_rows: workspace is NULL, misaligned or smaller than "
        "kx_cuda_sparse_down_rows_workspace_bytes()");
  }
  p.arena = a.arena;
  p.slot_stride = a.slot_stride;
  p.down_offset = a.down_offset;
  p.slots = a.slots;
  p.n_rows = a.n_listed * gs;
  p.group_size = gs;
  p.n_embd = a.n_embd;
  p.coef = a.coef;
  p.y = a.y;
  p.partial = static_cast<float*>(a.workspace);
  const auto type = static_cast<uint32_t>(a.down_type);
  // Row bytes first (the same for either float decoder), then the decoder for rows that start
  // at down_offset + j·row_bytes past a 16-byte aligned bundle.
  constexpr uintptr_t kUnaligned = 1;
  const kx_cuda_status shape = quant::WithDecoder(
      "sparse_down_rows", type, kUnaligned, kUnaligned, a.n_embd,
      [&](auto decoder) -> kx_cuda_status {
        using T = decltype(decoder);
        // The down_t types bundle.h writes (QuantizeRow's): no K-quant rows to decode.
        if constexpr (T::kBlockElems == kKQuantBlock) {
          return RecordError(KX_CUDA_ERROR_UNSUPPORTED,
                             "sparse_down_rows: down_t rows are F32, F16, BF16, Q4_0, Q4_1, "
                             "Q5_0, Q5_1 or Q8_0 (QuantizeRow's types), not K-quants");
        }
        if (a.n_embd % T::kBlockElems != 0) {
          return InvalidArgument("sparse_down_rows: n_embd is not whole blocks of the down type");
        }
        p.row_bytes = static_cast<uint64_t>(a.n_embd / T::kBlockElems * T::kBlockBytes);
        return KX_CUDA_OK;
      });
  if (shape != KX_CUDA_OK) return shape;
  return quant::WithDecoder(
      "sparse_down_rows", type, a.down_offset, static_cast<int64_t>(p.row_bytes), a.n_embd,
      [&](auto decoder) -> kx_cuda_status { return LaunchAs<decltype(decoder)>(a, p, stream); });
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_sparse_down_rows(const kx_cuda_sparse_down_rows_args* args,
                                                   void* stream) {
  if (args == nullptr) return kx::cuda::InvalidArgument("sparse_down_rows: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_sparse_down_rows_args)) {
    return kx::cuda::InvalidArgument("sparse_down_rows: args->struct_size is too small");
  }
  return kx::cuda::Launch(*args, static_cast<cudaStream_t>(stream));
}

KX_CUDA_REGISTER_OP(sparse_down_rows, kx_cuda_sparse_down_rows)
