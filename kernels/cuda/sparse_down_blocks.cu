// sparse_down_blocks (sparse_down_blocks.cuh). Block (x, y): output tiles
// [8x, 8x + 8) (128 rows) and listed groups [8y, 8y + 8), one group per warp. A warp reads its
// group's 8 tiles (2560 contiguous bytes); lane (r, h) = (lane % 16, lane / 16) takes output
// row r of each tile and half h of its 32 elements (quant chunks 4h .. 4h+3: elements
// 8h .. 8h+7 and 16+8h .. 16+8h+7), so a half-warp reads each 32-byte chunk row in one go and
// the two halves meet in one shuffle. The 8 warps' rows are then summed in warp order through
// shared memory: no atomics, a fixed order (sparse_down_common.cuh).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/sparse_down_blocks.cuh"
#include "kernels/cuda/sparse_down_common.cuh"

namespace kx::cuda {
namespace {

constexpr int kWarpLanes = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kGroup = KX_CUDA_SPARSE_DOWN_BLOCKS_GROUP_SIZE;
constexpr int kGroupsPerChunk = KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK;  // = warps
constexpr int kThreadsPerBlock = kGroupsPerChunk * kWarpLanes;
constexpr int kTileRows = 16;    // kernels/cpu/down_blocks.h kDownBlocksTile
constexpr int kTileBytes = 320;  // 16 rows × one 20-byte Q4_1 block
constexpr int kScaleBytes = 64;  // 16 d, then 16 m (halves)
constexpr int kChunkBytes = 32;  // one chunk: 16 rows × 2 quant bytes
constexpr int kTilesPerBlock = 8;
constexpr int kRowsPerBlock = kTilesPerBlock * kTileRows;
constexpr int kHalfElems = 8;  // coefficients per half and nibble level
constexpr int64_t kMaxGridY = 65535;
static_assert(kRowsPerBlock <= kThreadsPerBlock, "one thread per output row sums the warps");

__device__ __forceinline__ uint32_t Load16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ float4 LoadX4(const float* p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}

struct DownBlocksParams {
  const uint8_t* arena;
  uint64_t slot_stride, down_offset;
  const int32_t* slots;
  int64_t n_listed, n_embd, n_tiles, n_chunks;
  const float* coef;
  float* y;        // n_chunks == 1
  float* partial;  // n_chunks > 1: [n_chunks][n_embd]
};

__global__ void __launch_bounds__(kThreadsPerBlock) SparseDownBlocksKernel(DownBlocksParams p) {
  const int warp = threadIdx.x / kWarpLanes;
  const int lane = threadIdx.x % kWarpLanes;
  const int r = lane % kTileRows;
  const int h = lane / kTileRows;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kGroupsPerChunk + warp;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kTilesPerBlock;

  // c_lo[k] = coefficient of element 8h + k, c_hi[k] of element 16 + 8h + k.
  float c_lo[kHalfElems] = {}, c_hi[kHalfElems] = {};
  if (i < p.n_listed) {
    const float* c = p.coef + i * kGroup;
    const float4 a = LoadX4(c + kHalfElems * h), b = LoadX4(c + kHalfElems * h + 4);
    const float4 e = LoadX4(c + 16 + kHalfElems * h);
    const float4 f = LoadX4(c + 16 + kHalfElems * h + 4);
    const float lo[kHalfElems] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    const float hi[kHalfElems] = {e.x, e.y, e.z, e.w, f.x, f.y, f.z, f.w};
#pragma unroll
    for (int k = 0; k < kHalfElems; ++k) {
      c_lo[k] = lo[k];
      c_hi[k] = hi[k];
    }
  }
  float mine = 0.0f;
  bool nonzero = false;
#pragma unroll
  for (int k = 0; k < kHalfElems; ++k) {
    mine += c_lo[k] + c_hi[k];
    nonzero = nonzero || c_lo[k] != 0.0f || c_hi[k] != 0.0f;
  }
  float acc[kTilesPerBlock] = {};
  // Warp-uniform: a group with no kept neuron (or past the list) is not read at all.
  if (__any_sync(kFullMask, nonzero)) {
    // Σ_j c_j, the same bits in both halves (a + b == b + a).
    const float sum_c = mine + __shfl_xor_sync(kFullMask, mine, kTileRows);
    const uint8_t* part =
        p.arena + static_cast<uint64_t>(__ldg(p.slots + i)) * p.slot_stride + p.down_offset;
#pragma unroll
    for (int t = 0; t < kTilesPerBlock; ++t) {
      if (tile0 + t >= p.n_tiles) break;  // block-uniform
      const uint8_t* tile = part + (tile0 + t) * kTileBytes;
      // Half 0 reads d_r, half 1 m_r; one shuffle gives each half both.
      const uint32_t own = Load16(tile + kTileRows * 2 * h + 2 * r);
      const uint32_t other = __shfl_xor_sync(kFullMask, own, kTileRows);
      const float d = quant::HalfBits(h == 0 ? own : other);
      const float m = quant::HalfBits(h == 0 ? other : own);
      float qc = 0.0f;
#pragma unroll
      for (int k = 0; k < kHalfElems / 2; ++k) {
        // Chunk 4h + k: quant bytes 2(4h+k) and 2(4h+k)+1 of row r = elements 8h + 2k,
        // 8h + 2k + 1 (low nibbles) and those + 16 (high nibbles).
        const uint32_t v = Load16(tile + kScaleBytes + kChunkBytes * (4 * h + k) + 2 * r);
        qc = fmaf(c_lo[2 * k], quant::SmallIntToFloat(v & 0x0fu, 0.0f), qc);
        qc = fmaf(c_lo[2 * k + 1], quant::SmallIntToFloat((v >> 8) & 0x0fu, 0.0f), qc);
        qc = fmaf(c_hi[2 * k], quant::SmallIntToFloat((v >> 4) & 0x0fu, 0.0f), qc);
        qc = fmaf(c_hi[2 * k + 1], quant::SmallIntToFloat((v >> 12) & 0x0fu, 0.0f), qc);
      }
      const float q_all = qc + __shfl_xor_sync(kFullMask, qc, kTileRows);
      acc[t] = fmaf(d, q_all, fmaf(m, sum_c, acc[t]));
    }
  }

  __shared__ float rows[kGroupsPerChunk][kRowsPerBlock];
  if (h == 0) {
#pragma unroll
    for (int t = 0; t < kTilesPerBlock; ++t) rows[warp][t * kTileRows + r] = acc[t];
  }
  __syncthreads();
  if (threadIdx.x >= kRowsPerBlock) return;
  const int64_t e = tile0 * kTileRows + threadIdx.x;
  if (e >= p.n_embd) return;
  float s = rows[0][threadIdx.x];
#pragma unroll
  for (int w = 1; w < kGroupsPerChunk; ++w) s += rows[w][threadIdx.x];
  if (p.n_chunks == 1) {
    p.y[e] += s;
  } else {
    p.partial[static_cast<int64_t>(blockIdx.y) * p.n_embd + e] = s;
  }
}

__global__ void __launch_bounds__(sparse_down::kSumThreads)
    SumDownBlocksPartials(const float* partial, int64_t n_chunks, int64_t n, float* y) {
  sparse_down::SumPartials(partial, n_chunks, n, y);
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

kx_cuda_status Launch(const kx_cuda_sparse_down_blocks_args& a, cudaStream_t stream) {
  if (a.n_listed < 0) return InvalidArgument("sparse_down_blocks: n_listed < 0");
  if (a.n_listed == 0) return KX_CUDA_OK;
  if (a.n_embd <= 0 || a.n_embd % kTileRows != 0) {
    return InvalidArgument("sparse_down_blocks: n_embd must be a positive multiple of 16");
  }
  if (a.arena == nullptr || a.slots == nullptr || a.coef == nullptr || a.y == nullptr) {
    return InvalidArgument("sparse_down_blocks: arena, slots, coef and y must be non-NULL");
  }
  if (reinterpret_cast<uintptr_t>(a.arena) % 16 != 0 || a.slot_stride % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.coef) % 16 != 0 || a.down_offset % 2 != 0) {
    return InvalidArgument(
        "sparse_down_blocks: arena and coef must be 16-byte aligned, slot_stride a multiple "
        "of 16, down_offset even");
  }
  DownBlocksParams p{};
  p.n_chunks = (a.n_listed + kGroupsPerChunk - 1) / kGroupsPerChunk;
  if (p.n_chunks > kMaxGridY) return InvalidArgument("sparse_down_blocks: too many groups");
  const uint64_t need = kx_cuda_sparse_down_blocks_workspace_bytes(a.n_embd, a.n_listed);
  if (need != 0 && (a.workspace == nullptr || a.workspace_bytes < need ||
                    reinterpret_cast<uintptr_t>(a.workspace) % 4 != 0)) {
    return InvalidArgument(
        "sparse_down_blocks: workspace is NULL, misaligned or smaller than "
        "kx_cuda_sparse_down_blocks_workspace_bytes()");
  }
  p.arena = a.arena;
  p.slot_stride = a.slot_stride;
  p.down_offset = a.down_offset;
  p.slots = a.slots;
  p.n_listed = a.n_listed;
  p.n_embd = a.n_embd;
  p.n_tiles = a.n_embd / kTileRows;
  p.coef = a.coef;
  p.y = a.y;
  p.partial = static_cast<float*>(a.workspace);
  const dim3 grid(static_cast<unsigned>((p.n_tiles + kTilesPerBlock - 1) / kTilesPerBlock),
                  static_cast<unsigned>(p.n_chunks));
  KX_CUDA_CHECK(KX_LAUNCH(SparseDownBlocksKernel, grid, kThreadsPerBlock, stream, p));
  if (p.n_chunks > 1) {
    KX_CUDA_CHECK(KX_LAUNCH(SumDownBlocksPartials, sparse_down::SumBlocks(p.n_embd),
                            sparse_down::kSumThreads, stream, p.partial, p.n_chunks, p.n_embd,
                            p.y));
  }
  return KX_CUDA_OK;
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_sparse_down_blocks(const kx_cuda_sparse_down_blocks_args* args,
                                                     void* stream) {
  if (args == nullptr) return kx::cuda::InvalidArgument("sparse_down_blocks: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_sparse_down_blocks_args)) {
    return kx::cuda::InvalidArgument("sparse_down_blocks: args->struct_size is too small");
  }
  return kx::cuda::Launch(*args, static_cast<cudaStream_t>(stream));
}

KX_CUDA_REGISTER_OP(sparse_down_blocks, kx_cuda_sparse_down_blocks)
