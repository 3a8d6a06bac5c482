// matvec: y (+)= W·x over GGUF blocks for decode (contract in matvec.cuh).
//
// Layout of the work: a warp computes kRows consecutive rows (4 when there are enough rows to
// fill the GPU, so that every activation load serves four rows: at one row per warp x's 4
// bytes per element, re-read from L1, would outweigh the 0.5-1 byte of a 4-bit weight); its
// lanes take the slices of a row's blocks in order (quant_decode.cuh), so consecutive lanes
// read consecutive bytes; one float per lane and row, then a shuffle reduction.
//
// Types whose blocks are 16-byte aligned (Q4_K, Q5_K, float rows) are read straight from global
// memory, 16 bytes per lane. The others (Q4_0 18-byte blocks, Q8_0 34, Q6_K 210, ...) sit at
// 2-byte boundaries, and decoding them in place would take 2-byte loads spread over many cache
// sectors per instruction; instead the warp copies each chunk of its rows into shared memory
// with 16-byte coalesced loads (staging) and decodes from there, where narrow loads cost only
// bank cycles.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/quant_decode.cuh"

namespace kx::cuda {
// Outside the anonymous namespace: nvcc warns (#177) about the members of an internal class
// template that some instantiation leaves unused.
namespace matvec_detail {

constexpr int kWarpLanes = 32;
constexpr int kWordBytes = 16;  // one staged word: a 16-byte load

// One pass of a warp over a row: kSlicesPerLane slices per lane.
template <class T>
struct Chunk {
  static constexpr int kBlocks = kWarpLanes * T::kSlicesPerLane / T::kSlices;
  static constexpr int kBytes = kBlocks * T::kBlockBytes;
  // Words covering kBytes that start anywhere in a word (at most 15 bytes before and after).
  static constexpr int kWords = (kBytes + 2 * (kWordBytes - 1)) / kWordBytes;
  static constexpr int kLoadsPerLane = (kWords + kWarpLanes - 1) / kWarpLanes;
  static_assert(kBlocks * T::kSlices == kWarpLanes * T::kSlicesPerLane);
};

}  // namespace matvec_detail

namespace {

using matvec_detail::Chunk;
using matvec_detail::kWarpLanes;
using matvec_detail::kWordBytes;

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpLanes * kWarpsPerBlock;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int64_t kMaxGridX = 0x7fffffff;

struct MatvecParams {
  const uint8_t* w;
  int64_t row_bytes;
  int64_t n_blocks;  // per row
  int64_t rows;
  const float* x;
  float* y;
  bool accumulate;
  // W's readable bytes [w_begin, w_end): staging reads whole aligned 16-byte words, and only the
  // first and last word of W may stick out of it.
  uintptr_t w_begin;
  uintptr_t w_end;
};

__host__ __device__ constexpr int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The 16 bytes at addr (16-aligned) that lie in [begin, end); zeros elsewhere. Only for W's
// first and last word, which may extend past the buffer.
__device__ __noinline__ uint4 LoadEdgeWord(uintptr_t addr, uintptr_t begin, uintptr_t end) {
  uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < kWordBytes; ++k) {
    const uintptr_t a = addr + k;
    if (a >= begin && a < end) {
      words[k / 4] |= static_cast<uint32_t>(*reinterpret_cast<const uint8_t*>(a)) << (8 * (k % 4));
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Staging of one chunk (kBlocks blocks) of each of a warp's kRows rows: Load issues the
// 16-byte loads into registers, Store writes them to shared memory so that the byte at
// src[r] + i lands at byte (src[r] % 16) + i of row r's stage (the staged rows keep their
// global alignment modulo 16, which the decoders' loads rely on). The kernel issues the next
// chunk's Load before computing on the current one, so its latency overlaps the arithmetic.
template <class T, int kRows>
struct Stager {
  static constexpr int kLoads = Chunk<T>::kLoadsPerLane;
  uintptr_t src[kRows];  // the chunk's first byte in each row
  int words[kRows];      // 16-byte words covering it
  uint4 v[kRows][kLoads];

  __device__ __forceinline__ static bool Inside(const MatvecParams& p, uintptr_t addr) {
    return addr >= p.w_begin && addr + kWordBytes <= p.w_end;
  }
  __device__ __forceinline__ static uintptr_t Word(uintptr_t src, int i) {
    return (src & ~uintptr_t{kWordBytes - 1}) + uintptr_t{kWordBytes} * i;
  }

  __device__ __forceinline__ void Load(const MatvecParams& p, int64_t row0, int64_t b0, int lane) {
    const int bytes = static_cast<int>(Min64(Chunk<T>::kBlocks, p.n_blocks - b0)) * T::kBlockBytes;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // A ragged last warp computes its missing rows as copies of the last row.
      const int64_t row = Min64(row0 + r, p.rows - 1);
      src[r] = reinterpret_cast<uintptr_t>(p.w + row * p.row_bytes + b0 * T::kBlockBytes);
      words[r] = static_cast<int>((src[r] % kWordBytes + bytes + kWordBytes - 1) / kWordBytes);
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int i = lane + kWarpLanes * k;
        v[r][k] = make_uint4(0, 0, 0, 0);
        if (i < words[r] && Inside(p, Word(src[r], i))) {
          v[r][k] = __ldg(reinterpret_cast<const uint4*>(Word(src[r], i)));
        }
      }
    }
  }

  // W's first and last words, which may stick out of it, are read byte by byte here.
  __device__ __forceinline__ void Store(const MatvecParams& p, uint4 (*stage)[Chunk<T>::kWords],
                                        int lane) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int i = lane + kWarpLanes * k;
        if (i < words[r]) {
          const uintptr_t addr = Word(src[r], i);
          stage[r][i] = Inside(p, addr) ? v[r][k] : LoadEdgeWord(addr, p.w_begin, p.w_end);
        }
      }
    }
  }
};

