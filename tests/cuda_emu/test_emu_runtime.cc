// The CUDA emulator itself: thread indexing, shared memory and barriers, warp shuffles and
// votes, atomics, dynamic shared memory, launch errors, half conversions. The kernels here
// are small CUDA kernels written only to exercise one feature each.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/compat.cuh"

namespace {

constexpr int kWarp = 32;

// Every thread writes its global linear index.
__global__ void IndexKernel(int* out) {
  const int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  out[block * threads + t] = block * threads + t;
}

// Block sum through shared memory: writes, barrier, a tree over the block.
template <int kThreads>
__global__ void SharedSumKernel(const float* src, float* dst, int n) {
  __shared__ float buf[kThreads];
  const int i = blockIdx.x * kThreads + threadIdx.x;
  buf[threadIdx.x] = i < n ? src[i] : 0.0f;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) dst[blockIdx.x] = buf[0];
}

// Warp sum with xor shuffles; each warp's lane 0 writes.
__global__ void WarpSumKernel(const float* src, float* dst) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  float v = src[t];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % kWarp == 0) dst[t / kWarp] = v;
}

// Each lane reads lane (lane + 1) % 32 with __shfl_sync, and lane+3 with __shfl_down_sync.
__global__ void ShuffleKernel(const int* src, int* rotated, int* down) {
  const int t = threadIdx.x;
  rotated[t] = __shfl_sync(0xffffffffu, src[t], (t + 1) % kWarp);
  down[t] = __shfl_down_sync(0xffffffffu, src[t], 3);
}

__global__ void BallotKernel(const int* flags, unsigned* ballot, int* any, int* all) {
  const int t = threadIdx.x;
  const unsigned b = __ballot_sync(0xffffffffu, flags[t]);
  const int a = __any_sync(0xffffffffu, flags[t]);
  const int l = __all_sync(0xffffffffu, flags[t]);
  if (t == 0) {
    *ballot = b;
    *any = a;
    *all = l;
  }
}

__global__ void AtomicKernel(float* fsum, int* isum, int* imax) {
  atomicAdd(fsum, 1.0f);
  atomicAdd(isum, static_cast<int>(threadIdx.x));
  atomicMax(imax, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x));
}

// Threads past n return early; the rest still meet at the barrier.
__global__ void EarlyExitKernel(const float* src, float* dst, int n) {
  __shared__ float buf[64];
  const int t = threadIdx.x;
  if (t >= n) return;
  buf[t] = src[t] * 2.0f;
  __syncthreads();
  dst[t] = buf[n - 1 - t];
}

__global__ void DynamicSharedKernel(const float* src, float* dst, int n) {
  KX_EXTERN_SHARED(float, buf);
  const int t = threadIdx.x;
  buf[t] = src[blockIdx.x * n + t];
  __syncthreads();
  dst[blockIdx.x * n + t] = buf[n - 1 - t];
}

}  // namespace

TEST_CASE("emulator: thread and block indices cover a 3-D launch once each", "[cuda_emu]") {
  const dim3 grid(3, 2, 2);
  const dim3 block(5, 3, 2);
  const int total = 3 * 2 * 2 * 5 * 3 * 2;
  std::vector<int> out(total);
  kx::test::Poison(out);
  REQUIRE(KX_LAUNCH(IndexKernel, grid, block, nullptr, out.data()) == cudaSuccess);
  for (int i = 0; i < total; ++i) REQUIRE(out[i] == i);
}

TEST_CASE("emulator: shared memory and __syncthreads give a block reduction", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(11);
  constexpr int kThreads = 128;
  const int n = 1000;  // the last block is ragged
  const std::vector<float> src = kx::test::RandomFloats(rng, n);
  const int blocks = (n + kThreads - 1) / kThreads;
  std::vector<float> dst(blocks);
  kx::test::Poison(dst);
  auto* kernel = &SharedSumKernel<kThreads>;
  REQUIRE(KX_LAUNCH(kernel, blocks, kThreads, nullptr, src.data(), dst.data(), n) == cudaSuccess);
  for (int b = 0; b < blocks; ++b) {
    double want = 0;
    for (int i = b * kThreads; i < std::min(n, (b + 1) * kThreads); ++i) want += src[i];
    REQUIRE(std::fabs(dst[b] - want) < 1e-4);
  }
}

