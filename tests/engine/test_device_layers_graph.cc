// Device layers in the decode graph (engine/decode_graph.h: a device layer's attention block
// and the head on the device are externals signalled by the device's events through
// DeviceWatch) on the sim device, on writer-made tiny models:
//   - teacher-forced logits of graph and pool decode equal byte for byte (memcmp), and the
//     CPU-only engine's, for -ngl 1, 2 and all with the head on the device, and for layers
//     without the head (a VRAM budget the head does not fit), with 1 and 2 threads;
//   - the same beside the split FFN, with and without a RAM budget (three tiers), and the
//     plan: a device layer has no CPU attention nodes, ffn_in.l waits for attn_in.l and
//     dattn_down.l, the head's externals precede head_done, the externals are tagged;
//   - the stalls: the GPU tag is charged while device layers run, the per-tag waits lie
//     within the external wait, --tier-log's graph_gpu_ns column sums to the GPU tag;
//   - negative controls: with 2 ms copies, externals signalled before their events are
//     caught (early_signals); a skipped wait for the hidden state's upload changes the
//     logits the comparison sees;
//   - a device fault in a device layer or the head inside the graph reaches Eval's status
//     (and stays there), on the graph as on the pool path, with and without a RAM tier.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/device_ffn.h"
#include "engine/device_layers.h"
#include "engine/engine.h"
#include "engine/graph_plan.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "engine/tiny_sidecar.h"
#include "model/model.h"
#include "test_util.h"