template <class T, int kRows>
__global__ void __launch_bounds__(kThreadsPerBlock) MatvecKernel(MatvecParams p) {
  using C = Chunk<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  const int warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp) * kRows;
  // Whole warps leave together, so every lane of a warp that stays reaches each shuffle.
  if (row0 >= p.rows) return;

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  [[maybe_unused]] Stager<T, kRows> stager;
  if constexpr (T::kStaged) {
    if (p.n_blocks > 0) stager.Load(p, row0, 0, lane);
  }
  for (int64_t b0 = 0; b0 < p.n_blocks; b0 += C::kBlocks) {
    const int slices = static_cast<int>(Min64(C::kBlocks, p.n_blocks - b0)) * T::kSlices;
    const uint8_t* base[kRows];
    if constexpr (T::kStaged) {
      __shared__ uint4 stage[kWarpsPerBlock][kRows][C::kWords];
      stager.Store(p, stage[warp], lane);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        base[r] = reinterpret_cast<const uint8_t*>(stage[warp][r]) + stager.src[r] % kWordBytes;
      }
      __syncwarp();
      if (b0 + C::kBlocks < p.n_blocks) stager.Load(p, row0, b0 + C::kBlocks, lane);
    } else {
      // Pointer arithmetic on p.w (not integers) keeps these loads global loads; a ragged last
      // warp computes its missing rows as copies of the last row.
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        base[r] = p.w + Min64(row0 + r, p.rows - 1) * p.row_bytes + b0 * T::kBlockBytes;
      }
    }
    const float* xc = p.x + b0 * T::kBlockElems;
#pragma unroll
    for (int u = 0; u < T::kSlicesPerLane; ++u) {
      const int g = lane + kWarpLanes * u;
      if (g < slices) {
        const int blk = g / T::kSlices;
        const int s = g % T::kSlices;
        float x[T::kRuns][T::kRunLen];
        float xsum[T::kRuns];
        quant::LoadActs<T>(xc + blk * T::kBlockElems, s, x, xsum);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          typename T::Values v;
          T::Decode(base[r] + blk * T::kBlockBytes, s, v);
          acc[r] = quant::SliceDot<T>(v, x, xsum, acc[r]);
        }
      }
    }
    // The next chunk's staging overwrites what the other lanes may still be reading.
    if constexpr (T::kStaged) __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
      acc[r] += __shfl_xor_sync(kFullWarp, acc[r], offset);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (lane == r && row0 + r < p.rows) {
      float* dst = p.y + row0 + r;
      *dst = p.accumulate ? *dst + acc[r] : acc[r];
    }
  }
}

