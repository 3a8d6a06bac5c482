#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/rope_store_kv.cuh"

namespace kx::cuda {
namespace {

struct RopeStoreKvParams {
  float* q;
  float* k;
  float* v;
  const float* q_bias;
  const float* k_bias;
  const float* v_bias;
  const float* q_norm;
  const float* k_norm;
  uint8_t* k_cache;
  uint8_t* v_cache;
  uint64_t kv_row_bytes;
  int64_t pos;
  int n_head;
  int n_kv_head;
  int head_dim;
  int n_rot;
  bool q8;
  bool neox;
  double freq_base;
  double norm_eps;
};

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * kWarp;
constexpr int kQ8Block = KX_CUDA_Q8_0_BLOCK_ELEMS;
constexpr int kQ8BlockBytes = KX_CUDA_Q8_0_BLOCK_BYTES;
constexpr float kQ8Max = 127.0f;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxGridY = 65535;

// What one warp does to one head: its data, and which of the steps apply.
struct HeadJob {
  float* x;            // the head's head_dim values
  const float* bias;   // null: none
  const float* norm;   // null: none
  uint8_t* cache_row;  // the head's first byte in the cache row; null: not stored
  bool rope;
};

__device__ HeadJob JobFor(const RopeStoreKvParams& p, int job, int64_t t) {
  const int64_t d = p.head_dim;
  const int64_t q_dim = p.n_head * d, kv_dim = p.n_kv_head * d;
  const uint64_t row = static_cast<uint64_t>(p.pos + t) * p.kv_row_bytes;
  HeadJob j{};
  if (job < p.n_head) {
    j.x = p.q + t * q_dim + job * d;
    j.bias = p.q_bias != nullptr ? p.q_bias + job * d : nullptr;
    j.norm = p.q_norm;
    j.rope = true;
    return j;
  }
  const bool is_k = job < p.n_head + p.n_kv_head;
  const int64_t h = is_k ? job - p.n_head : job - p.n_head - p.n_kv_head;
  // A head's offset in the row: whole Q8_0 blocks, or halves.
  const uint64_t head_bytes = p.q8 ? static_cast<uint64_t>(h) * (d / kQ8Block) * kQ8BlockBytes
                                   : static_cast<uint64_t>(h) * d * sizeof(__half);
  const float* bias = is_k ? p.k_bias : p.v_bias;
  j.x = (is_k ? p.k : p.v) + t * kv_dim + h * d;
  j.bias = bias != nullptr ? bias + h * d : nullptr;
  j.norm = is_k ? p.k_norm : nullptr;
  j.cache_row = (is_k ? p.k_cache : p.v_cache) + row + head_bytes;
  j.rope = is_k;
  return j;
}

// (x · scale) · w, rounded as the CPU's RmsNorm rounds.
__device__ __forceinline__ float Norm(float x, float scale, float w) {
  return __fmul_rn(__fmul_rn(x, scale), w);
}

// cos/sin of pair i at `pos`, as the CPU's RopeInvFreq and RopeTables compute them: the
// frequency in double rounded to float, the angle and its cos/sin in double.
__device__ __forceinline__ void RopeAngle(double freq_base, int i, int n_rot, int64_t pos, float* c,
                                          float* s) {
  const float inv_freq = static_cast<float>(pow(freq_base, -2.0 * i / n_rot));
  const double theta = static_cast<double>(pos) * inv_freq;
  *c = static_cast<float>(cos(theta));
  *s = static_cast<float>(sin(theta));
}

// Writes the head's values (already final in x) into its cache row: 32 values per step,
// one per lane, so a Q8_0 block is one warp reduction.
__device__ void StoreHead(const HeadJob& j, int head_dim, bool q8, int lane) {
  for (int b0 = 0; b0 < head_dim; b0 += kWarp) {
    const int i = b0 + lane;
    if (!q8) {
      if (i < head_dim) {
        reinterpret_cast<__half*>(j.cache_row)[i] = __float2half_rn(j.x[i]);
      }
      continue;
    }
    // Q8_0 (head_dim % 32 == 0: every lane holds an element), cpu::QuantizeRow's arithmetic.
    const float x = j.x[i];
    float amax = fabsf(x);
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    }
    const __half dh = __float2half_rn(amax / kQ8Max);
    const float d = __half2float(dh);
    int q = 0;
    if (d != 0.0f) {
      const float r = rintf(x / d);
      q = !(r >= -kQ8Max) ? -static_cast<int>(kQ8Max)
                          : (r > kQ8Max ? static_cast<int>(kQ8Max) : static_cast<int>(r));
    }
    uint8_t* block = j.cache_row + static_cast<int64_t>(b0 / kQ8Block) * kQ8BlockBytes;
    // Blocks sit at even offsets: the scale is one aligned 16-bit store (little-endian, as
    // the CPU's StoreU16 writes it).
    if (lane == 0) *reinterpret_cast<uint16_t*>(block) = __half_as_ushort(dh);
    block[sizeof(uint16_t) + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

// One warp per (token, head): Q heads, then K heads, then V heads. A decode token is a few
// dozen heads, so the kernel is latency-bound: one launch instead of four is the point.
__global__ void __launch_bounds__(kThreads) RopeStoreKvKernel(RopeStoreKvParams p) {
  const int lane = threadIdx.x % kWarp;
  const int job = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t t = blockIdx.y;
  // Whole warps leave together (no shuffle ever misses a lane).
  if (job >= p.n_head + 2 * p.n_kv_head) return;
  const HeadJob j = JobFor(p, job, t);
  const int d = p.head_dim;

  if (j.bias != nullptr) {
    for (int i = lane; i < d; i += kWarp) j.x[i] += j.bias[i];
    __syncwarp();
  }
  float scale = 1.0f;
  if (j.norm != nullptr) {
    double sum = 0.0;
    for (int i = lane; i < d; i += kWarp) sum += static_cast<double>(j.x[i]) * j.x[i];
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    scale = static_cast<float>(1.0 / sqrt(sum / d + p.norm_eps));
    __syncwarp();  // every lane's reads of x are done before any lane rewrites it
  }
  if (j.rope) {
    const int half = p.n_rot / 2;
    for (int i = lane; i < half; i += kWarp) {
      const int a = p.neox ? i : 2 * i;
      const int b = p.neox ? i + half : 2 * i + 1;
      float x0 = j.x[a], x1 = j.x[b];
      if (j.norm != nullptr) {
        x0 = Norm(x0, scale, j.norm[a]);
        x1 = Norm(x1, scale, j.norm[b]);
      }
      float c, s;
      RopeAngle(p.freq_base, i, p.n_rot, p.pos + t, &c, &s);
      j.x[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
      j.x[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
    if (j.norm != nullptr) {  // dimensions past n_rot are normed, not rotated
      for (int i = p.n_rot + lane; i < d; i += kWarp) j.x[i] = Norm(j.x[i], scale, j.norm[i]);
    }
  }
  if (j.cache_row != nullptr) {
    __syncwarp();  // the store reads values other lanes wrote
    StoreHead(j, d, p.q8, lane);
  }
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_rope_store_kv(const kx_cuda_rope_store_kv_args* args,
                                                void* stream) {
  using kx::cuda::InvalidArgument;
  if (args == nullptr) return InvalidArgument("rope_store_kv: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_rope_store_kv_args)) {
    return InvalidArgument("rope_store_kv: args->struct_size is too small");
  }
  if (args->n_tokens < 0) return InvalidArgument("rope_store_kv: n_tokens < 0");
  if (args->n_tokens == 0) return KX_CUDA_OK;
  if (args->n_tokens > kx::cuda::kMaxGridY) {
    return InvalidArgument("rope_store_kv: n_tokens > 65535 (split the batch)");
  }
  if (args->pos < 0) return InvalidArgument("rope_store_kv: pos < 0");
  if (args->n_head <= 0 || args->n_kv_head <= 0 || args->n_head > 0xffff ||
      args->n_kv_head > 0xffff) {
    return InvalidArgument("rope_store_kv: n_head and n_kv_head must be in [1, 65535]");
  }
  const int64_t d = args->head_dim;
  if (d <= 0 || d % 2 != 0 || d > kx::cuda::kMaxHeadDim) {
    return InvalidArgument("rope_store_kv: head_dim must be even and in [2, 1024]");
  }
  if (args->n_rot < 2 || args->n_rot % 2 != 0 || args->n_rot > d) {
    return InvalidArgument("rope_store_kv: n_rot must be even and in [2, head_dim]");
  }
  if (args->rope_style != KX_CUDA_ROPE_ADJACENT && args->rope_style != KX_CUDA_ROPE_NEOX) {
    return InvalidArgument("rope_store_kv: unknown rope_style");
  }
  if (args->kv_type != KX_CUDA_KV_F16 && args->kv_type != KX_CUDA_KV_Q8_0) {
    return InvalidArgument("rope_store_kv: unknown kv_type");
  }
  if (args->kv_type == KX_CUDA_KV_Q8_0 && d % KX_CUDA_Q8_0_BLOCK_ELEMS != 0) {
    return InvalidArgument("rope_store_kv: a Q8_0 KV cache needs head_dim % 32 == 0");
  }
  if (!(args->freq_base > 0.0f)) return InvalidArgument("rope_store_kv: freq_base must be > 0");
  if (!(args->norm_eps >= 0.0f)) return InvalidArgument("rope_store_kv: norm_eps must be >= 0");
  if (args->q == nullptr || args->k == nullptr || args->v == nullptr || args->k_cache == nullptr ||
      args->v_cache == nullptr) {
    return InvalidArgument("rope_store_kv: q, k, v, k_cache and v_cache must be non-NULL");
  }
  kx::cuda::RopeStoreKvParams p{};
  p.q = args->q;
  p.k = args->k;
  p.v = args->v;
  p.q_bias = args->q_bias;
  p.k_bias = args->k_bias;
  p.v_bias = args->v_bias;
  p.q_norm = args->q_norm;
  p.k_norm = args->k_norm;
  p.k_cache = args->k_cache;
  p.v_cache = args->v_cache;
  p.kv_row_bytes = kx_cuda_kv_row_bytes(args->kv_type, args->n_kv_head * d);
  p.pos = args->pos;
  p.n_head = static_cast<int>(args->n_head);
  p.n_kv_head = static_cast<int>(args->n_kv_head);
  p.head_dim = static_cast<int>(d);
  p.n_rot = static_cast<int>(args->n_rot);
  p.q8 = args->kv_type == KX_CUDA_KV_Q8_0;
  p.neox = args->rope_style == KX_CUDA_ROPE_NEOX;
  p.freq_base = static_cast<double>(args->freq_base);
  p.norm_eps = static_cast<double>(args->norm_eps);

  const int64_t jobs = args->n_head + 2 * args->n_kv_head;
  const dim3 grid(
      static_cast<unsigned>((jobs + kx::cuda::kWarpsPerBlock - 1) / kx::cuda::kWarpsPerBlock),
      static_cast<unsigned>(args->n_tokens));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  KX_CUDA_CHECK(KX_LAUNCH(kx::cuda::RopeStoreKvKernel, grid, kx::cuda::kThreads, s, p));
  return KX_CUDA_OK;
}

KX_CUDA_REGISTER_OP(rope_store_kv, kx_cuda_rope_store_kv)
