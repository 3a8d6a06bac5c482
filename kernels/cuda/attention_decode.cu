#include <math.h>

#include <algorithm>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"

namespace kx::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 128;
// A lane holds 8 consecutive values of a head row: one 16-byte load of F16, a quarter of a
// Q8_0 block. A key's row is read by a team of L = next_pow2(head_dim / 8) lanes.
constexpr int kElems = 8;
constexpr int kMaxHeadDim = 256;
// Keys a team loads before it reduces their scores: more bytes in flight per lane.
constexpr int kKeysPerStep = 2;
constexpr int kQ8Block = KX_CUDA_Q8_0_BLOCK_ELEMS;
constexpr int kQ8BlockBytes = KX_CUDA_Q8_0_BLOCK_BYTES;
constexpr int kMaxSplits = KX_CUDA_ATTENTION_MAX_SPLITS;
// Splitting below this many keys per block costs more in partial results than it gains.
constexpr int64_t kMinKeysPerSplit = 64;
// Blocks wanted per SM before a context is split further.
constexpr int kBlocksPerSm = 2;
constexpr float kLog2e = 1.4426950408889634f;

struct AttnParams {
  const float* q;
  const uint8_t* k_cache;
  const uint8_t* v_cache;
  float* dst;
  float* ws_acc;  // [n_head][n_splits][head_dim]: Σ 2^(s−m)·V of each split
  float* ws_ml;   // [n_head][n_splits][2]: each split's running max m (log2 units) and sum
  uint64_t row_bytes;
  uint64_t head_bytes;  // bytes of one head within a row
  int64_t first;        // first key position
  int64_t n_keys;
  int64_t keys_per_split;
  int n_splits;
  int group;  // query heads per KV head
  int head_dim;
  int lane_shift;  // log2 of the lanes per key
  float q_scale;   // scale · log2(e): scores come out in log2 units, for exp2f
};

// Eight values of one row: F16 as the 16 bytes themselves, Q8_0 as eight int8 and the
// block's scale; converted to float where used, so the raw bytes are what stays in registers.
struct Chunk {
  uint4 raw;
  float d;
};

template <bool kQ8>
__device__ __forceinline__ Chunk LoadChunk(const uint8_t* row, int d0, bool present) {
  Chunk c{make_uint4(0, 0, 0, 0), 0.0f};
  if (!present) return c;
  if constexpr (kQ8) {
    // The block's scale, then 8 int8 at an even offset (Q8_0 rows are only 2-byte aligned).
    const uint8_t* block = row + (d0 / kQ8Block) * kQ8BlockBytes;
    const auto* qs =
        reinterpret_cast<const unsigned short*>(block + sizeof(uint16_t) + d0 % kQ8Block);
    c.d = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(block))));
    c.raw.x = __ldg(qs) | static_cast<unsigned>(__ldg(qs + 1)) << 16;
    c.raw.y = __ldg(qs + 2) | static_cast<unsigned>(__ldg(qs + 3)) << 16;
  } else {
    c.raw = __ldg(reinterpret_cast<const uint4*>(row + d0 * sizeof(__half)));
  }
  return c;
}

// Value i (0..7) of a chunk. Q8_0 values d·q are exact in float (11 + 7 significant bits).
template <bool kQ8>
__device__ __forceinline__ float ChunkValue(const Chunk& c, int i) {
  if constexpr (kQ8) {
    const unsigned word = i < 4 ? c.raw.x : c.raw.y;
    return c.d * static_cast<float>(static_cast<int8_t>(word >> (8 * (i % 4))));
  } else {
    const unsigned word = i < 2 ? c.raw.x : i < 4 ? c.raw.y : i < 6 ? c.raw.z : c.raw.w;
    return __half2float(__ushort_as_half(static_cast<unsigned short>(word >> (16 * (i % 2)))));
  }
}