// Four rows per warp only while that still gives every SM a block: below, latency rather
// than the activation loads limits the kernel.
int RowsPerWarp(int64_t rows, int sm_count) {
  const int64_t warps_per_wave = int64_t{kWarpsPerBlock} * sm_count;
  if (rows >= 4 * warps_per_wave) return 4;
  if (rows >= 2 * warps_per_wave) return 2;
  return 1;
}

template <class T, int kRows>
cudaError_t LaunchRows(const MatvecParams& p, int64_t blocks, cudaStream_t stream) {
  auto* kernel = &MatvecKernel<T, kRows>;
  return KX_LAUNCH(kernel, dim3(static_cast<unsigned>(blocks)), kThreadsPerBlock, stream, p);
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

template <class T>
kx_cuda_status Launch(const kx_cuda_matvec_args& a, cudaStream_t stream) {
  const char* name = quant::GgmlTypeName(a.type);
  const uintptr_t w = reinterpret_cast<uintptr_t>(a.w);
  if (a.n > 0) {
    if (a.w == nullptr || a.x == nullptr)
      return InvalidArgument("matvec: w and x must be non-NULL");
    if (!quant::CheckRows<T>("matvec", name, w, a.row_bytes, a.n))
      return KX_CUDA_ERROR_INVALID_ARGUMENT;
    if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) {
      return InvalidArgument("matvec: x must be 16-byte aligned");
    }
    if (a.row_bytes > 0 && a.rows - 1 > (INT64_MAX - a.row_bytes) / a.row_bytes) {
      return InvalidArgument("matvec: rows · row_bytes overflows");
    }
  } else if (a.n < 0) {
    return InvalidArgument("matvec: n < 0");
  } else if (a.accumulate) {
    return KX_CUDA_OK;  // y += nothing
  }
  int device = 0;
  int sm_count = 0;
  KX_CUDA_CHECK(cudaGetDevice(&device));
  KX_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));

  MatvecParams p{};
  p.w = static_cast<const uint8_t*>(a.w);
  p.row_bytes = a.row_bytes;
  p.n_blocks = a.n / T::kBlockElems;
  p.rows = a.rows;
  p.x = a.x;
  p.y = a.y;
  p.accumulate = a.accumulate != 0;
  p.w_begin = w;
  p.w_end = a.n > 0 ? w + static_cast<uint64_t>(a.rows - 1) * a.row_bytes +
                          static_cast<uint64_t>(p.n_blocks) * T::kBlockBytes
                    : w;
  const int rows_per_warp = RowsPerWarp(a.rows, sm_count);
  const int64_t rows_per_block = int64_t{kWarpsPerBlock} * rows_per_warp;
  const int64_t blocks = (a.rows + rows_per_block - 1) / rows_per_block;
  if (blocks > kMaxGridX) return InvalidArgument("matvec: too many rows for one launch");
  switch (rows_per_warp) {
    case 4:
      KX_CUDA_CHECK((LaunchRows<T, 4>(p, blocks, stream)));
      break;
    case 2:
      KX_CUDA_CHECK((LaunchRows<T, 2>(p, blocks, stream)));
      break;
    default:
      KX_CUDA_CHECK((LaunchRows<T, 1>(p, blocks, stream)));
      break;
  }
  return KX_CUDA_OK;
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_matvec(const kx_cuda_matvec_args* args, void* stream) {
  using kx::cuda::InvalidArgument;
  if (args == nullptr) return InvalidArgument("matvec: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_matvec_args)) {
    return InvalidArgument("matvec: args->struct_size is too small");
  }
  if (args->rows < 0) return InvalidArgument("matvec: rows < 0");
  if (args->rows == 0) return KX_CUDA_OK;
  if (args->y == nullptr) return InvalidArgument("matvec: y must be non-NULL");
  if (reinterpret_cast<uintptr_t>(args->y) % sizeof(float) != 0) {
    return InvalidArgument("matvec: y must be 4-byte aligned");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return kx::cuda::quant::WithDecoder(
      "matvec", args->type, reinterpret_cast<uintptr_t>(args->w), args->row_bytes, args->n,
      [&](auto decoder) { return kx::cuda::Launch<decltype(decoder)>(*args, s); });
}

KX_CUDA_REGISTER_OP(matvec, kx_cuda_matvec)
