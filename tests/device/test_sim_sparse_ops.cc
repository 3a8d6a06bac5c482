// The sim device's sparse FFN ops (lib/device/sim_sparse_ops.cc) through the Device interface:
// bundles packed by lib/sparse's PackBundles, uploaded into scrambled device slots, each op
// launched by name on the compute stream, results against the library's float64 oracle
// (SparseFfnReference) with tolerances derived from the sim's arithmetic; outputs poisoned
// first (fresh sim memory is 0xFF: NaN) and guard elements checked; bad slots, host pointers
// and short workspaces refused with an error; sparse_ffn_merge's NULL inputs and in-place dst;
// and the split FFN (some groups on the device, the rest by the CPU SparseFfn, merged on the
// device) against SparseFfn over all groups.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/size_parse.h"
#include "base/thread_pool.h"
#include "cuda_emu/sparse_emu_util.h"
#include "device/device.h"
#include "device/open_device.h"
#include "device/sim_ops.h"
#include "kernels/cuda/sparse_ffn_merge.cuh"
#include "kernels/cuda/sparse_up_gate.cuh"
#include "model/llama_ffn_activation.h"
#include "sparse/sparse_ffn.h"

namespace kx::test {
namespace {

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

constexpr size_t kGuard = 4;  // elements past each output the op must leave alone
constexpr uint32_t kPoisonWord = 0xffffffffu;
constexpr const char* kOps[] = {"sparse_up_gate", "sparse_down_blocks", "sparse_down_rows",
                                "sparse_ffn_merge"};
const FfnActivation kActivations[] = {FfnActivation::kSilu, FfnActivation::kGeluTanh,
                                      FfnActivation::kRelu, FfnActivation::kFatRelu,
                                      FfnActivation::kDRelu};

bool IsPoisonWord(const void* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits == kPoisonWord;
}

std::unique_ptr<Device> OpenSim() {
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
uint8_t* UploadArena(Rig& rig, const SlotLayer& L) {
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

Listed AllPredicted(Listed l, int gs) {
  for (uint32_t& m : l.masks) m = gs == 32 ? ~0u : ((1u << gs) - 1u);
  return l;
}

struct UpGateOut {
  std::vector<float> coef;
  std::vector<uint32_t> kept;
  const float* dev_coef = nullptr;  // on the device, for the down ops
};

UpGateOut RunUpGate(Rig& rig, const uint8_t* arena, const SlotLayer& L, const Listed& l,
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

Oracle RunOracle(const SlotLayer& L, const Listed& l, const std::vector<float>& x, const Call& c,
                 const uint32_t* decide) {
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

const uint8_t* UpRow(const SlotLayer& L, const Listed& l, int i, int j) {
  return L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])] +
         static_cast<uint64_t>(j) * L.layout.up_row_bytes;
}
const uint8_t* GateRow(const SlotLayer& L, const Listed& l, int i, int j) {
  return UpRow(L, l, i, 0) + L.layout.gate_offset() +
         static_cast<uint64_t>(j) * L.layout.gate_row_bytes;
}

// |the sim's row·x − the oracle's|: both dequantize to float (the sim with the selected ISA's
// table, the oracle with the scalar one: ≤ 2 roundings apart per weight if they contract
// d·q + m differently) and sum exactly enough in double (n·2^-53 ≪ u); the sim rounds once to
// float. So |err| ≤ (2 + 1)·u·Σ|terms|, taken as 2·4·u·Σ|terms| (the γ form of the others).
double SimDotBound(GgmlType t, const uint8_t* row, const float* x, int64_t n) {
  return 2.0 * 4.0 * kF32Eps * AbsDot(t, row, x, n) + 1e-30;
}

NeuronError SimNeuron(const SlotLayer& L, const Listed& l, const Oracle& o, const Call& c,
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
int64_t CheckUpGate(const SlotLayer& L, const Listed& l, const std::vector<float>& x, const Call& c,
                    const UpGateOut& got) {
  const int gs = L.layout.group_size;
  const Oracle o = RunOracle(L, c.masks ? l : AllPredicted(l, gs), x, c, nullptr);
  int64_t n_kept = 0;
  for (int i = 0; i < l.n(); ++i) {
    const uint32_t kept = got.kept[static_cast<size_t>(i)];
    if (gs < 32) REQUIRE((kept >> gs) == 0);  // the bits past GS are 0, whatever masks holds
    for (int j = 0; j < gs; ++j) {
      const size_t s = static_cast<size_t>(i) * gs + j;
      const bool predicted = !c.masks || ((l.masks[static_cast<size_t>(i)] >> j) & 1u) != 0;
      const bool got_keep = ((kept >> j) & 1u) != 0;
      const float coef = got.coef[s];
      INFO("group " << l.groups[static_cast<size_t>(i)] << " neuron " << j << " coef " << coef
                    << " A " << o.act[s] << " u " << o.up[s] << " threshold " << c.threshold);
      if (!predicted || !got_keep) {
        REQUIRE(coef == 0.0f);
        if (!predicted) REQUIRE_FALSE(got_keep);
      }
      if (!predicted) continue;
      const NeuronError e = SimNeuron(L, l, o, c, x, i, j);
      const bool ref_keep = ((o.kept[static_cast<size_t>(i)] >> j) & 1u) != 0;
      if (got_keep != ref_keep && !e.near_jump) {  // only within rounding of the cut
        REQUIRE(std::fabs(std::fabs(o.act[s]) - c.threshold) <= e.da);
      }
      if (!got_keep) continue;
      ++n_kept;
      REQUIRE(std::fabs(coef - o.act[s] * o.up[s]) <= e.dc);
    }
  }
  return n_kept;
}

TEST_CASE("sim: the sparse FFN ops are registered and supported", "[device][sparse]") {
  std::unique_ptr<Device> dev = OpenSim();
  for (const char* op : kOps) {
    INFO(op);
    CHECK(dev->Supports(op));
    CHECK(FindSimOp(op) != nullptr);
  }
  size_t listed = 0;
  for (const SimOp& op : SimOps()) {
    listed += std::find(std::begin(kOps), std::end(kOps), op.name) != std::end(kOps);
  }
  CHECK(listed == std::size(kOps));
}

struct Shape {
  GgmlType wt;
  int64_t n_embd;
  int gs;
};

TEST_CASE("sim: sparse_up_gate equals the float64 oracle for every activation",
          "[device][sparse]") {
  std::mt19937_64 rng = SeededRng(9101);
  const Shape shapes[] = {{GgmlType::kQ4_1, 576, 32},
                          {GgmlType::kQ8_0, 256, 16},
                          {GgmlType::kQ4_K, 256, 8},
                          {GgmlType::kQ4_1, 64, 4},
                          {GgmlType::kF16, 36, 4}};
  int64_t kept = 0, cut = 0;
  for (const Shape& sh : shapes) {
    Rig rig;
    const int64_t n_ff = 128;
    const SlotLayer L = MakeSlotLayer(sh.n_embd, n_ff, sh.gs, sh.wt, GgmlType::kF16,
                                      sparse::DownLayout::kRows, rng);
    const uint8_t* arena = UploadArena(rig, L);
    const std::vector<float> x = RandomInput(sh.n_embd, rng);
    const float* dev_x = rig.Upload(x);
    const Listed all = PickGroups(L, Pick::kAll, 1.0, rng);
    for (const FfnActivation act : kActivations) {
      for (int pass = 0; pass < 2; ++pass) {
        Call c;
        c.act = act;
        if (act == FfnActivation::kFatRelu) {
          c.act_threshold = MedianAbs(RunOracle(L, all, x, c, nullptr).act, all, sh.gs);
        }
        // Pass 0: masks NULL, the cut at the median |A|; pass 1: 60 % predicted, cut 0
        // (FATReLU: its t). Groups: one, half or all of them in turn.
        c.masks = pass == 1;
        c.threshold = pass == 0 ? MedianAbs(RunOracle(L, all, x, c, nullptr).act, all, sh.gs)
                                : c.act_threshold;
        const Pick pick = (static_cast<int>(act) + pass) % 3 == 0   ? Pick::kOne
                          : (static_cast<int>(act) + pass) % 3 == 1 ? Pick::kHalf
                                                                    : Pick::kAll;
        const Listed l = PickGroups(L, pick, pass == 0 ? 1.0 : 0.6, rng);
        INFO(TypeName(sh.wt) << " n_embd " << sh.n_embd << " GS " << sh.gs << " act "
                             << FfnActivationName(act) << " threshold " << c.threshold << " listed "
                             << l.n() << " masks " << c.masks);
        const UpGateOut got = RunUpGate(rig, arena, L, l, dev_x, c);
        const int64_t k = CheckUpGate(L, l, x, c, got);
        kept += k;
        if (pass == 0) cut += static_cast<int64_t>(l.n()) * sh.gs - k;
        // Deterministic: the same inputs give the same bits.
        const UpGateOut again = RunUpGate(rig, arena, L, l, dev_x, c);
        REQUIRE(std::memcmp(again.coef.data(), got.coef.data(), got.coef.size() * 4) == 0);
        REQUIRE(again.kept == got.kept);
      }
    }
    // n_listed = 0 writes nothing.
    const Listed none = PickGroups(L, Pick::kNone, 1.0, rng);
    REQUIRE(none.n() == 0);
    RunUpGate(rig, arena, L, none, dev_x, Call{});  // checks its guards stay poisoned
  }
  CHECK(kept > 100);  // both sides of the cut were exercised
  CHECK(cut > 100);
}

// ---- the down projections ------------------------------------------------------------------

// sparse_down_blocks or sparse_down_rows (by the layout) adding coef's projection into y0.
// The workspace is what the size function asks for, in fresh (poisoned) device memory.
std::vector<float> RunDown(Rig& rig, const uint8_t* arena, const SlotLayer& L, const Listed& l,
                           const float* dev_coef, const std::vector<float>& y0) {
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
double SimDownChain(const sparse::BundleLayout& l, int64_t n_listed) {
  const bool blocks = l.down == sparse::DownLayout::kBlocks;
  const int64_t per_chunk = blocks ? KX_CUDA_SPARSE_DOWN_BLOCKS_GROUPS_PER_CHUNK
                                   : KX_CUDA_SPARSE_DOWN_ROWS_PER_CHUNK / l.group_size;
  const int64_t chunks = std::max<int64_t>(1, (n_listed + per_chunk - 1) / per_chunk);
  return 2.0 * kF32Eps * static_cast<double>(chunks + 4);
}

// sparse_up_gate then the down op on the sim against the oracle with the sim's decisions:
// y − y0 within Σ_kept dc·|W| (the coefficients' bounds) + the chain's rounding + y0's add.
void CheckPipeline(const SlotLayer& L, const Listed& l, const std::vector<float>& x, const Call& c,
                   std::mt19937_64& rng) {
  const sparse::BundleLayout& lay = L.layout;
  const int gs = lay.group_size;
  const int64_t n = lay.n_embd;
  Rig rig;
  const uint8_t* arena = UploadArena(rig, L);
  const UpGateOut up = RunUpGate(rig, arena, L, l, rig.Upload(x), c);
  const std::vector<float> y0 = RandomFloats(rng, static_cast<size_t>(n), 0.5f);
  const std::vector<float> y = RunDown(rig, arena, L, l, up.dev_coef, y0);
  // Deterministic: the same call again gives the same bits.
  const std::vector<float> again = RunDown(rig, arena, L, l, up.dev_coef, y0);
  REQUIRE(std::memcmp(again.data(), y.data(), y.size() * sizeof(float)) == 0);

  const Oracle o = RunOracle(L, c.masks ? l : AllPredicted(l, gs), x, c, up.kept.data());
  std::vector<double> coef_err(static_cast<size_t>(n), 0.0), abs_terms(coef_err.size(), 0.0);
  for (int i = 0; i < l.n(); ++i) {
    const uint8_t* bundle = L.bundles[static_cast<size_t>(l.groups[static_cast<size_t>(i)])];
    for (int j = 0; j < gs; ++j) {
      if (((up.kept[static_cast<size_t>(i)] >> j) & 1u) == 0) continue;
      const size_t s = static_cast<size_t>(i) * gs + j;
      const double dc = SimNeuron(L, l, o, c, x, i, j).dc;
      const double term = std::fabs(o.act[s] * o.up[s]) + dc;
      for (int64_t e = 0; e < n; ++e) {
        const double w = AbsDownWeight(lay, bundle, j, e);
        coef_err[static_cast<size_t>(e)] += dc * w;
        abs_terms[static_cast<size_t>(e)] += term * w;
      }
    }
  }
  const double chain = SimDownChain(lay, l.n());
  for (int64_t e = 0; e < n; ++e) {
    const auto k = static_cast<size_t>(e);
    const double want = static_cast<double>(y0[k]) + o.y[k];
    const double tol = coef_err[k] + chain * abs_terms[k] +
                       2.0 * kF32Eps * (std::fabs(y0[k]) + std::fabs(want)) + 1e-30;
    INFO("e " << e << " sim " << y[k] << " y0 " << y0[k] << " oracle " << o.y[k]);
    REQUIRE(std::fabs(static_cast<double>(y[k]) - want) <= tol);
  }
  if (l.n() == 0) REQUIRE(std::memcmp(y.data(), y0.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("sim: sparse_up_gate then sparse_down_* equals the float64 oracle", "[device][sparse]") {
  std::mt19937_64 rng = SeededRng(9102);
  struct Config {
    GgmlType wt, down;
    sparse::DownLayout layout;
    int64_t n_embd, n_ff;
    int gs;
  };
  // 20 groups of 32 (blocks: 3 chunks of 8), 20 of 16 and 32 of 8 (rows: 3 and 2 chunks of
  // 128 neuron slots), 32 of 4 (one chunk).
  const Config configs[] = {
      {GgmlType::kQ4_1, GgmlType::kQ4_1, sparse::DownLayout::kBlocks, 576, 640, 32},
      {GgmlType::kQ8_0, GgmlType::kQ8_0, sparse::DownLayout::kRows, 256, 320, 16},
      {GgmlType::kQ4_K, GgmlType::kF16, sparse::DownLayout::kRows, 256, 256, 8},
      {GgmlType::kQ4_1, GgmlType::kQ4_1, sparse::DownLayout::kRows, 64, 128, 4},
  };
  for (const Config& cf : configs) {
    const SlotLayer L = MakeSlotLayer(cf.n_embd, cf.n_ff, cf.gs, cf.wt, cf.down, cf.layout, rng);
    struct Run {
      Pick pick;
      double frac;  // predicted share
      FfnActivation act;
      bool masks;
    };
    // 0.05 predicted leaves whole groups without a kept neuron (their part is skipped).
    const Run runs[] = {{Pick::kAll, 1.0, FfnActivation::kSilu, false},
                        {Pick::kAll, 0.05, FfnActivation::kRelu, true},
                        {Pick::kHalf, 0.7, FfnActivation::kGeluTanh, true},
                        {Pick::kOne, 1.0, FfnActivation::kDRelu, true},
                        {Pick::kNone, 1.0, FfnActivation::kSilu, true}};
    for (const Run& run : runs) {
      const Listed l = PickGroups(L, run.pick, run.frac, rng);
      const std::vector<float> x = RandomInput(cf.n_embd, rng);
      Call c;
      c.act = run.act;
      c.masks = run.masks;
      const bool relu = run.act == FfnActivation::kRelu || run.act == FfnActivation::kDRelu;
      c.threshold = relu ? 0.0f : MedianAbs(RunOracle(L, l, x, c, nullptr).act, l, cf.gs);
      INFO(TypeName(cf.wt) << " down " << TypeName(cf.down) << " "
                           << sparse::DownLayoutName(cf.layout) << " n_embd " << cf.n_embd << " GS "
                           << cf.gs << " listed " << l.n() << " act " << FfnActivationName(run.act)
                           << " threshold " << c.threshold);
      CheckPipeline(L, l, x, c, rng);
    }
  }
}

// ---- refusals ------------------------------------------------------------------------------

// Launches op with args on a fresh device (errors are sticky) and expects InvalidArgument
// whose message contains `want`.
void ExpectRefused(const char* op, const void* args, Rig& rig, const char* want) {
  const absl::Status s = rig.Run(op, args);
  INFO(op << ": " << s.ToString());
  REQUIRE(absl::IsInvalidArgument(s));
  REQUIRE(std::string(s.message()).find(want) != std::string::npos);
}

TEST_CASE("sim: a bad slot, host memory or a short workspace is an error, not a crash",
          "[device][sparse]") {
  std::mt19937_64 rng = SeededRng(9103);
  const SlotLayer L = MakeSlotLayer(64, 320, 32, GgmlType::kQ4_1, GgmlType::kQ4_1,
                                    sparse::DownLayout::kBlocks, rng);
  const Listed l = PickGroups(L, Pick::kAll, 1.0, rng);  // 10 groups: 2 chunks
  const std::vector<float> x = RandomInput(64, rng);
  const int64_t n_slots = static_cast<int64_t>(L.slot_of.size()) + 3;
  std::vector<float> coef = RandomFloats(rng, static_cast<size_t>(l.n()) * 32);
  const uint64_t ws_bytes = kx_cuda_sparse_down_blocks_workspace_bytes(64, l.n());
  REQUIRE(ws_bytes > 0);

  // The bad slot values: past the arena, far past it (overflowing), negative.
  const int32_t bad_slots[] = {static_cast<int32_t>(n_slots), 0x7fffffff, -1};
  const char* bad_why[] = {"not inside live device memory", "", "negative"};
  for (int b = 0; b < 3; ++b) {
    std::vector<int32_t> slots = l.slots;
    slots[slots.size() / 2] = bad_slots[b];
    INFO("slot " << bad_slots[b]);
    for (const char* op : {"sparse_up_gate", "sparse_down_blocks", "sparse_down_rows"}) {
      Rig rig;
      const uint8_t* arena = UploadArena(rig, L);
      const int32_t* dev_slots = rig.Upload(slots);
      float* y = rig.Upload(std::vector<float>(64, 1.0f));
      if (std::string(op) == "sparse_up_gate") {
        kx_cuda_sparse_up_gate_args a{};
        a.struct_size = sizeof a;
        a.arena = arena;
        a.slot_stride = L.slot_stride;
        a.slots = dev_slots;
        a.n_listed = l.n();
        a.n_embd = 64;
        a.group_size = 32;
        a.up_type = a.gate_type = static_cast<int32_t>(GgmlType::kQ4_1);
        a.x = rig.Upload(x);
        a.coef = rig.Alloc<float>(coef.size());
        ExpectRefused(op, &a, rig, bad_why[b]);
      } else if (std::string(op) == "sparse_down_blocks") {
        kx_cuda_sparse_down_blocks_args a{};
        a.struct_size = sizeof a;
        a.arena = arena;
        a.slot_stride = L.slot_stride;
        a.down_offset = L.layout.down_offset();
        a.slots = dev_slots;
        a.n_listed = l.n();
        a.n_embd = 64;
        a.coef = rig.Upload(coef);
        a.y = y;
        a.workspace = rig.Alloc<float>(ws_bytes / 4);
        a.workspace_bytes = ws_bytes;
        ExpectRefused(op, &a, rig, bad_why[b]);
      } else {
        // The same bundles read as rows of F16 (down_offset stays in the bundle): only the
        // slot check matters here.
        kx_cuda_sparse_down_rows_args a{};
        a.struct_size = sizeof a;
        a.arena = arena;
        a.slot_stride = L.slot_stride;
        a.down_offset = L.layout.down_offset();
        a.slots = dev_slots;
        a.n_listed = l.n();
        a.group_size = 4;
        a.down_type = static_cast<int32_t>(GgmlType::kF16);
        a.n_embd = 64;
        a.coef = rig.Upload(coef);
        a.y = y;
        ExpectRefused(op, &a, rig, bad_why[b]);
      }
      // The device stays failed (sticky), as on CUDA.
      REQUIRE_FALSE(rig.dev->Alloc("after", 64).ok());
    }
  }

  // sparse_down_blocks: workspace NULL, too small, or host memory; slots in host memory.
  for (int variant = 0; variant < 4; ++variant) {
    Rig rig;
    std::vector<float> host_ws(ws_bytes / 4);
    kx_cuda_sparse_down_blocks_args a{};
    a.struct_size = sizeof a;
    a.arena = UploadArena(rig, L);
    a.slot_stride = L.slot_stride;
    a.down_offset = L.layout.down_offset();
    a.slots = variant == 3 ? l.slots.data() : rig.Upload(l.slots);
    a.n_listed = l.n();
    a.n_embd = 64;
    a.coef = rig.Upload(coef);
    a.y = rig.Upload(std::vector<float>(64, 1.0f));
    a.workspace = variant == 0   ? nullptr
                  : variant == 2 ? host_ws.data()
                                 : rig.Alloc<float>(ws_bytes / 4);
    a.workspace_bytes = variant == 1 ? ws_bytes - 4 : ws_bytes;
    INFO("variant " << variant);
    ExpectRefused("sparse_down_blocks", &a, rig,
                  variant <= 1 ? "workspace" : "not inside live device memory");
  }

  // Types the module does not decode are Unimplemented; a short struct InvalidArgument.
  {
    Rig rig;
    kx_cuda_sparse_down_rows_args a{};
    a.struct_size = sizeof a;
    a.arena = UploadArena(rig, L);
    a.slot_stride = L.slot_stride;
    a.slots = rig.Upload(l.slots);
    a.n_listed = 1;
    a.group_size = 4;
    a.down_type = static_cast<int32_t>(GgmlType::kQ4_K);
    a.n_embd = 256;
    a.coef = rig.Upload(coef);
    a.y = rig.Alloc<float>(256);
    REQUIRE(absl::IsUnimplemented(rig.Run("sparse_down_rows", &a)));
    Rig fresh;
    a.struct_size = 8;
    REQUIRE(
        absl::IsInvalidArgument(fresh.dev->Launch(StreamKind::kCompute, "sparse_down_rows", &a)));
  }
}

// ---- sparse_ffn_merge ----------------------------------------------------------------------

TEST_CASE("sim: sparse_ffn_merge adds both halves, NULL inputs count as zeros, in place",
          "[device][sparse]") {
  std::mt19937_64 rng = SeededRng(9104);
  const size_t n = 37;  // not a multiple of 4
  const std::vector<float> r = RandomFloats(rng, n), d = RandomFloats(rng, n),
                           h = RandomFloats(rng, n);
  for (int mask = 0; mask < 8; ++mask) {
    const bool has_r = mask & 1, has_d = mask & 2, has_h = mask & 4;
    for (const bool in_place : {false, true}) {
      if (in_place && !has_r) continue;
      Rig rig;
      kx_cuda_sparse_ffn_merge_args a{};
      a.struct_size = sizeof a;
      a.n = static_cast<int64_t>(n);
      float* dev_r = rig.Upload(r);
      a.residual = has_r ? dev_r : nullptr;
      a.device_partial = has_d ? rig.Upload(d) : nullptr;
      // host_partial from a pinned buffer (mapped host memory on a GPU).
      DeviceBuffer pinned = ValueOrFail(rig.dev->AllocPinned("host_partial", n * sizeof(float)));
      std::memcpy(pinned.data(), h.data(), n * sizeof(float));
      a.host_partial = has_h ? pinned.as<const float>() : nullptr;
      float* dst = in_place ? dev_r : rig.Alloc<float>(n + kGuard);
      a.dst = dst;
      REQUIRE_OK(rig.Run("sparse_ffn_merge", &a));
      const std::vector<float> got = rig.Download(dst, in_place ? n : n + kGuard);
      INFO("residual " << has_r << " device " << has_d << " host " << has_h << " in place "
                       << in_place);
      for (size_t i = 0; i < n; ++i) {
        // The contract's order: the two FFN halves first; an absent input adds nothing.
        float ffn = has_d && has_h ? d[i] + h[i] : has_d ? d[i] : has_h ? h[i] : 0.0f;
        const float want = !has_r ? ffn : (!has_d && !has_h) ? r[i] : r[i] + ffn;
        REQUIRE(std::memcmp(&got[i], &want, sizeof want) == 0);
      }
      if (!in_place) {
        for (size_t k = 0; k < kGuard; ++k) REQUIRE(IsPoisonWord(&got[n + k]));
      }
    }
  }
  // n = 0 is a no-op; dst over an input (other than residual) and a host (unpinned) input are
  // refused.
  {
    Rig rig;
    kx_cuda_sparse_ffn_merge_args a{};
    a.struct_size = sizeof a;
    a.dst = rig.Alloc<float>(n + 1);  // room for an input one element past it
    REQUIRE_OK(rig.Run("sparse_ffn_merge", &a));
    REQUIRE(IsPoisonWord(&rig.Download(a.dst, 1)[0]));
    a.n = static_cast<int64_t>(n);
    a.device_partial = a.dst + 1;
    ExpectRefused("sparse_ffn_merge", &a, rig, "overlaps");
  }
  {
    Rig rig;
    kx_cuda_sparse_ffn_merge_args a{};
    a.struct_size = sizeof a;
    a.n = static_cast<int64_t>(n);
    a.host_partial = h.data();
    a.dst = rig.Alloc<float>(n);
    ExpectRefused("sparse_ffn_merge", &a, rig, "not inside live device memory");
  }
}

}  // namespace
}  // namespace kx::test