// Shared memory of the main kernel: the key loop's score exchange and the final merge of
// the teams never overlap in time, so they share the bytes (44 KB at kG = 8, under the
// 48 KB of static shared memory).
template <int kG>
struct AttnShared {
  static constexpr int kValues = kKeysPerStep * kG;  // scores a lane holds per step
  // Odd: lane l's value v sits at l·kPartStride + v, so the 32 lanes' stores of one v fall
  // in 32 different banks.
  static constexpr int kPartStride = kValues + 1;
  struct Loop {
    float part[kThreads * kPartStride];  // each lane's partial dots
    float score[kThreads * kValues];     // [team][value]: the team's sums
  };
  struct Merge {
    float acc[kThreads * kElems * kG];  // [team][g][i][lane of team]
    float m[kThreads][kG];
    float l[kThreads][kG];
    float w[kThreads][kG];  // each team's weight in the merge
    float sum[kG];
  };
  union {
    Loop loop;
    Merge merge;
  } u;
};

// Block (split, kv head, tile of kG query heads of its group). Each team of L lanes walks
// its keys (every n_teams-th of the split, kKeysPerStep at a time) keeping, per query head,
// the running max m, the sum l of 2^(s−m) and the lane's 8 dimensions of Σ 2^(s−m)·V —
// K and V read once for all the group's heads. The teams are then merged through shared
// memory; the block writes dst (one split) or its partial result (several).
template <int kG, bool kQ8>
__global__ void __launch_bounds__(kThreads) AttentionDecodeKernel(AttnParams p) {
  using Shared = AttnShared<kG>;
  constexpr int kValues = Shared::kValues;
  constexpr int kPartStride = Shared::kPartStride;
  __shared__ Shared sh;

  const int lanes = 1 << p.lane_shift;
  const int team = threadIdx.x >> p.lane_shift;
  const int tl = threadIdx.x & (lanes - 1);
  const int n_teams = kThreads >> p.lane_shift;
  const int split = blockIdx.x;
  const int kvh = blockIdx.y;
  const int g0 = blockIdx.z * kG;
  const int n_g = min(kG, p.group - g0);
  const int h0 = kvh * p.group + g0;
  const int d = p.head_dim;
  const int d0 = tl * kElems;
  const bool lane_present = d0 < d;  // lanes past head_dim (head_dim / 8 not a power of 2)

  float q[kG][kElems];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) {
      q[g][i] = g < n_g && lane_present ? p.q[static_cast<int64_t>(h0 + g) * d + d0 + i] * p.q_scale
                                        : 0.0f;
    }
  }
  float m[kG], l[kG], acc[kG][kElems];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kElems; ++i) acc[g][i] = 0.0f;
  }

  const int64_t k_begin = p.first + split * p.keys_per_split;
  const int64_t k_end = min(k_begin + p.keys_per_split, p.first + p.n_keys);
  const uint8_t* k_head = p.k_cache + kvh * p.head_bytes;
  const uint8_t* v_head = p.v_cache + kvh * p.head_bytes;
  float* my_part = sh.u.loop.part + threadIdx.x * kPartStride;
  const float* team_part = sh.u.loop.part + team * lanes * kPartStride;
  float* team_score = sh.u.loop.score + team * kValues;
  // Every team runs the same number of steps (keys past k_end score −∞ and load nothing),
  // so every __syncwarp below sees the whole warp.
  for (int64_t base = k_begin; base < k_end; base += n_teams * kKeysPerStep) {
    Chunk kc[kKeysPerStep], vc[kKeysPerStep];
    bool valid[kKeysPerStep];
#pragma unroll
    for (int j = 0; j < kKeysPerStep; ++j) {
      const int64_t key = base + team + j * n_teams;
      valid[j] = key < k_end;
      kc[j] = LoadChunk<kQ8>(k_head + key * p.row_bytes, d0, valid[j] && lane_present);
      vc[j] = LoadChunk<kQ8>(v_head + key * p.row_bytes, d0, valid[j] && lane_present);
    }
    // Each lane's share of the kValues dot products (its 8 dimensions).
#pragma unroll
    for (int j = 0; j < kKeysPerStep; ++j) {
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kElems; ++i) dot = fmaf(q[g][i], ChunkValue<kQ8>(kc[j], i), dot);
        my_part[j * kG + g] = dot;
      }
    }
    // The team's sums through shared memory: lane v adds value v of its L lanes (in lane
    // order, once, so every lane then reads the same bits). Two warp barriers per step,
    // where butterfly shuffles would cost kValues·log2(L) exchanges.
    __syncwarp();
    for (int v = tl; v < kValues; v += lanes) {
      float sum = 0.0f;
      for (int t = 0; t < lanes; ++t) sum += team_part[t * kPartStride + v];
      team_score[v] = sum;
    }
    __syncwarp();
    float s[kKeysPerStep][kG];
