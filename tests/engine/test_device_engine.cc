// The model's non-FFN part on the sim device (engine/device_layers.h) against the CPU path:
// teacher-forced logits bit for bit (the sim device's ops are the CPU engine's arithmetic) and
// identical greedy text, on writer-made llama (Q4_1, Q8_0 tied head), qwen2 (QKV biases,
// NeoX RoPE) and gemma3 (QK-norm, post norms, sliding-window layers) models, for every -ngl,
// partial VRAM budgets, both KV cache types and with a sidecar; the placement rule; the
// flags' errors; and the negative control — skipping the wait for the hidden state's upload
// must change the logits.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/memory_budget.h"
#include "catch2/catch.hpp"
#include "engine/device_layers.h"
#include "engine/engine.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "model/model.h"
#include "test_util.h"

namespace {

std::string TempDir() { return kx::test::TempDir("device_engine"); }

kx::test::TinyModelSpec Spec(const std::string& arch) {
  if (arch == "gemma3") {
    kx::test::TinyModelSpec s = kx::test::ArchGoldenSpec("gemma3");
    s.n_layer = 3;  // local, local, global (window 5 in the arch spec)
    s.seed = 91;
    return s;
  }
  if (arch == "qwen2") {
    kx::test::TinyModelSpec s = kx::test::ArchGoldenSpec("qwen2");
    s.n_layer = 3;
    s.seed = 92;
    return s;
  }
  kx::test::TinyModelSpec s;  // llama: Q4_1 matrices, Q8_0 tied embeddings / LM head
  s.n_layer = 3;
  s.seed = 93;
  if (arch == "llama-hd32") {  // heads of 32: whole Q8_0 blocks, for the Q8_0 KV cache
    s.n_embd = 128;
    s.seed = 94;
  }
  return s;
}

const std::string& TinyModel(const std::string& arch) {
  static std::map<std::string, std::string> cache;
  std::string& path = cache[arch];
  if (path.empty()) {
    path = TempDir() + "/" + arch + ".gguf";
    const absl::Status st = kx::test::WriteTinyModel(path, Spec(arch), nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
  }
  return path;
}

// Prefill batches of 4 tokens on both sides: the device computes its layers token by token
// (matvec), and the CPU's prefill matmul of 8 or more columns (kernels/cpu/kquant_gemm.h,
// legacy_gemm.h: every quantized type of these models) sums in another order than matvec,
// while fewer columns take the tiles that equal matvec bit for bit (test_device_model.cc does
// the same). The 9-token prompt still goes in several batches, one of them partial.
constexpr int kBatch = 4;

kx::EngineOptions CpuOptions() {
  kx::EngineOptions o;
  o.n_threads = 2;
  o.n_ctx = 64;
  o.n_batch = kBatch;
  o.device = "cpu";
  return o;
}

kx::EngineOptions SimOptions(int n_gpu_layers, const std::string& vram_budget = "") {
  kx::EngineOptions o = CpuOptions();
  o.device = "sim";
  o.n_gpu_layers = n_gpu_layers;
  o.vram_budget = vram_budget;
  return o;
}

}  // namespace

TEST_CASE("device: the sim device's layers give the CPU path's logits bit for bit", "[device]") {
  const auto prompt = kx::test::RandomTokens(31, 9);
  const auto forced = kx::test::RandomTokens(32, 12);
  for (const std::string arch : {"llama", "qwen2", "gemma3", "llama-hd32"}) {
    for (const auto kv : {kx::EngineOptions::KvType::kF16, kx::EngineOptions::KvType::kQ8_0}) {
      // The Q8_0 cache needs heads of whole 32-value blocks: only llama-hd32 has them.
      if ((arch == "llama-hd32") != (kv == kx::EngineOptions::KvType::kQ8_0)) continue;
      kx::EngineOptions cpu_o = CpuOptions();
      cpu_o.kv_type = kv;
      auto cpu = kx::test::LoadEngine(TinyModel(arch), cpu_o);
      const auto want = kx::test::TeacherForced(*cpu, prompt, forced);
      REQUIRE(kx::test::AllFinite(want));
      for (int ngl : {0, 1, 2, -1}) {
        kx::EngineOptions o = SimOptions(ngl);
        o.kv_type = kv;
        auto sim = kx::test::LoadEngine(TinyModel(arch), o);
        INFO(arch << " kv " << (kv == kx::EngineOptions::KvType::kF16 ? "f16" : "q8_0") << " -ngl "
                  << ngl << " on " << sim->device_name());
        CHECK(sim->n_device_layers() == (ngl < 0 ? 3 : ngl));
        CHECK(sim->device_head() == (ngl != 0));
        const auto got = kx::test::TeacherForced(*sim, prompt, forced);
        CHECK(kx::test::AllFinite(got));  // no poisoned device byte reached a result
        CHECK(kx::test::MaxAbsDiff(got, want) == 0.0);
        // Accounting: what the device holds is within its budget, under named entries.
        const kx::MemoryBudget* vram = sim->vram_budget();
        REQUIRE(vram != nullptr);
        CHECK(vram->used() <= vram->limit());
        if (ngl != 0) {
          CHECK(vram->held("scratch") > 0);
          CHECK(vram->held("LM head") > 0);
        }
        CHECK((vram->held("KV cache") > 0) == (ngl != 0));
      }
    }
  }
}

TEST_CASE("device: a VRAM budget places the head first, then whole layers in order", "[device]") {
  const std::string& model_path = TinyModel("llama");
  auto model = kx::Model::Load(model_path, kx::ModelOptions{});
  REQUIRE(model.ok());
  const kx::LlamaHParams& hp = (*model)->hparams();
  const kx::LlamaWeights& w = (*model)->weights();
  const uint64_t kv_row = static_cast<uint64_t>(hp.kv_dim()) * 2;
  const kx::DevicePlacement all = kx::PlanDevicePlacement(hp, w, 64, kv_row, 1ull << 40, -1);
  REQUIRE(all.n_layers == hp.n_layer);
  REQUIRE(all.head);
  // Exactly the scratch, the head and one layer.
  const uint64_t one =
      all.scratch_bytes + all.head_bytes + all.layer_weight_bytes[0] + all.kv_bytes_per_layer;
  const kx::DevicePlacement p1 = kx::PlanDevicePlacement(hp, w, 64, kv_row, one, -1);
  CHECK(p1.head);
  CHECK(p1.n_layers == 1);
  const kx::DevicePlacement p0 = kx::PlanDevicePlacement(hp, w, 64, kv_row, one - 1, -1);
  CHECK(p0.head);
  CHECK(p0.n_layers == 0);
  const kx::DevicePlacement scratch_only =
      kx::PlanDevicePlacement(hp, w, 64, kv_row, all.scratch_bytes - 1, -1);
  CHECK(!scratch_only.head);
  CHECK(scratch_only.n_layers == 0);
  CHECK(kx::PlanDevicePlacement(hp, w, 64, kv_row, 1ull << 40, 2).n_layers == 2);
  const kx::DevicePlacement none = kx::PlanDevicePlacement(hp, w, 64, kv_row, 1ull << 40, 0);
  CHECK(none.n_layers == 0);
  CHECK(!none.head);

  // The same budgets through the engine: logits still equal the CPU's.
  const auto prompt = kx::test::RandomTokens(41, 7);
  const auto forced = kx::test::RandomTokens(42, 8);
  auto cpu = kx::test::LoadEngine(model_path, CpuOptions());
  const auto want = kx::test::TeacherForced(*cpu, prompt, forced);
  for (const uint64_t budget : {one, one - 1}) {
    auto sim = kx::test::LoadEngine(model_path, SimOptions(-1, std::to_string(budget)));
    INFO("budget " << budget);
    CHECK(sim->n_device_layers() == (budget == one ? 1 : 0));
    CHECK(sim->device_head());
    CHECK(sim->vram_budget()->used() <= budget);
    CHECK(kx::test::MaxAbsDiff(kx::test::TeacherForced(*sim, prompt, forced), want) == 0.0);
  }
  // A budget of 0 puts nothing on the device (and opens none).
  auto zero = kx::test::LoadEngine(model_path, SimOptions(-1, "0"));
  CHECK(zero->n_device_layers() == 0);
  CHECK(!zero->device_head());
}

TEST_CASE("device: greedy text on the sim device equals the CPU's", "[device]") {
  const auto prompt = kx::test::RandomTokens(51, 6);
  for (const std::string arch : {"llama", "gemma3"}) {
    auto cpu = kx::test::LoadEngine(TinyModel(arch), CpuOptions());
    auto sim = kx::test::LoadEngine(TinyModel(arch), SimOptions(-1));
    INFO(arch);
    CHECK(kx::test::Greedy(*sim, prompt, 40) == kx::test::Greedy(*cpu, prompt, 40));
  }
}

TEST_CASE("device: flags that cannot work are errors that say why", "[device]") {
  const std::string& model = TinyModel("llama");
  auto expect_error = [&](kx::EngineOptions o, const std::string& needle) {
    auto e = kx::Engine::Load(model, o);
    INFO("expected an error containing '" << needle << "'");
    REQUIRE(!e.ok());
    INFO(e.status().message());
    CHECK(std::string(e.status().message()).find(needle) != std::string::npos);
  };
  kx::EngineOptions o = CpuOptions();
  o.device = "tpu";
  expect_error(o, "cpu, cuda, sim, auto");
  o = SimOptions(-2);
  expect_error(o, "-ngl");
  o = SimOptions(-1, "lots");
  expect_error(o, "--vram-budget");
  o = CpuOptions();
  o.device = "cuda";  // no GPU on the machines that run the suite; on one that has it, skip
  auto e = kx::Engine::Load(model, o);
  if (e.ok()) {
    WARN("a usable CUDA device is present: the no-GPU error is not checked here");
  } else {
    CHECK(std::string(e.status().message()).find("CUDA") != std::string::npos);
  }
}

TEST_CASE("device: skipping the wait for the hidden state's upload changes the logits",
          "[device]") {
  // A profile whose copies take 20 ms: with the compute stream's wait for the upload skipped,
  // the layer reads the hidden state's buffer before the copy lands (poison, then stale
  // values), so the logits must differ from the CPU's. Waits are counted from 0 in call
  // order: the upload at load makes #0 (compute waits) and #1 (host waits); the first
  // token's first device layer then waits for its upload at #2.
  const std::string profiles = TempDir() + "/slow_profiles.json";
  std::ofstream(profiles) << R"({"default": "slow", "profiles": {"slow": {
      "description": "copies of 20 ms", "memory": "1GiB", "h2d_gb_per_s": 10.0,
      "d2h_gb_per_s": 10.0, "copy_latency_us": 20000.0, "device_gb_per_s": 100.0}}})";
  REQUIRE(::setenv("KAIROX_DEVICE_PROFILE", profiles.c_str(), 1) == 0);
  const auto prompt = kx::test::RandomTokens(61, 3);
  const auto forced = kx::test::RandomTokens(62, 2);
  auto cpu = kx::test::LoadEngine(TinyModel("llama"), CpuOptions());
  const auto want = kx::test::TeacherForced(*cpu, prompt, forced);
  {
    auto sim =
        kx::test::LoadEngine(TinyModel("llama"), SimOptions(-1));  // with every wait: still exact
    CHECK(kx::test::MaxAbsDiff(kx::test::TeacherForced(*sim, prompt, forced), want) == 0.0);
  }
  kx::EngineOptions o = SimOptions(-1);
  o.debug_skip_event_wait = 2;
  auto broken = kx::test::LoadEngine(TinyModel("llama"), o);
  const auto got = kx::test::TeacherForced(*broken, prompt, forced);
  ::unsetenv("KAIROX_DEVICE_PROFILE");
  const bool differs = !kx::test::AllFinite(got) || kx::test::MaxAbsDiff(got, want) > 0.0;
  CHECK(differs);
}
