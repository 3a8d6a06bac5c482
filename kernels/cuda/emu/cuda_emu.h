// A CUDA execution emulator for tests: the module's kernel sources (kernels/cuda/*.cu)
// compile with the host compiler against this header and run on the CPU, so every CUDA
// kernel is checked against its CPU reference on machines without a GPU, and under TSan.
//
// What it models, and how:
// - A launch runs its blocks one after another; the threads of a block are real threads
//   (one std::thread per CUDA thread, reused across the launch's blocks). threadIdx,
//   blockIdx, blockDim and gridDim read the calling thread's state.
// - `__shared__` variables are function-local statics: shared by the threads of the one
//   block that runs at a time, private to their kernel. Launches are serialised process-wide
//   so two launches never share them. Dynamic shared memory: KX_EXTERN_SHARED (compat.cuh).
// - __syncthreads() is a barrier over the block's threads; a thread that returned counts as
//   arrived (as on current GPUs). Warps are groups of 32 consecutive threads: shuffles and
//   votes go through a per-warp exchange with a barrier over the warp's live lanes.
//   A *_sync mask must name exactly the warp's live lanes (anything else is undefined on a
//   GPU, and the emulator aborts with the mask and the live lanes); reading a lane that does
//   not exist gives all-ones bits (NaN for floats) so such a bug shows in results.
// - Atomics go through std::atomic_ref; half/bfloat16 conversions round to nearest even.
// - A barrier that waits longer than kDeadlockSeconds aborts with a message (a divergent
//   __syncthreads or shuffle would otherwise hang the test suite).
// Not modelled: concurrent blocks (inter-block races through global memory), tensor-core
// MMA, inline PTX, memory fences beyond what the barriers give, timing. Kernels stay inside
// this model; one that needs more keeps an emulated path that the tests run.
//
// Usage: a kernel source includes "kernels/cuda/compat.cuh" (never this file directly) and
// launches through KX_LAUNCH; tests include the op's .cuh and call its C launcher.
#pragma once

#include <math.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

// ---- Qualifiers -------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static const

// ---- Built-in vector types and dims -----------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(4) char4 {
  signed char x, y, z, w;
};
struct alignas(4) uchar4 {
  unsigned char x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

constexpr int warpSize = 32;

// ---- Runtime types the launchers use ------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorUnsupportedPtxVersion = 222,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorSystemDriverMismatch = 803,
  cudaErrorCompatNotSupportedOnDevice = 804,
};
typedef struct CUstream_st* cudaStream_t;
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMultiProcessorCount = 16 };

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);

// ---- The emulator's machinery ------------------------------------------------------------
namespace kx::emu {

// The emulated device's multiprocessor count (launchers size grids from it).
inline constexpr int kEmulatedSmCount = 4;
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kDeadlockSeconds = 60;

struct Block;
struct Warp;

// One CUDA thread's view of where it is.
struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int lane;
  Warp* warp;
  Block* block;
  unsigned char* dynamic_shared;
};

ThreadState& Self();

// Runs `body` as a kernel over grid × block. Returns cudaErrorInvalidConfiguration (and
// records it for cudaGetLastError) for an empty grid or too many threads per block.
cudaError_t LaunchImpl(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                       const std::function<void()>& body);

template <typename Body>
cudaError_t Launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, Body&& body) {
  return LaunchImpl(grid, block, dynamic_shared_bytes, std::function<void()>(body));
}

// Block-wide barrier (__syncthreads).
void SyncThreads();
// Warp exchange: every live lane deposits `bits`; returns the deposit of `src_lane`, or
// all-ones when src_lane does not exist. `mask` must be the warp's live lanes.
uint64_t WarpExchange(unsigned mask, uint64_t bits, int src_lane, const char* what);
// Live lanes of the calling warp.
unsigned ActiveMask();
void SyncWarp(unsigned mask);