#pragma unroll
    for (int j = 0; j < kKeysPerStep; ++j) {
#pragma unroll
      for (int g = 0; g < kG; ++g) s[j][g] = team_score[j * kG + g];
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g >= n_g) continue;
      float mx = m[g];
#pragma unroll
      for (int j = 0; j < kKeysPerStep; ++j) {
        if (valid[j]) mx = fmaxf(mx, s[j][g]);
      }
      if (mx == -INFINITY) continue;        // no key yet: nothing to add (and no −∞ − −∞)
      const float corr = exp2f(m[g] - mx);  // 0 on the first key
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < kElems; ++i) acc[g][i] *= corr;
#pragma unroll
      for (int j = 0; j < kKeysPerStep; ++j) {
        if (!valid[j]) continue;
        const float w = exp2f(s[j][g] - mx);
        l[g] += w;
#pragma unroll
        for (int i = 0; i < kElems; ++i) acc[g][i] = fmaf(w, ChunkValue<kQ8>(vc[j], i), acc[g][i]);
      }
      m[g] = mx;
    }
  }
  // The merge's arrays overlay the loop's: every warp must be done with its scores.
  __syncthreads();

  // Merge the teams: weights 2^(m_team − M) with M the block's max (a team without keys has
  // m = −∞ and weight 0).
  auto& mg = sh.u.merge;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (tl == 0) {
      mg.m[team][g] = m[g];
      mg.l[team][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < kElems; ++i) {
      mg.acc[((team * kG + g) * kElems + i) * lanes + tl] = acc[g][i];
    }
  }
  __syncthreads();
  const int64_t ws_row = static_cast<int64_t>(h0) * p.n_splits + split;
  if (static_cast<int>(threadIdx.x) < n_g) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
    for (int t = 0; t < n_teams; ++t) mx = fmaxf(mx, mg.m[t][g]);
    float sum = 0.0f;
    for (int t = 0; t < n_teams; ++t) {
      const float w = exp2f(mg.m[t][g] - mx);
      mg.w[t][g] = w;
      sum = fmaf(w, mg.l[t][g], sum);
    }
    mg.sum[g] = sum;
    if (p.n_splits > 1) {
      float* ml = p.ws_ml + (ws_row + static_cast<int64_t>(g) * p.n_splits) * 2;
      ml[0] = mx;
      ml[1] = sum;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < n_g * d; idx += kThreads) {
    const int g = idx / d, e = idx % d;
    const int lane_of = e / kElems, i = e % kElems;
    float a = 0.0f;
    for (int t = 0; t < n_teams; ++t) {
      a = fmaf(mg.w[t][g], mg.acc[((t * kG + g) * kElems + i) * lanes + lane_of], a);
    }
    if (p.n_splits == 1) {
      p.dst[static_cast<int64_t>(h0 + g) * d + e] = a / mg.sum[g];
    } else {
      p.ws_acc[(ws_row + static_cast<int64_t>(g) * p.n_splits) * d + e] = a;
    }
  }
}