namespace {

using Tag = kx::DecodeGraphStats::Tag;

std::string TempDir() { return kx::test::TempDir("device_layers_graph"); }

// 3 layers. "llama": Q4_1 matrices, a Q8_0 tied head; "gemma3": QK-norm, post norms, two
// sliding-window layers; "llama-f32head": an F32 tied head, larger than a layer's attention
// and KV cache, so a VRAM budget can hold layers without it.
const std::string& DenseModel(const std::string& arch) {
  static std::map<std::string, std::string> cache;
  std::string& path = cache[arch];
  if (path.empty()) {
    kx::test::TinyModelSpec s;
    if (arch == "gemma3") s = kx::test::ArchGoldenSpec("gemma3");
    s.n_layer = 3;
    s.seed = arch == "gemma3" ? 301 : 302;
    if (arch == "llama-f32head") {
      s.embd_type = kx::GgmlType::kF32;
      s.seed = 303;
    }
    path = TempDir() + "/" + arch + ".gguf";
    const absl::Status st = kx::test::WriteTinyModel(path, s, nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
  }
  return path;
}

struct Prepared {
  std::string model, sidecar;
};

// The split FFN's model (tiny_sidecar.h): 3 layers, FATReLU, a rows sidecar of 128 groups of 4.
const Prepared& SparseModel() {
  static const Prepared p = [] {
    Prepared r;
    r.model = TempDir() + "/sparse.gguf";
    r.sidecar = TempDir() + "/sparse.kairox.gguf";
    const absl::Status st =
        kx::test::WriteTinyModelWithSidecar(kx::test::SparseFatReluSpec(304), r.model, r.sidecar,
                                            kx::test::SparseFatReluSidecar(/*brief=*/true));
    INFO(st.message());
    REQUIRE(st.ok());
    return r;
  }();
  return p;
}

// n_batch 4: the CPU's prefill matmul of 8+ columns sums in another order than the device's
// token-by-token matvec (test_device_engine.cc), so prompts go in batches of 4 to compare
// with the CPU-only engine too.
kx::EngineOptions Options(int threads, int ngl, const std::string& vram_budget = "") {
  kx::EngineOptions o;
  o.n_threads = threads;
  o.n_ctx = 64;
  o.n_batch = 4;
  o.device = "sim";
  o.n_gpu_layers = ngl;
  o.vram_budget = vram_budget;
  return o;
}

kx::EngineOptions Pool(kx::EngineOptions o) {
  o.executor = kx::EngineOptions::Executor::kPool;
  return o;
}

bool SameBytes(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size()) return false;
    if (std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// The graph's stalls with device layers: `runs` one-token evaluations, no early signal, the
// GPU tag charged, every tag non-negative and within the external wait, which lies within the
// wall time.
void CheckStalls(const kx::Engine& e, size_t runs) {
  const kx::DecodeGraphStats* st = e.decode_graph_stats();
  REQUIRE(st != nullptr);
  INFO("graph: wall " << st->wall_ns << " external " << st->external_wait_ns << " gpu "
                      << st->wait_ns[Tag::kGpu] << " h2d critical "
                      << st->wait_ns[Tag::kH2dCritical]);
  CHECK(st->runs == static_cast<int64_t>(runs));
  CHECK(st->early_signals == 0);
  CHECK(st->wait_ns[Tag::kGpu] > 0);
  int64_t tagged = 0;
  for (int64_t w : st->wait_ns) {
    CHECK(w >= 0);
    tagged += w;
  }
  CHECK(tagged <= st->external_wait_ns);
  CHECK(st->external_wait_ns <= st->wall_ns);
}

// The device layers' part of the plan: layers [0, n_dev) have the externals and no CPU
// attention nodes, the others the reverse; the head's externals when it is on the device.
void CheckPlan(const kx::Engine& e, int n_layer) {
  const kx::graph::TaskGraph* g = e.decode_task_graph();
  REQUIRE(g != nullptr);
  const kx::test::GraphPlan p = kx::test::ParseGraphPlan(*g);
  using kx::test::GraphPlan;
  for (int l = 0; l < n_layer; ++l) {
    INFO("layer " << l);
    const std::string s = std::to_string(l);
    const bool dev = l < e.n_device_layers();
    CHECK(GraphPlan::Has(*g, "dattn_up." + s) == dev);
    for (const char* cpu : {"qkv.", "rope.", "attn.", "wo_in.", "wo."}) {
      CHECK(GraphPlan::Has(*g, cpu + s) == !dev);
    }
    if (!dev) continue;
    const int in = p.Find(*g, "attn_in." + s), up = p.Find(*g, "dattn_up." + s),
              gpu = p.Find(*g, "dattn_gpu." + s), down = p.Find(*g, "dattn_down." + s),
              ffn_in = p.Find(*g, "ffn_in." + s);
    for (int x : {up, gpu, down}) CHECK(g->is_external(x));
    CHECK(g->tag(up) == Tag::kH2dCritical);
    CHECK(g->tag(gpu) == Tag::kGpu);
    CHECK(g->tag(down) == Tag::kH2dCritical);
    CHECK(p.preds[up] == std::set<int>{in});
    CHECK(p.preds[gpu] == std::set<int>{up});
    CHECK(p.preds[down] == std::set<int>{gpu});
    CHECK(p.preds[ffn_in] == std::set<int>{in, down});
  }
  CHECK(GraphPlan::Has(*g, "head") == !e.device_head());
  CHECK(GraphPlan::Has(*g, "head_done") == e.device_head());
  if (e.device_head()) {
    const int out = p.Find(*g, "out"), up = p.Find(*g, "dhead_up"), gpu = p.Find(*g, "dhead_gpu"),
              down = p.Find(*g, "dhead_down"), done = p.Find(*g, "head_done");
    CHECK(g->tag(gpu) == Tag::kGpu);
    CHECK(p.preds[up] == std::set<int>{out});
    CHECK(p.preds[done] == std::set<int>{out, down});
  }
}

// Copies of `latency_us` on one link (KAIROX_DEVICE_PROFILE for the sim device).
std::string SlowProfiles(int latency_us) {
  const std::string profiles = TempDir() + "/slow_" + std::to_string(latency_us) + ".json";
  std::ofstream(profiles) << R"({"default": "slow", "profiles": {"slow": {
      "description": "slow copies", "memory": "1GiB", "h2d_gb_per_s": 10.0,
      "d2h_gb_per_s": 10.0, "copy_latency_us": )"
                          << latency_us << R"(, "device_gb_per_s": 100.0,
      "shared_h2d_link": true}}})";
  return profiles;
}