TEST_CASE("emulator: warp shuffles and votes", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(12);
  SECTION("xor-shuffle sums, four warps per block, two blocks") {
    const std::vector<float> src = kx::test::RandomFloats(rng, 256);
    std::vector<float> dst(8);
    kx::test::Poison(dst);
    REQUIRE(KX_LAUNCH(WarpSumKernel, 2, 128, nullptr, src.data(), dst.data()) == cudaSuccess);
    for (int w = 0; w < 8; ++w) {
      double want = 0;
      for (int i = 0; i < kWarp; ++i) want += src[w * kWarp + i];
      REQUIRE(std::fabs(dst[w] - want) < 1e-5);
    }
  }
  SECTION("indexed and down shuffles") {
    std::vector<int> src(kWarp);
    std::iota(src.begin(), src.end(), 100);
    std::vector<int> rotated(kWarp), down(kWarp);
    kx::test::Poison(rotated);
    kx::test::Poison(down);
    REQUIRE(KX_LAUNCH(ShuffleKernel, 1, kWarp, nullptr, src.data(), rotated.data(), down.data()) ==
            cudaSuccess);
    for (int t = 0; t < kWarp; ++t) {
      REQUIRE(rotated[t] == 100 + (t + 1) % kWarp);
      // Past the warp's end a lane keeps its own value (CUDA's rule).
      REQUIRE(down[t] == (t + 3 < kWarp ? 100 + t + 3 : 100 + t));
    }
  }
  SECTION("ballot, any, all") {
    std::vector<int> flags(kWarp, 0);
    flags[3] = flags[17] = flags[31] = 1;
    unsigned ballot = 0;
    int any = -1, all = -1;
    REQUIRE(KX_LAUNCH(BallotKernel, 1, kWarp, nullptr, flags.data(), &ballot, &any, &all) ==
            cudaSuccess);
    REQUIRE(ballot == ((1u << 3) | (1u << 17) | (1u << 31)));
    REQUIRE(any == 1);
    REQUIRE(all == 0);
  }
}

TEST_CASE("emulator: atomics from every thread of several blocks", "[cuda_emu]") {
  float fsum = 0.0f;
  int isum = 0;
  int imax = -1;
  REQUIRE(KX_LAUNCH(AtomicKernel, 3, 64, nullptr, &fsum, &isum, &imax) == cudaSuccess);
  REQUIRE(fsum == 192.0f);
  REQUIRE(isum == 3 * (63 * 64 / 2));
  REQUIRE(imax == 191);
}

TEST_CASE("emulator: a thread that returned does not hold up __syncthreads", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(13);
  const int n = 37;
  const std::vector<float> src = kx::test::RandomFloats(rng, 64);
  std::vector<float> dst(64);
  kx::test::Poison(dst);
  REQUIRE(KX_LAUNCH(EarlyExitKernel, 1, 64, nullptr, src.data(), dst.data(), n) == cudaSuccess);
  for (int t = 0; t < n; ++t) REQUIRE(dst[t] == src[n - 1 - t] * 2.0f);
  for (int t = n; t < 64; ++t) REQUIRE(std::isnan(dst[t]));  // never written
}

TEST_CASE("emulator: dynamic shared memory is per launch and sized by the launch", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(14);
  const int n = 48;  // a partial second warp
  const std::vector<float> src = kx::test::RandomFloats(rng, 2 * n);
  std::vector<float> dst(2 * n);
  kx::test::Poison(dst);
  REQUIRE(KX_LAUNCH_SMEM(DynamicSharedKernel, 2, n, n * sizeof(float), nullptr, src.data(),
                         dst.data(), n) == cudaSuccess);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < n; ++t) REQUIRE(dst[b * n + t] == src[b * n + n - 1 - t]);
  }
}

TEST_CASE("emulator: bad launch configurations are errors, as on a GPU", "[cuda_emu]") {
  std::vector<int> out(4);
  REQUIRE(KX_LAUNCH(IndexKernel, 0, 4, nullptr, out.data()) == cudaErrorInvalidConfiguration);
  REQUIRE(cudaGetLastError() == cudaErrorInvalidConfiguration);
  REQUIRE(cudaGetLastError() == cudaSuccess);  // read once, then cleared
  REQUIRE(KX_LAUNCH(IndexKernel, 1, 2048, nullptr, out.data()) == cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();
}

TEST_CASE("emulator: half and bfloat16 conversions match the CPU's", "[cuda_emu]") {
  // Every half value round-trips through float; float → half rounds like the CPU kernels'.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
    const float want = kx::cpu::HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      continue;
    }
    REQUIRE(f == want);
    REQUIRE(__half_as_ushort(__float2half(f)) == h);
  }
  std::mt19937_64 rng = kx::test::SeededRng(15);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, sizeof f);
    if (std::isnan(f)) continue;
    REQUIRE(__half_as_ushort(__float2half(f)) == kx::cpu::FloatToHalf(f));
    REQUIRE(__float2bfloat16(f).x == kx::cpu::FloatToBf16(f));
  }
}

TEST_CASE("emulator: __fadd_rn/__fsub_rn/__fmul_rn round each operation on its own",
          "[cuda_emu]") {
  // a·a = 1 + 2⁻¹¹ + 2⁻²⁴ is a tie between two floats: rounded alone it is 1 + 2⁻¹¹ (even),
  // so a·a + c is 0 with separate roundings and 2⁻²⁴ with one FMA.
  const float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
  REQUIRE(__fmul_rn(a, a) == 1.0f + 0x1p-11f);
  REQUIRE(__fadd_rn(__fmul_rn(a, a), c) == 0.0f);
  REQUIRE(__fmaf_rn(a, a, c) == 0x1p-24f);
  REQUIRE(__fsub_rn(1.0f, 0x1p-25f) == 1.0f);
  REQUIRE(__fsub_rn(3.0f, 0.5f) == 2.5f);
}