// One block per query head: dst = Σ_s 2^(m_s − M)·acc_s / Σ_s 2^(m_s − M)·l_s over the
// splits (each has at least one key, so every m_s is finite).
__global__ void __launch_bounds__(kThreads) AttentionCombineKernel(AttnParams p) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_sum;
  const int h = blockIdx.x;
  const float* ml = p.ws_ml + static_cast<int64_t>(h) * p.n_splits * 2;
  if (threadIdx.x < kWarp) {  // warp 0, whole
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int s = lane; s < p.n_splits; s += kWarp) mx = fmaxf(mx, ml[2 * s]);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
    }
    float sum = 0.0f;
    for (int s = lane; s < p.n_splits; s += kWarp) {
      const float w = exp2f(ml[2 * s] - mx);
      s_w[s] = w;
      sum = fmaf(w, ml[2 * s + 1], sum);
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0) s_sum = sum;
  }
  __syncthreads();
  const float* acc = p.ws_acc + static_cast<int64_t>(h) * p.n_splits * p.head_dim;
  for (int e = threadIdx.x; e < p.head_dim; e += kThreads) {
    float a = 0.0f;
    for (int s = 0; s < p.n_splits; ++s) a = fmaf(s_w[s], acc[s * p.head_dim + e], a);
    p.dst[static_cast<int64_t>(h) * p.head_dim + e] = a / s_sum;
  }
}

template <int kG, bool kQ8>
cudaError_t LaunchMain(const AttnParams& p, dim3 grid, cudaStream_t stream) {
  auto* kernel = &AttentionDecodeKernel<kG, kQ8>;
  return KX_LAUNCH(kernel, grid, kThreads, stream, p);
}

template <bool kQ8>
cudaError_t LaunchTile(int tile, const AttnParams& p, dim3 grid, cudaStream_t stream) {
  switch (tile) {
    case 1:
      return LaunchMain<1, kQ8>(p, grid, stream);
    case 2:
      return LaunchMain<2, kQ8>(p, grid, stream);
    case 4:
      return LaunchMain<4, kQ8>(p, grid, stream);
    default:
      return LaunchMain<8, kQ8>(p, grid, stream);
  }
}

// The query heads one block computes: the group rounded up to a power of two, at most 8
// (registers: 16 floats per head per lane). Larger groups take several blocks per KV head.
int GroupTile(int group) {
  int tile = 1;
  while (tile < group && tile < 8) tile *= 2;
  return tile;
}