std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("graph decode with device layers equals the pool path", "[device_layers_graph]") {
  const auto prompt = kx::test::RandomTokens(71, 5);
  const auto forced = kx::test::RandomTokens(72, 8);
  // Layers without the head: a budget of the scratch and two layers, below the F32 head.
  std::string two_layers;
  {
    auto model = kx::Model::Load(DenseModel("llama-f32head"), kx::ModelOptions{});
    REQUIRE(model.ok());
    const kx::LlamaHParams& hp = (*model)->hparams();
    const kx::DevicePlacement all = kx::PlanDevicePlacement(
        hp, (*model)->weights(), 64, static_cast<uint64_t>(hp.kv_dim()) * 2, 1ull << 40, -1);
    const uint64_t budget = all.scratch_bytes + all.layer_weight_bytes[0] +
                            all.layer_weight_bytes[1] + 2 * all.kv_bytes_per_layer;
    REQUIRE(budget < all.scratch_bytes + all.head_bytes);  // the premise: the head cannot fit
    two_layers = std::to_string(budget);
  }
  struct Case {
    const char* arch;
    int ngl;
    std::string budget;
    int layers;
    bool head;
  };
  for (const Case& c :
       {Case{"llama", 1, "", 1, true}, Case{"llama", 2, "", 2, true},
        Case{"llama", -1, "", 3, true}, Case{"gemma3", -1, "", 3, true},
        Case{"gemma3", 1, "", 1, true}, Case{"llama-f32head", -1, two_layers, 2, false}}) {
    for (int threads : {1, 2}) {
      DYNAMIC_SECTION(c.arch << " -ngl " << c.ngl << " budget '" << c.budget << "' threads "
                             << threads) {
        kx::EngineOptions cpu_o = Options(threads, 0);
        cpu_o.device = "cpu";
        auto cpu = kx::test::LoadEngine(DenseModel(c.arch), cpu_o);
        auto pool =
            kx::test::LoadEngine(DenseModel(c.arch), Pool(Options(threads, c.ngl, c.budget)));
        auto graph = kx::test::LoadEngine(DenseModel(c.arch), Options(threads, c.ngl, c.budget));
        REQUIRE(graph->n_device_layers() == c.layers);
        REQUIRE(graph->device_head() == c.head);
        const auto want = kx::test::TeacherForced(*cpu, prompt, forced);
        const auto a = kx::test::TeacherForced(*pool, prompt, forced);
        const auto b = kx::test::TeacherForced(*graph, prompt, forced);
        REQUIRE(kx::test::AllFinite(b));
        CHECK(SameBytes(a, b));
        CHECK(SameBytes(want, b));
        CHECK(pool->DecodeGraphParts() == 0);
        CHECK(pool->decode_graph_stats() == nullptr);
        CHECK(graph->DecodeGraphParts() > 0);
        // The 5-token prompt goes as 4 + 1: its last token is a decode step on the graph too.
        CheckStalls(*graph, forced.size() + 1);
        CheckPlan(*graph, 3);
      }
    }
  }
}

