// The sim device's sparse FFN ops (lib/device/sim_sparse_ops.cc) through the Device interface:
// bundles packed by lib/sparse's PackBundles, uploaded into scrambled device slots, each op
// launched by name on the compute stream, results against the library's float64 oracle
// (SparseFfnReference) with tolerances derived from the sim's arithmetic; outputs poisoned
// first (fresh sim memory is 0xFF: NaN) and guard elements checked; bad slots, host pointers
// and short workspaces refused with an error; sparse_ffn_merge's NULL inputs and in-place dst.
// The split FFN through all four ops: test_sim_sparse_split.cc (the same program).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "device/sim_ops.h"
#include "kernels/cuda/sparse_ffn_merge.cuh"
#include "sim_sparse_util.h"

namespace kx::test {
namespace {

constexpr const char* kOps[] = {"sparse_up_gate", "sparse_down_blocks", "sparse_down_rows",
                                "sparse_ffn_merge"};

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
    Rig unknown;  // an id that is no ggml type is an argument error, as in the module
    a.arena = UploadArena(unknown, L);
    a.slots = unknown.Upload(l.slots);
    a.coef = unknown.Upload(coef);
    a.y = unknown.Alloc<float>(256);
    a.down_type = 99;
    ExpectRefused("sparse_down_rows", &a, unknown, "is not a ggml type");
    // A count whose byte sizes would overflow is refused before any range is computed.
    Rig huge;
    a.arena = UploadArena(huge, L);
    a.slots = huge.Upload(l.slots);
    a.coef = huge.Upload(coef);
    a.y = huge.Alloc<float>(256);
    a.down_type = static_cast<int32_t>(GgmlType::kF16);
    a.n_listed = int64_t{1} << 62;
    ExpectRefused("sparse_down_rows", &a, huge, "too many groups");
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
