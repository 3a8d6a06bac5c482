// sparse_up_gate (sparse_up_gate.cuh): one block per (listed group, 4 neurons). Its 8 warps
// take one row each — warps 0-3 the 4 up rows, 4-7 the 4 gate rows — and dot it with x: the
// lanes decode consecutive slices of the row's blocks (quant_decode.cuh, the decoders matvec
// uses) and sum them against x, then a butterfly; warp 0 applies the activation and the cut to
// the 4 neurons. A warp per row rather than a block per group: a GS = 32 group is 8 blocks, so
// even a small model's few dozen listed groups give hundreds of blocks (SmolLM2: 48 groups →
// 384 blocks of 256 threads) to cover 132 SMs, and a row is one contiguous stream per warp.
// The row type is a warp-uniform switch, not a template argument, so mixed up/gate types need
// no kernel per pair.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_registry.h"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/sparse_up_gate.cuh"

namespace kx::cuda {
namespace {

constexpr int kWarpLanes = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kNeuronsPerBlock = 4;
constexpr int kWarpsPerBlock = 2 * kNeuronsPerBlock;  // an up and a gate row per neuron
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpLanes;
constexpr uint64_t kArenaAlign = 16;
constexpr int kMaxGroupSize = 32;
constexpr int64_t kMaxGridX = 0x7fffffff;

// How a row is read: its ggml type, and for the float types whether the 16-byte decoder fits
// (quant::WithDecoder picks it the same way).
struct RowKind {
  uint32_t type;
  bool wide;
};

struct UpGateParams {
  const uint8_t* arena;
  uint64_t slot_stride;
  const int32_t* slots;
  const uint32_t* masks;  // null: every neuron predicted
  int64_t n_embd;
  int32_t group_size;
  RowKind up_kind, gate_kind;
  uint64_t up_row_bytes, gate_row_bytes, gate_offset;
  int32_t activation;
  float threshold, act_threshold;
  const float* x;
  float* coef;
  uint32_t* kept;  // null: not written
};

// This lane's share of row·x: slices lane, lane + 32, ... of the row's n / kBlockElems blocks.
template <class T>
__device__ float LaneDot(const uint8_t* row, const float* x, int64_t n, int lane) {
  const int64_t n_slices = n / T::kBlockElems * T::kSlices;
  float acc = 0.0f;
  // One slice per iteration: 64 registers (4 blocks, 32 warps per SM); unrolled by 2 it took
  // 99 (2 blocks). More warps in flight rather than more loads per warp (ptxas -v, sm_90; to
  // be timed on a GPU).
#pragma unroll 1
  for (int64_t g = lane; g < n_slices; g += kWarpLanes) {
    const int64_t block = g / T::kSlices;
    const int s = static_cast<int>(g % T::kSlices);
    typename T::Values v;
    T::Decode(row + block * T::kBlockBytes, s, v);
    float xs[T::kRuns][T::kRunLen];
    float xsum[T::kRuns];
    quant::LoadActs<T>(x + block * T::kBlockElems, s, xs, xsum);
    acc = quant::SliceDot<T>(v, xs, xsum, acc);
  }
  return acc;
}

// Warp-uniform: every lane of a warp passes the same kind.
__device__ float LaneRowDot(RowKind kind, const uint8_t* row, const float* x, int64_t n, int lane) {
  switch (kind.type) {
    case quant::kQ4_0:
      return LaneDot<quant::Q4_0>(row, x, n, lane);
    case quant::kQ4_1:
      return LaneDot<quant::Q4_1>(row, x, n, lane);
    case quant::kQ5_0:
      return LaneDot<quant::Q5_0>(row, x, n, lane);
    case quant::kQ5_1:
      return LaneDot<quant::Q5_1>(row, x, n, lane);
    case quant::kQ8_0:
      return LaneDot<quant::Q8_0>(row, x, n, lane);
    case quant::kQ4_K:
      return LaneDot<quant::Q4_K>(row, x, n, lane);
    case quant::kQ5_K:
      return LaneDot<quant::Q5_K>(row, x, n, lane);
    case quant::kQ6_K:
      return LaneDot<quant::Q6_K>(row, x, n, lane);
    case quant::kF16:
      return kind.wide ? LaneDot<quant::F16x8>(row, x, n, lane)
                       : LaneDot<quant::F16x1>(row, x, n, lane);
    case quant::kBF16:
      return kind.wide ? LaneDot<quant::BF16x8>(row, x, n, lane)
                       : LaneDot<quant::BF16x1>(row, x, n, lane);
    case quant::kF32:
      return kind.wide ? LaneDot<quant::F32x4>(row, x, n, lane)
                       : LaneDot<quant::F32x1>(row, x, n, lane);
  }
  return 0.0f;
}

// The sum over the warp's 32 lanes, in every lane (butterfly: the same bits in each).
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// ActivatedValue (model/llama_ffn_activation.h), the same float formulas.
constexpr float kGeluTanhScale = 0.7978845608028654f;
constexpr float kGeluTanhCubic = 0.044715f;

__device__ float Activated(int32_t act, float t, float g, float u) {
  switch (act) {
    case KX_CUDA_FFN_ACT_SILU:
      return g / (1.0f + expf(-g));
    case KX_CUDA_FFN_ACT_GELU_TANH:
      return g / (1.0f + expf(-2.0f * (kGeluTanhScale * (g + kGeluTanhCubic * g * g * g))));
    case KX_CUDA_FFN_ACT_RELU:
      return g > 0.0f ? g : 0.0f;
    case KX_CUDA_FFN_ACT_FATRELU:
      return g > t ? g : 0.0f;
    case KX_CUDA_FFN_ACT_DRELU:
      return g > 0.0f && u > 0.0f ? g : 0.0f;
  }
  return g;
}

// Sets the bits `owned` of *word to `bits` and leaves the others: the blocks of one group
// own disjoint bits, so kept needs no zeroing beforehand and any order gives the same word.
__device__ void StoreOwnedBits(uint32_t* word, uint32_t owned, uint32_t bits) {
  uint32_t old = atomicCAS(word, 0u, 0u);  // an atomic read
  for (;;) {
    const uint32_t seen = atomicCAS(word, old, (old & ~owned) | bits);
    if (seen == old) return;
    old = seen;
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock) SparseUpGateKernel(UpGateParams p) {
  const int chunks = p.group_size / kNeuronsPerBlock;
  const int64_t i = blockIdx.x / chunks;  // listed group
  const int first = (blockIdx.x % chunks) * kNeuronsPerBlock;
  const int warp = threadIdx.x / kWarpLanes;
  const int lane = threadIdx.x % kWarpLanes;
  const uint8_t* bundle = p.arena + static_cast<uint64_t>(__ldg(p.slots + i)) * p.slot_stride;
  const uint32_t predicted = p.masks != nullptr ? __ldg(p.masks + i) : ~0u;

  __shared__ float dots[kWarpsPerBlock];  // up of the 4 neurons, then their gate
  const int j = first + warp % kNeuronsPerBlock;
  float dot = 0.0f;
  if ((predicted >> j) & 1u) {  // warp-uniform: the whole warp reads the row or none does
    const bool gate = warp >= kNeuronsPerBlock;
    const uint8_t* row =
        gate ? bundle + p.gate_offset + j * p.gate_row_bytes : bundle + j * p.up_row_bytes;
    dot = WarpSum(LaneRowDot(gate ? p.gate_kind : p.up_kind, row, p.x, p.n_embd, lane));
  }
  if (lane == 0) dots[warp] = dot;
  __syncthreads();
  if (warp != 0) return;

  // Warp 0: lane t < 4 decides neuron first + t; the other lanes vote "not kept" (they stay
  // alive for the ballot).
  const int t = lane < kNeuronsPerBlock ? lane : 0;
  const float u = dots[t];
  const float g = dots[kNeuronsPerBlock + t];
  const float a = Activated(p.activation, p.act_threshold, g, u);
  const bool keep =
      lane < kNeuronsPerBlock && ((predicted >> (first + t)) & 1u) != 0 && fabsf(a) > p.threshold;
  if (lane < kNeuronsPerBlock) p.coef[i * p.group_size + first + t] = keep ? a * u : 0.0f;
  const uint32_t ballot = __ballot_sync(kFullMask, keep);
  if (p.kept != nullptr && lane == 0) {
    uint32_t owned = ((1u << kNeuronsPerBlock) - 1u) << first;
    // The first block of a group also clears the bits at and above GS.
    if (first == 0 && p.group_size < kMaxGroupSize) owned |= ~0u << p.group_size;
    StoreOwnedBits(p.kept + i, owned, ballot << first);
  }
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

// Rows of n elements of ggml type `type`, back to back from `first` bytes past a 16-byte
// aligned bundle: sets their bytes and the decoder that reads them (for the float types the
// 16-byte one where the rows allow, as quant::WithDecoder picks). Records why not otherwise:
// an unknown or unsupported type (by name), n not whole blocks, misaligned rows.
kx_cuda_status PickRows(uint32_t type, int64_t n, uint64_t first, uint64_t* row_bytes,
                        RowKind* kind) {
  // Row bytes first: the same for either float decoder, so ask for the one-element one.
  constexpr uintptr_t kUnaligned = 1;
  const kx_cuda_status shape = quant::WithDecoder(
      "sparse_up_gate", type, kUnaligned, kUnaligned, n, [&](auto decoder) -> kx_cuda_status {
        using T = decltype(decoder);
        if (n % T::kBlockElems != 0) {
          return InvalidArgument("sparse_up_gate: n_embd is not whole blocks of the row type");
        }
        *row_bytes = static_cast<uint64_t>(n / T::kBlockElems * T::kBlockBytes);
        return KX_CUDA_OK;
      });
  if (shape != KX_CUDA_OK) return shape;
  const auto bytes = static_cast<int64_t>(*row_bytes);
  return quant::WithDecoder(
      "sparse_up_gate", type, first, bytes, n, [&](auto decoder) -> kx_cuda_status {
        using T = decltype(decoder);
        if (!quant::CheckRows<T>("sparse_up_gate", quant::GgmlTypeName(type), first, bytes, n)) {
          return KX_CUDA_ERROR_INVALID_ARGUMENT;
        }
        *kind = RowKind{type, T::kBlockElems > 1 && T::kBlockBytes == 16};
        return KX_CUDA_OK;
      });
}

kx_cuda_status Launch(const kx_cuda_sparse_up_gate_args& a, cudaStream_t stream) {
  if (a.n_listed < 0) return InvalidArgument("sparse_up_gate: n_listed < 0");
  if (a.n_listed == 0) return KX_CUDA_OK;
  const int32_t gs = a.group_size;
  if (gs != 4 && gs != 8 && gs != 16 && gs != 32) {
    return InvalidArgument("sparse_up_gate: group_size must be 4, 8, 16 or 32");
  }
  if (a.arena == nullptr || a.slots == nullptr || a.x == nullptr || a.coef == nullptr) {
    return InvalidArgument("sparse_up_gate: arena, slots, x and coef must be non-NULL");
  }
  if (reinterpret_cast<uintptr_t>(a.arena) % kArenaAlign != 0 || a.slot_stride % kArenaAlign != 0 ||
      reinterpret_cast<uintptr_t>(a.x) % 16 != 0) {
    return InvalidArgument(
        "sparse_up_gate: arena and x must be 16-byte aligned, slot_stride a multiple of 16");
  }
  if (a.activation < KX_CUDA_FFN_ACT_SILU || a.activation > KX_CUDA_FFN_ACT_DRELU) {
    return InvalidArgument("sparse_up_gate: unknown activation");
  }
  if (a.n_embd <= 0) return InvalidArgument("sparse_up_gate: n_embd must be positive");
  UpGateParams p{};
  // Up rows from the bundle's start, gate rows from GS up rows on (bundle.h).
  kx_cuda_status st =
      PickRows(static_cast<uint32_t>(a.up_type), a.n_embd, 0, &p.up_row_bytes, &p.up_kind);
  if (st != KX_CUDA_OK) return st;
  p.gate_offset = static_cast<uint64_t>(gs) * p.up_row_bytes;
  st = PickRows(static_cast<uint32_t>(a.gate_type), a.n_embd, p.gate_offset, &p.gate_row_bytes,
                &p.gate_kind);
  if (st != KX_CUDA_OK) return st;
  const int64_t blocks = a.n_listed * (gs / kNeuronsPerBlock);
  if (blocks > kMaxGridX) return InvalidArgument("sparse_up_gate: too many listed groups");
  p.arena = a.arena;
  p.slot_stride = a.slot_stride;
  p.slots = a.slots;
  p.masks = a.masks;
  p.n_embd = a.n_embd;
  p.group_size = gs;
  p.activation = a.activation;
  p.threshold = a.threshold;
  p.act_threshold = a.act_threshold;
  p.x = a.x;
  p.coef = a.coef;
  p.kept = a.kept;
  KX_CUDA_CHECK(
      KX_LAUNCH(SparseUpGateKernel, static_cast<unsigned>(blocks), kThreadsPerBlock, stream, p));
  return KX_CUDA_OK;
}

}  // namespace
}  // namespace kx::cuda

extern "C" kx_cuda_status kx_cuda_sparse_up_gate(const kx_cuda_sparse_up_gate_args* args,
                                                 void* stream) {
  if (args == nullptr) return kx::cuda::InvalidArgument("sparse_up_gate: args is NULL");
  if (args->struct_size < sizeof(kx_cuda_sparse_up_gate_args)) {
    return kx::cuda::InvalidArgument("sparse_up_gate: args->struct_size is too small");
  }
  return kx::cuda::Launch(*args, static_cast<cudaStream_t>(stream));
}

KX_CUDA_REGISTER_OP(sparse_up_gate, kx_cuda_sparse_up_gate)