TEST_CASE("graph decode with device layers beside the split FFN, with and without a RAM budget",
          "[device_layers_graph]") {
  // A 3-token prompt: one batch on the pool path, but under a RAM budget token by token on
  // the graph, the first two without logits (the head's externals are signalled unrun).
  const auto prompt = kx::test::RandomTokens(77, 3);
  const auto forced = kx::test::RandomTokens(73, 10);
  struct Case {
    int ngl;
    const char* ram;
    int threads;
  };
  for (const Case& c : {Case{1, "", 2}, Case{-1, "", 2}, Case{-1, "", 1}, Case{1, "50%", 2},
                        Case{-1, "50%", 2}, Case{-1, "50%", 1}}) {
    DYNAMIC_SECTION("-ngl " << c.ngl << " ram " << (*c.ram ? c.ram : "all") << " threads "
                            << c.threads) {
      kx::EngineOptions o = Options(c.threads, c.ngl);
      o.sidecar = SparseModel().sidecar;
      o.sparsity = -1.0f;  // FATReLU: the natural sparsity
      o.vram_ffn = "50%";
      o.device_policy = "static";
      o.ram_budget = c.ram;
      const std::string log =
          TempDir() + "/tier_" + std::to_string(c.ngl) + "_" + std::to_string(c.threads) + ".csv";
      kx::EngineOptions go = o;
      if (*c.ram) go.tier_log = log;
      auto pool = kx::test::LoadEngine(SparseModel().model, Pool(o));
      auto graph = kx::test::LoadEngine(SparseModel().model, go);
      REQUIRE(graph->n_device_layers() == (c.ngl < 0 ? 3 : c.ngl));
      REQUIRE(graph->device_head());
      REQUIRE(graph->device_ffn() != nullptr);
      const auto a = kx::test::TeacherForced(*pool, prompt, forced);
      const auto b = kx::test::TeacherForced(*graph, prompt, forced);
      REQUIRE(kx::test::AllFinite(b));
      CHECK(SameBytes(a, b));
      CHECK(graph->device_ffn()->stats().layer_steps == pool->device_ffn()->stats().layer_steps);
      CheckStalls(*graph, forced.size() + (*c.ram ? prompt.size() : 0));
      CheckPlan(*graph, 3);
      // The split FFN's merge still waits for the CPU's share and the device's download.
      const kx::graph::TaskGraph* g = graph->decode_task_graph();
      const kx::test::GraphPlan p = kx::test::ParseGraphPlan(*g);
      for (int l = 0; l < 3; ++l) {
        const std::string s = std::to_string(l);
        const int merge = p.Find(*g, l + 1 < 3 ? "attn_in." + std::to_string(l + 1) : "out");
        CHECK(p.preds[merge].count(p.Find(*g, "dev_down." + s)) == 1);
        CHECK(p.preds[merge].count(p.Find(*g, "sffn_done." + s)) == 1);
        if (*c.ram) CHECK(kx::test::GraphPlan::Has(*g, "disk." + s));
      }
      if (!*c.ram) continue;
      // --tier-log's graph_gpu_ns column (written on each token's last layer line) sums to
      // the GPU tag. The engine closes its log when destroyed.
      const kx::DecodeGraphStats st = *graph->decode_graph_stats();
      graph.reset();
      const auto rows = ReadCsv(log);
      REQUIRE(rows.size() > 1);
      REQUIRE(rows[0].size() == 17);
      REQUIRE(rows[0][13] == "graph_gpu_ns");
      int64_t gpu = 0;
      for (size_t r = 1; r < rows.size(); ++r) {
        REQUIRE(rows[r].size() == 17);
        if (!rows[r][13].empty()) gpu += std::stoll(rows[r][13]);
      }
      CHECK(gpu == st.wait_ns[Tag::kGpu]);
      CHECK(gpu > 0);
    }
  }
}

TEST_CASE("graph decode with device layers: slow copies stall on H2D, early signals are caught",
          "[device_layers_graph]") {
  // Copies of 2 ms: each device step (3 layers and the head per token) uploads and downloads
  // once, so every token waits at least 8 copies' latency, charged to H2D critical.
  REQUIRE(::setenv("KAIROX_DEVICE_PROFILE", SlowProfiles(2000).c_str(), 1) == 0);
  const auto forced = kx::test::RandomTokens(74, 3);
  auto pool = kx::test::LoadEngine(DenseModel("llama"), Pool(Options(2, -1)));
  const auto want = kx::test::TeacherForced(*pool, {}, forced);
  for (bool early : {false, true}) {
    INFO((early ? "externals signalled early" : "externals signalled by the events"));
    kx::EngineOptions o = Options(2, -1);
    o.debug_graph_signal_early = early;
    auto e = kx::test::LoadEngine(DenseModel("llama"), o);
    const auto got = kx::test::TeacherForced(*e, {}, forced);
    CHECK(SameBytes(got, want));  // EndStep's own wait still guards x and the logits
    const kx::DecodeGraphStats* st = e->decode_graph_stats();
    REQUIRE(st != nullptr);
    INFO("graph: wall " << st->wall_ns << " gpu " << st->wait_ns[Tag::kGpu] << " h2d "
                        << st->wait_ns[Tag::kH2dCritical]);
    if (early) {
      CHECK(st->early_signals > 0);
    } else {
      CHECK(st->early_signals == 0);
      CHECK(st->wait_ns[Tag::kH2dCritical] > 8 * 2'000'000LL * static_cast<int64_t>(forced.size()));
    }
  }
  ::unsetenv("KAIROX_DEVICE_PROFILE");
}

