// Shared by the sim device's sparse FFN op tests (test_sim_sparse_ops.cc,
// test_sim_sparse_split.cc): a sim device opened by OpenDevice with the buffers a test put on
// it, the ops launched through the Device interface, the float64 oracle, and the sim's
// rounding bounds (the layers and picks come from tests/cuda_emu/sparse_emu_util.h).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/size_parse.h"
#include "cuda_emu/sparse_emu_util.h"
#include "device/device.h"
#include "device/open_device.h"
#include "kernels/cuda/sparse_up_gate.cuh"
#include "model/llama_ffn_activation.h"
#include "sparse/sparse_ffn.h"

namespace kx::test {

#define REQUIRE_OK(expr)            \
  do {                              \
    const absl::Status s_ = (expr); \
    INFO(s_.ToString());            \
    REQUIRE(s_.ok());               \
  } while (0)

template <typename T>
T ValueOrFail(absl::StatusOr<T> v) {
  INFO(v.status().ToString());
  REQUIRE(v.ok());
  return std::move(v).value();
}

inline constexpr size_t kGuard = 4;  // elements past each output the op must leave alone
inline constexpr uint32_t kPoisonWord = 0xffffffffu;
inline const FfnActivation kActivations[] = {FfnActivation::kSilu, FfnActivation::kGeluTanh,
                                             FfnActivation::kRelu, FfnActivation::kFatRelu,
                                             FfnActivation::kDRelu};

inline bool IsPoisonWord(const void* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits == kPoisonWord;
}

inline std::unique_ptr<Device> OpenSim() {
  DeviceOptions o;
  o.kind = DeviceKind::kSim;
  o.vram_budget = ValueOrFail(ParseSize("256M"));
  std::unique_ptr<Device> dev = ValueOrFail(OpenDevice(o));
  REQUIRE(dev != nullptr);
  return dev;
}

// A sim device and the buffers a test put on it.
struct Rig {
  std::unique_ptr<Device> dev = OpenSim();
  std::vector<DeviceBuffer> keep;

  // n elements of fresh (poisoned) device memory, at least one.
  template <typename T>
  T* Alloc(size_t n) {
    keep.push_back(ValueOrFail(dev->Alloc("test", std::max<size_t>(n, 1) * sizeof(T))));
    return keep.back().as<T>();
  }
  template <typename T>
  T* Upload(const T* src, size_t n) {
    T* p = Alloc<T>(n);
    if (n > 0) REQUIRE_OK(dev->CopyH2D(StreamKind::kCritical, p, src, n * sizeof(T)));
    REQUIRE_OK(dev->StreamSynchronize(StreamKind::kCritical));
    return p;
  }
  template <typename T>
  T* Upload(const std::vector<T>& v) {
    return Upload(v.data(), v.size());
  }
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> out(n);
    REQUIRE_OK(dev->CopyD2H(StreamKind::kCritical, out.data(), p, n * sizeof(T)));
    REQUIRE_OK(dev->StreamSynchronize(StreamKind::kCritical));
    return out;
  }
  // Launches on the compute stream and waits: the op's own error, or the sticky one.
  absl::Status Run(const char* op, const void* args) {
    KX_RETURN_IF_ERROR(dev->Launch(StreamKind::kCompute, op, args));
    return dev->Synchronize();
  }
};

// A SlotLayer's whole arena (every slot, the unused ones too) copied to the device.
inline uint8_t* UploadArena(Rig& rig, const SlotLayer& L) {
  constexpr size_t kHostAlignPad = 64;  // MakeSlotLayer's alignment slack
  const size_t bytes = (L.storage.size() - kHostAlignPad) / L.slot_stride * L.slot_stride;
  return rig.Upload(L.arena, bytes);
}

struct Call {
  FfnActivation act = FfnActivation::kSilu;
  float threshold = 0.0f;
  float act_threshold = 0.0f;
  bool masks = true;  // false: masks = NULL (the oracle gets all ones)
};

inline Listed AllPredicted(Listed l, int gs) {
  for (uint32_t& m : l.masks) m = gs == 32 ? ~0u : ((1u << gs) - 1u);
  return l;
}

struct UpGateOut {
  std::vector<float> coef;
  std::vector<uint32_t> kept;
  const float* dev_coef = nullptr;  // on the device, for the down ops
};