template <typename T>
uint64_t ToBits(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace kx::emu

#define threadIdx (::kx::emu::Self().thread_idx)
#define blockIdx (::kx::emu::Self().block_idx)
#define blockDim (::kx::emu::Self().block_dim)
#define gridDim (::kx::emu::Self().grid_dim)

inline void __syncthreads() { ::kx::emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::kx::emu::SyncWarp(mask); }
inline unsigned __activemask() { return ::kx::emu::ActiveMask(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- Warp shuffles and votes ----------------------------------------------------------------
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  const int lane = ::kx::emu::Self().lane;
  const int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
  return ::kx::emu::FromBits<T>(
      ::kx::emu::WarpExchange(mask, ::kx::emu::ToBits(var), src, "__shfl_sync"));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  const int lane = ::kx::emu::Self().lane;
  int src = lane ^ lane_mask;
  // A lane may read earlier groups of `width` lanes, not later ones (CUDA's rule).
  if ((src & ~(width - 1)) > (lane & ~(width - 1))) src = lane;
  return ::kx::emu::FromBits<T>(
      ::kx::emu::WarpExchange(mask, ::kx::emu::ToBits(var), src, "__shfl_xor_sync"));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const int lane = ::kx::emu::Self().lane;
  int src = lane + static_cast<int>(delta);
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  return ::kx::emu::FromBits<T>(
      ::kx::emu::WarpExchange(mask, ::kx::emu::ToBits(var), src, "__shfl_down_sync"));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const int lane = ::kx::emu::Self().lane;
  int src = lane - static_cast<int>(delta);
  if (src < (lane & ~(width - 1))) src = lane;
  return ::kx::emu::FromBits<T>(
      ::kx::emu::WarpExchange(mask, ::kx::emu::ToBits(var), src, "__shfl_up_sync"));
}
unsigned __ballot_sync(unsigned mask, int predicate);
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == (mask & ::kx::emu::ActiveMask());
}

// ---- Atomics --------------------------------------------------------------------------------
template <typename T>
T atomicAdd(T* address, T val) {
  return std::atomic_ref<T>(*address).fetch_add(val);
}
template <typename T>
T atomicSub(T* address, T val) {
  return std::atomic_ref<T>(*address).fetch_sub(val);
}
template <typename T>
T atomicExch(T* address, T val) {
  return std::atomic_ref<T>(*address).exchange(val);
}
template <typename T>
T atomicCAS(T* address, T compare, T val) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, val);
  return compare;  // the old value, whether or not the swap happened
}
template <typename T>
T atomicMax(T* address, T val) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (old < val && !ref.compare_exchange_weak(old, val)) {
  }
  return old;
}
template <typename T>
T atomicMin(T* address, T val) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (val < old && !ref.compare_exchange_weak(old, val)) {
  }
  return old;
}

// ---- Half and bfloat16 ---------------------------------------------------------------------
struct __half {
  uint16_t x;
};
struct alignas(4) __half2 {
  __half x, y;
};
struct __nv_bfloat16 {
  uint16_t x;
};

namespace kx::emu {
float HalfBitsToFloat(uint16_t h);
uint16_t FloatToHalfBits(float f);  // round to nearest even
}  // namespace kx::emu

inline float __half2float(__half h) { return ::kx::emu::HalfBitsToFloat(h.x); }
inline __half __float2half(float f) { return __half{::kx::emu::FloatToHalfBits(f)}; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half2 __float22half2_rn(float2 f) { return {__float2half(f.x), __float2half(f.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t bits = static_cast<uint32_t>(b.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{static_cast<uint16_t>((bits >> 16) | 0x40)};
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return __nv_bfloat16{static_cast<uint16_t>(bits >> 16)};
}

// ---- Math and bit intrinsics ---------------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
// Round-to-nearest add/sub/multiply that nvcc never contracts into an FMA: kernels use them
// where the result must round as the CPU's separate operations do. (The emulated build has no
// FMA contraction: it targets baseline x86-64.)
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float_as_int(float f) { return ::kx::emu::FromBits<int>(::kx::emu::ToBits(f)); }
inline unsigned __float_as_uint(float f) {
  return ::kx::emu::FromBits<unsigned>(::kx::emu::ToBits(f));
}
inline float __int_as_float(int i) { return ::kx::emu::FromBits<float>(::kx::emu::ToBits(i)); }
inline float __uint_as_float(unsigned u) {
  return ::kx::emu::FromBits<float>(::kx::emu::ToBits(u));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
// Four signed byte products added to c (sm_61+).
inline int __dp4a(int a, int b, int c) {
  int sum = c;
  for (int i = 0; i < 4; ++i) {
    sum += static_cast<int>(static_cast<int8_t>(a >> (8 * i))) *
           static_cast<int>(static_cast<int8_t>(b >> (8 * i)));
  }
  return sum;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  unsigned sum = c;
  for (int i = 0; i < 4; ++i) sum += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
  return sum;
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}

// Device-side min/max as CUDA overloads them for the arithmetic types.
#define KX_EMU_MINMAX(T)                                  \
  inline T min(T a, T b) { return b < a ? b : a; }      \
  inline T max(T a, T b) { return a < b ? b : a; }
KX_EMU_MINMAX(int)
KX_EMU_MINMAX(unsigned int)
KX_EMU_MINMAX(long)
KX_EMU_MINMAX(unsigned long)
KX_EMU_MINMAX(long long)
KX_EMU_MINMAX(unsigned long long)
KX_EMU_MINMAX(float)
KX_EMU_MINMAX(double)
#undef KX_EMU_MINMAX
