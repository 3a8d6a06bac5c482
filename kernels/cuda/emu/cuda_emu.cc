// The CUDA emulator's runtime: launches, block and warp barriers, the warp exchange, the
// error state and the half conversions. See cuda_emu.h for the model.
#include "kernels/cuda/emu/cuda_emu.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace kx::emu {
namespace {

[[noreturn]] void Fail(const char* message) {
  std::fprintf(stderr, "CUDA emulator: %s\n", message);
  std::fflush(stderr);
  std::abort();
}

// A reusable barrier whose participants may leave (a thread that returned from the kernel
// no longer holds the others up). Mutex + condition variable: TSan sees every ordering it
// establishes, and waiting threads sleep (a block has up to 1024 threads on 2 cores).
class Barrier {
 public:
  void Reset(int count) {
    std::lock_guard<std::mutex> lock(mu_);
    count_ = count;
    waiting_ = 0;
  }

  void Wait(const char* what) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++waiting_ >= count_) {
      ReleaseLocked();
      return;
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(kDeadlockSeconds),
                      [&] { return generation_ != generation; })) {
      char message[256];
      std::snprintf(message, sizeof message,
                    "%s waited %d s for %d of %d threads: divergent barrier or shuffle "
                    "(a deadlock on a GPU too)",
                    what, kDeadlockSeconds, count_ - waiting_, count_);
      Fail(message);
    }
  }

  // The caller leaves for good; the others no longer wait for it.
  void Drop() {
    std::lock_guard<std::mutex> lock(mu_);
    --count_;
    if (waiting_ > 0 && waiting_ >= count_) ReleaseLocked();
  }

 private:
  void ReleaseLocked() {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  int waiting_ = 0;
  uint64_t generation_ = 0;
};

constexpr int kWarpLanes = 32;
constexpr uint64_t kMissingLane = ~uint64_t{0};

}  // namespace

struct Warp {
  Barrier barrier;
  uint64_t slots[kWarpLanes];
  unsigned present = 0;             // lanes that exist in this block
  std::atomic<unsigned> live{0};    // present lanes that have not returned
};

struct Block {
  Barrier barrier;
};

namespace {

thread_local ThreadState* tls_state = nullptr;
thread_local cudaError_t tls_last_error = cudaSuccess;

void CheckMask(unsigned mask, const Warp& warp, const char* what) {
  const unsigned live = warp.live.load(std::memory_order_relaxed);
  if ((mask & warp.present) != live) {
    char message[256];
    std::snprintf(message, sizeof message,
                  "%s with mask 0x%08x but the warp's live lanes are 0x%08x (every live lane "
                  "must take part, and no lane that returned)",
                  what, mask, live);
    Fail(message);
  }
}

}  // namespace

ThreadState& Self() {
  if (tls_state == nullptr) Fail("a CUDA built-in was used outside a kernel launch");
  return *tls_state;
}

void SyncThreads() { Self().block->barrier.Wait("__syncthreads"); }

unsigned ActiveMask() { return Self().warp->live.load(std::memory_order_relaxed); }

void SyncWarp(unsigned mask) {
  Warp& warp = *Self().warp;
  CheckMask(mask, warp, "__syncwarp");
  warp.barrier.Wait("__syncwarp");
}

uint64_t WarpExchange(unsigned mask, uint64_t bits, int src_lane, const char* what) {
  ThreadState& self = Self();
  Warp& warp = *self.warp;
  CheckMask(mask, warp, what);
  warp.slots[self.lane] = bits;
  warp.barrier.Wait(what);
  const unsigned live = warp.live.load(std::memory_order_relaxed);
  const bool readable = src_lane >= 0 && src_lane < kWarpLanes && ((live >> src_lane) & 1u);
  const uint64_t result = readable ? warp.slots[src_lane] : kMissingLane;
  // Nobody deposits again until every lane has read.
  warp.barrier.Wait(what);
  return result;
}