inline UpGateOut RunUpGate(Rig& rig, const uint8_t* arena, const SlotLayer& L, const Listed& l,
                           const float* dev_x, const Call& c) {
  const int gs = L.layout.group_size;
  const size_t n_coef = static_cast<size_t>(l.n()) * gs;
  float* coef = rig.Alloc<float>(n_coef + kGuard);  // poisoned by the sim
  uint32_t* kept = rig.Alloc<uint32_t>(static_cast<size_t>(l.n()) + kGuard);
  kx_cuda_sparse_up_gate_args a{};
  a.struct_size = sizeof a;
  a.arena = arena;
  a.slot_stride = L.slot_stride;
  a.slots = rig.Upload(l.slots);
  a.masks = c.masks ? rig.Upload(l.masks) : nullptr;
  a.n_listed = l.n();
  a.n_embd = L.layout.n_embd;
  a.group_size = gs;
  a.up_type = static_cast<int32_t>(L.layout.up_type);
  a.gate_type = static_cast<int32_t>(L.layout.gate_type);
  a.activation = static_cast<int32_t>(c.act);
  a.threshold = c.threshold;
  a.act_threshold = c.act_threshold;
  a.x = dev_x;
  a.coef = coef;
  a.kept = kept;
  REQUIRE_OK(rig.Run("sparse_up_gate", &a));
  UpGateOut out;
  out.coef = rig.Download(coef, n_coef + kGuard);
  out.kept = rig.Download(kept, static_cast<size_t>(l.n()) + kGuard);
  for (size_t k = 0; k < kGuard; ++k) {
    REQUIRE(IsPoisonWord(&out.coef[n_coef + k]));
    REQUIRE(out.kept[static_cast<size_t>(l.n()) + k] == kPoisonWord);
  }
  out.coef.resize(n_coef);
  out.kept.resize(static_cast<size_t>(l.n()));
  for (float f : out.coef) REQUIRE_FALSE(IsPoisonWord(&f));  // every coefficient written
  out.dev_coef = coef;
  return out;
}

struct Oracle {
  std::vector<double> act, up;
  std::vector<uint32_t> kept;
  std::vector<float> y;
};

inline Oracle RunOracle(const SlotLayer& L, const Listed& l, const std::vector<float>& x,
                        const Call& c, const uint32_t* decide) {
  Oracle o;
  const size_t slots = static_cast<size_t>(l.n()) * L.layout.group_size;
  o.act.resize(slots);
  o.up.resize(slots);
  o.kept.resize(static_cast<size_t>(l.n()));
  o.y.resize(static_cast<size_t>(L.layout.n_embd));
  sparse::SparseFfnArgs a;
  a.layout = &L.layout;
  a.bundles = L.bundles.data();
  a.groups = l.groups.data();
  a.n_groups = l.n();
  a.masks = l.masks.data();
  a.x = x.data();
  a.act = c.act;
  a.threshold = c.threshold;
  a.act_threshold = c.act_threshold;
  a.y = o.y.data();
  a.kept = o.kept.data();
  sparse::SparseFfnReference(a, decide, o.act.data(), o.up.data());
  return o;
}

inline const uint8_t* UpRow(const SlotLayer& L, const Listed& l, int i, int j) {
  return L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])] +
         static_cast<uint64_t>(j) * L.layout.up_row_bytes;
}
inline const uint8_t* GateRow(const SlotLayer& L, const Listed& l, int i, int j) {
  return UpRow(L, l, i, 0) + L.layout.gate_offset() +
         static_cast<uint64_t>(j) * L.layout.gate_row_bytes;
}

// |the sim's row·x − the oracle's|: both dequantize to float (the sim with the selected ISA's
// table, the oracle with the scalar one: ≤ 2 roundings apart per weight if they contract
// d·q + m differently) and sum exactly enough in double (n·2^-53 ≪ u); the sim rounds once to
// float. So |err| ≤ (2 + 1)·u·Σ|terms|, taken as 2·4·u·Σ|terms| (the γ form of the others).
inline double SimDotBound(GgmlType t, const uint8_t* row, const float* x, int64_t n) {
  return 2.0 * 4.0 * kF32Eps * AbsDot(t, row, x, n) + 1e-30;
}