TEST_CASE("graph decode with device layers: a wrong device output fails the comparison",
          "[device_layers_graph]") {
  // The negative control of the byte comparison: with 2 ms copies, the second token's first
  // device layer skips its compute stream's wait for the hidden state's upload, so its
  // kernels read the previous step's x (stale, finite). Waits are counted from 0 in call
  // order (sim_device.h): #0 and #1 at load (DeviceLayers::Upload), then per device step
  // 6 — BeginAttentionBlock/BeginHead's two stream waits, the watcher's three
  // EventSynchronize, EndStep's one —, 4 steps a token (3 layers, the head): the second
  // token's first wait is #26. The first token is still exact.
  REQUIRE(::setenv("KAIROX_DEVICE_PROFILE", SlowProfiles(2000).c_str(), 1) == 0);
  const auto forced = kx::test::RandomTokens(75, 3);
  auto pool = kx::test::LoadEngine(DenseModel("llama"), Pool(Options(2, -1)));
  const auto want = kx::test::TeacherForced(*pool, {}, forced);
  kx::EngineOptions o = Options(2, -1);
  o.debug_skip_event_wait = 26;
  auto broken = kx::test::LoadEngine(DenseModel("llama"), o);
  ::unsetenv("KAIROX_DEVICE_PROFILE");
  bool differs = false;
  for (size_t i = 0; i < forced.size(); ++i) {
    const absl::Status st = broken->Eval(std::span<const int32_t>(&forced[i], 1));
    INFO("token " << i << ": " << st.message());
    REQUIRE(st.ok());  // stale values are finite: only the comparison can tell
    const std::vector<std::vector<float>> got{{broken->Logits().begin(), broken->Logits().end()}};
    const bool same = SameBytes(got, {want[i]});
    if (i == 0) CHECK(same);  // before the skipped wait
    if (!same) differs = true;
  }
  CHECK(differs);
}

TEST_CASE("graph decode with device layers: a device fault reaches Eval's status",
          "[device_layers_graph]") {
  // EngineOptions::debug_device_layer_fault: the N-th device step's attention (or head)
  // kernel writes outside device memory; the sim device fails on its stream (sticky). The
  // graph must still end (its externals are signalled on the failed waits), Eval must return
  // the device's error at that token, and every later Eval too.
  struct Case {
    const char* what;
    bool sparse;
    const char* ram;
    int ngl;
    int64_t step;
    size_t token;    // the token whose Eval fails
    const char* op;  // the kernel that faults
  };
  // Steps per token: 4 with -ngl all (3 layers, the head), 2 with -ngl 1.
  for (const Case& c :
       {Case{"second token, layer 1", false, "", -1, 5, 1, "attention_decode: dst"},
        Case{"first token, the head", false, "", -1, 3, 0, "matvec: y"},
        Case{"split FFN, third token, layer 0", true, "", 1, 4, 2, "attention_decode: dst"},
        Case{"three tiers, second token, the head", true, "50%", 1, 3, 1, "matvec: y"},
        Case{"three tiers, first token, the head", true, "50%", 1, 1, 0, "matvec: y"}}) {
    for (bool on_graph : {true, false}) {
      DYNAMIC_SECTION(c.what << (on_graph ? " (graph)" : " (pool)")) {
        kx::EngineOptions o = Options(2, c.ngl);
        o.debug_device_layer_fault = c.step;
        std::string model = DenseModel("llama");
        if (c.sparse) {
          model = SparseModel().model;
          o.sidecar = SparseModel().sidecar;
          o.sparsity = -1.0f;
          o.vram_ffn = "50%";
          o.device_policy = "static";
          o.ram_budget = c.ram;
        }
        if (!on_graph) o = Pool(o);
        auto e = kx::test::LoadEngine(model, o);
        const auto tokens = kx::test::RandomTokens(76, 4);
        for (size_t i = 0; i < tokens.size(); ++i) {
          const absl::Status st = e->Eval(std::span<const int32_t>(&tokens[i], 1));
          INFO("token " << i << ": " << st.message());
          if (i < c.token) {
            CHECK(st.ok());
            continue;
          }
          REQUIRE(!st.ok());
          const std::string msg(st.message());
          CHECK(msg.find("device sim") != std::string::npos);
          CHECK(msg.find(c.op) != std::string::npos);
          CHECK(msg.find("is not inside live device memory") != std::string::npos);
        }
      }
    }
  }
}