cudaError_t LaunchImpl(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                       const std::function<void()>& body) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  constexpr unsigned kMaxGridYz = 65535;
  constexpr unsigned kMaxBlockZ = 64;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > kMaxBlockZ || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.y > kMaxGridYz || grid.z > kMaxGridYz ||
      grid.x > 0x7fffffffu) {
    tls_last_error = cudaErrorInvalidConfiguration;
    return cudaErrorInvalidConfiguration;
  }
  // One launch at a time in the process: `__shared__` variables are statics.
  static std::mutex launch_mu;
  std::lock_guard<std::mutex> launch_lock(launch_mu);

  const int n = static_cast<int>(threads);
  const int n_warps = (n + kWarpLanes - 1) / kWarpLanes;
  Block shared_block;
  std::vector<Warp> warps(n_warps);
  std::vector<unsigned char> dynamic_shared(dynamic_shared_bytes + 16);
  unsigned char* dyn = dynamic_shared.data() + (16 - reinterpret_cast<uintptr_t>(
                                                          dynamic_shared.data()) % 16) % 16;
  std::vector<ThreadState> states(n);
  Barrier start;
  Barrier end;
  start.Reset(n + 1);
  end.Reset(n + 1);
  uint3 current{0, 0, 0};
  bool done = false;

  auto worker = [&](int t) {
    ThreadState& state = states[t];
    tls_state = &state;
    for (;;) {
      start.Wait("launch start");
      if (done) break;
      state.block_idx = current;
      body();
      Warp& warp = *state.warp;
      warp.live.fetch_and(~(1u << state.lane), std::memory_order_relaxed);
      warp.barrier.Drop();
      shared_block.barrier.Drop();
      end.Wait("launch end");
    }
    tls_state = nullptr;
  };

  for (int t = 0; t < n; ++t) {
    ThreadState& state = states[t];
    state.thread_idx = uint3{static_cast<unsigned>(t) % block.x,
                             static_cast<unsigned>(t) / block.x % block.y,
                             static_cast<unsigned>(t) / (block.x * block.y)};
    state.block_dim = block;
    state.grid_dim = grid;
    state.lane = t % kWarpLanes;
    state.warp = &warps[t / kWarpLanes];
    state.block = &shared_block;
    state.dynamic_shared = dyn;
    warps[t / kWarpLanes].present |= 1u << (t % kWarpLanes);
  }
  std::vector<std::thread> pool;
  pool.reserve(n);
  for (int t = 0; t < n; ++t) pool.emplace_back(worker, t);

  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        current = uint3{x, y, z};
        shared_block.barrier.Reset(n);
        for (Warp& warp : warps) {
          warp.live.store(warp.present, std::memory_order_relaxed);
          warp.barrier.Reset(__builtin_popcount(warp.present));
        }
        // Dynamic shared memory starts as garbage on a GPU: all-ones (NaN) here.
        std::memset(dyn, 0xff, dynamic_shared_bytes);
        start.Wait("launch start");
        end.Wait("launch end");
      }
    }
  }
  done = true;
  start.Wait("launch start");
  for (std::thread& thread : pool) thread.join();
  return cudaSuccess;
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400u) == 0);
    bits = sign | ((112 - e) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (x < 0x38800000u) {  // result is subnormal or zero
    if (x < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    const int shift = 113 - static_cast<int>(x >> 23) + 13;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = ((x >> 13) - (112u << 10));
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

}  // namespace kx::emu

unsigned __ballot_sync(unsigned mask, int predicate) {
  kx::emu::ThreadState& self = kx::emu::Self();
  kx::emu::Warp& warp = *self.warp;
  kx::emu::CheckMask(mask, warp, "__ballot_sync");
  warp.slots[self.lane] = predicate ? 1 : 0;
  warp.barrier.Wait("__ballot_sync");
  const unsigned live = warp.live.load(std::memory_order_relaxed);
  unsigned ballot = 0;
  for (int lane = 0; lane < kx::emu::kWarpLanes; ++lane) {
    if (((live >> lane) & 1u) && warp.slots[lane] != 0) ballot |= 1u << lane;
  }
  warp.barrier.Wait("__ballot_sync");
  return ballot & mask;
}

cudaError_t cudaGetLastError() {
  const cudaError_t err = kx::emu::tls_last_error;
  kx::emu::tls_last_error = cudaSuccess;
  return err;
}

cudaError_t cudaPeekAtLastError() { return kx::emu::tls_last_error; }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown (emulated)";
  }
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidValue: return "invalid argument";
    default: return "emulated CUDA error";
  }
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = kx::emu::kEmulatedSmCount; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = kx::emu::kMaxThreadsPerBlock; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