inline NeuronError SimNeuron(const SlotLayer& L, const Listed& l, const Oracle& o, const Call& c,
                             const std::vector<float>& x, int i, int j) {
  const int64_t n = L.layout.n_embd;
  const size_t s = static_cast<size_t>(i) * L.layout.group_size + j;
  const uint8_t* gate = GateRow(L, l, i, j);
  return BoundNeuron(c.act, c.act_threshold, o.act[s], o.up[s],
                     ExactDot(L.layout.gate_type, gate, x.data(), n),
                     SimDotBound(L.layout.gate_type, gate, x.data(), n),
                     SimDotBound(L.layout.up_type, UpRow(L, l, i, j), x.data(), n));
}

// sparse_up_gate's coef and kept against the oracle, neuron by neuron. Returns the kept count.

// sparse_down_blocks or sparse_down_rows (by the layout) adding coef's projection into y0.
// The workspace is what the size function asks for, in fresh (poisoned) device memory.
inline std::vector<float> RunDown(Rig& rig, const uint8_t* arena, const SlotLayer& L,
                                  const Listed& l, const float* dev_coef,
                                  const std::vector<float>& y0) {
  const sparse::BundleLayout& lay = L.layout;
  const int64_t n = lay.n_embd;
  const bool blocks = lay.down == sparse::DownLayout::kBlocks;
  std::vector<float> y_init = y0;
  y_init.resize(y0.size() + kGuard);
  std::memset(y_init.data() + y0.size(), 0xff, kGuard * sizeof(float));
  float* y = rig.Upload(y_init);
  const uint64_t ws_bytes =
      blocks ? kx_cuda_sparse_down_blocks_workspace_bytes(n, l.n())
             : kx_cuda_sparse_down_rows_workspace_bytes(n, l.n(), lay.group_size);
  void* ws = ws_bytes > 0 ? rig.Alloc<float>(ws_bytes / sizeof(float)) : nullptr;
  if (blocks) {
    kx_cuda_sparse_down_blocks_args a{};
    a.struct_size = sizeof a;
    a.arena = arena;
    a.slot_stride = L.slot_stride;
    a.down_offset = lay.down_offset();
    a.slots = rig.Upload(l.slots);
    a.n_listed = l.n();
    a.n_embd = n;
    a.coef = dev_coef;
    a.y = y;
    a.workspace = ws;
    a.workspace_bytes = ws_bytes;
    REQUIRE_OK(rig.Run("sparse_down_blocks", &a));
  } else {
    kx_cuda_sparse_down_rows_args a{};
    a.struct_size = sizeof a;
    a.arena = arena;
    a.slot_stride = L.slot_stride;
    a.down_offset = lay.down_offset();
    a.slots = rig.Upload(l.slots);
    a.n_listed = l.n();
    a.group_size = lay.group_size;
    a.down_type = static_cast<int32_t>(lay.down_type);
    a.n_embd = n;
    a.coef = dev_coef;
    a.y = y;
    a.workspace = ws;
    a.workspace_bytes = ws_bytes;
    REQUIRE_OK(rig.Run("sparse_down_rows", &a));
  }
  std::vector<float> got = rig.Download(y, y_init.size());
  for (size_t k = 0; k < kGuard; ++k) REQUIRE(IsPoisonWord(&got[y0.size() + k]));
  got.resize(y0.size());
  return got;
}

// The roundings a term of the sim's down projection passes through beyond its coefficient's:
// the weight's float decoding (≤ 2 apart from the oracle's), the chunk's double sum rounded to
// float (1), the chunk partials summed in float (n_chunks − 1), the add into y (1), the
// oracle's own rounding to float (1): |err| ≤ 2k·u·Σ|terms| with k = n_chunks + 4.
inline double SimDownChain(const sparse::BundleLayout& l, int64_t n_listed) {
  const bool blocks = l.down == sparse::DownLayout::kBlocks;
  const int64_t per_chunk = blocks ? KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK
                                   : KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK / l.group_size;
  const int64_t chunks = std::max<int64_t>(1, (n_listed + per_chunk - 1) / per_chunk);
  return 2.0 * kF32Eps * static_cast<double>(chunks + 4);
}

// sparse_up_gate then the down op on the sim against the oracle with the sim's decisions:
// y − y0 within Σ_kept dc·|W| (the coefficients' bounds) + the chain's rounding + y0's add.
}  // namespace kx::test