cudaError_t Launch(AttnParams p, int64_t n_head, int64_t n_kv_head, uint64_t workspace_bytes,
                   bool q8, cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  KX_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  KX_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const int tile = GroupTile(p.group);
  const int64_t z_tiles = (p.group + tile - 1) / tile;
  const int64_t blocks_per_split = n_kv_head * z_tiles;
  // Split when there are fewer blocks than the GPU holds, the context is long enough for
  // each block to have real work, and the workspace has room for the partial results.
  const uint64_t split_bytes = static_cast<uint64_t>(n_head) * (p.head_dim + 2) * sizeof(float);
  const int64_t by_workspace =
      p.ws_acc != nullptr ? static_cast<int64_t>(workspace_bytes / split_bytes) : 1;
  const int64_t wanted =
      (int64_t{sm_count} * kBlocksPerSm + blocks_per_split - 1) / blocks_per_split;
  const int64_t by_length = (p.n_keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  int64_t splits = std::max<int64_t>(
      1, std::min({wanted, by_length, by_workspace, static_cast<int64_t>(kMaxSplits)}));
  // Whole warps of keys per split, then no empty split.
  int64_t per_split = (p.n_keys + splits - 1) / splits;
  per_split = (per_split + kWarp - 1) / kWarp * kWarp;
  splits = (p.n_keys + per_split - 1) / per_split;
  p.keys_per_split = per_split;
  p.n_splits = static_cast<int>(splits);
  if (splits > 1) p.ws_ml = p.ws_acc + n_head * splits * p.head_dim;

  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(n_kv_head),
                  static_cast<unsigned>(z_tiles));
  KX_CUDA_RETURN_IF_ERROR(q8 ? LaunchTile<true>(tile, p, grid, stream)
                             : LaunchTile<false>(tile, p, grid, stream));
  if (splits == 1) return cudaSuccess;
  auto* combine = &AttentionCombineKernel;
  return KX_LAUNCH(combine, static_cast<unsigned>(n_head), kThreads, stream, p);
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_attention_decode(const kx_cuda_attention_decode_args* args,
                                                   void* stream) {
  using kx::cuda::InvalidArgument;
  constexpr int64_t kMaxGridYz = 65535;
  if (args == nullptr) return InvalidArgument("attention_decode: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_attention_decode_args)) {
    return InvalidArgument("attention_decode: args->struct_size is too small");
  }
  if (args->n_kv_head <= 0 || args->n_head <= 0 || args->n_head % args->n_kv_head != 0) {
    return InvalidArgument("attention_decode: n_head must be a positive multiple of n_kv_head");
  }
  if (args->n_kv_head > kMaxGridYz || args->n_head > 0x7fffffff ||
      args->n_head / args->n_kv_head > kMaxGridYz) {
    return InvalidArgument("attention_decode: too many heads for the grid");
  }
  const int64_t d = args->head_dim;
  if (d < kx::cuda::kElems || d > kx::cuda::kMaxHeadDim || d % kx::cuda::kElems != 0) {
    return InvalidArgument("attention_decode: head_dim must be a multiple of 8 in [8, 256]");
  }
  if (args->kv_type != KX_CUDA_KV_F16 && args->kv_type != KX_CUDA_KV_Q8_0) {
    return InvalidArgument("attention_decode: unknown kv_type");
  }
  const bool q8 = args->kv_type == KX_CUDA_KV_Q8_0;
  if (q8 && d % KX_CUDA_Q8_0_BLOCK_ELEMS != 0) {
    return InvalidArgument("attention_decode: a Q8_0 KV cache needs head_dim % 32 == 0");
  }
  if (args->pos < 0 || args->window < 0) {
    return InvalidArgument("attention_decode: pos and window must be >= 0");
  }
  if (args->q == nullptr || args->k_cache == nullptr || args->v_cache == nullptr ||
      args->dst == nullptr) {
    return InvalidArgument("attention_decode: q, k_cache, v_cache and dst must be non-NULL");
  }
  constexpr uintptr_t kF16Align = 16;  // 16-byte loads of F16 rows
  if (!q8 && (reinterpret_cast<uintptr_t>(args->k_cache) % kF16Align != 0 ||
              reinterpret_cast<uintptr_t>(args->v_cache) % kF16Align != 0)) {
    return InvalidArgument("attention_decode: F16 caches must be 16-byte aligned");
  }
  if (args->workspace != nullptr && reinterpret_cast<uintptr_t>(args->workspace) % 4 != 0) {
    return InvalidArgument("attention_decode: workspace must be 4-byte aligned");
  }
  kx::cuda::AttnParams p{};
  p.q = args->q;
  p.k_cache = args->k_cache;
  p.v_cache = args->v_cache;
  p.dst = args->dst;
  p.ws_acc = args->workspace;
  const int64_t kv_dim = args->n_kv_head * d;
  p.row_bytes = kx_cuda_kv_row_bytes(args->kv_type, kv_dim);
  p.head_bytes = p.row_bytes / static_cast<uint64_t>(args->n_kv_head);
  p.first = args->window > 0 ? std::max<int64_t>(0, args->pos - args->window + 1) : 0;
  p.n_keys = args->pos - p.first + 1;
  p.group = static_cast<int>(args->n_head / args->n_kv_head);
  p.head_dim = static_cast<int>(d);
  int lanes = 1;
  while (lanes * kx::cuda::kElems < d) lanes *= 2;
  while ((1 << p.lane_shift) < lanes) ++p.lane_shift;
  p.q_scale = args->scale * kx::cuda::kLog2e;
  KX_CUDA_CHECK(kx::cuda::Launch(p, args->n_head, args->n_kv_head, args->workspace_bytes, q8,
                                 static_cast<cudaStream_t>(stream)));
  return KX_CUDA_OK;
}

KX_CUDA_REGISTER_OP(attention_decode, kx_cuda_attention_decode)
