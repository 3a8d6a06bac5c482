// The real models with their non-FFN part on the sim device, against the CPU path: the default
// model (SmolLM2-135M, Q4_1, Q8_0 tied head) and, when it is cached, Gemma 3 270M (Q4_K_M,
// sliding-window layers, QK-norm, post norms). A sim profile whose memory is exactly what the
// whole model needs on the device makes the VRAM budgets 25 %, 50 % and 100 % mean a quarter,
// half and all of it; budget 0 and -ngl 0 / 10 / all too. Teacher-forced logits must equal the
// CPU path's bit for bit (the sim device's ops are the CPU's arithmetic; the golden tests bound
// the CPU path), no poisoned byte may reach them, and greedy text over 64 tokens must be the
// CPU's.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/device_layers.h"
#include "engine/engine.h"
#include "engine/teacher_forced.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "test_util.h"

namespace {

constexpr int kCtx = 256;
constexpr int kForced = 12;
constexpr int kGreedy = 64;

std::string Gemma3Path() {
  const std::string fallback =
      kx::test::EnvOr("HOME", "/root") + "/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf";
  return kx::test::EnvOr("KAIROX_GEMMA3_MODEL", fallback);
}

// Prefill batches of 4 tokens on both sides: the device computes its layers' attention block
// token by token (matvec), and the CPU's K-quant prefill matmul of 8 or more columns
// (kernels/cpu/kquant_gemm.h) sums in another order than matvec, while fewer columns take the
// tiles that equal matvec bit for bit. Batches of 4 still send the device layers several
// tokens at once.
constexpr int kBatch = 4;

kx::EngineOptions Options(const std::string& device) {
  kx::EngineOptions o;
  o.n_threads = 2;
  o.n_ctx = kCtx;
  o.n_batch = kBatch;
  o.device = device;
  return o;
}

// A sim profile file whose device memory is `bytes`, made the profiles in effect.
void UseProfileWithMemory(uint64_t bytes) {
  const std::string path = "/tmp/kx_test_device_model_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"default": "exact", "profiles": {"exact": {
      "description": "memory = the whole model's device bytes", "memory": ")"
                      << bytes << R"(", "h2d_gb_per_s": 24.0, "d2h_gb_per_s": 24.0,
      "copy_latency_us": 10.0, "device_gb_per_s": 1000.0}}})";
  REQUIRE(::setenv("KAIROX_DEVICE_PROFILE", path.c_str(), 1) == 0);
}

void CheckModel(const std::string& path) {
  auto cpu = kx::test::LoadEngine(path, Options("cpu"));
  const kx::Tokenizer& tok = cpu->tokenizer();
  const std::vector<int32_t> prompt =
      tok.Encode("The quick brown fox jumps over the lazy dog. Once upon a time,", true, false);
  const std::vector<int32_t> forced =
      tok.Encode(" there lived a king who had three daughters, a garden of roses and a tall tower", false, false);
  REQUIRE(forced.size() >= static_cast<size_t>(kForced));
  const std::vector<int32_t> forced_n(forced.begin(), forced.begin() + kForced);
  const auto want = kx::test::TeacherForced(*cpu, prompt, forced_n);
  REQUIRE(kx::test::AllFinite(want));

  // Everything the model can put on the device, at this context: the profile's memory.
  const kx::LlamaHParams& hp = cpu->hparams();
  const kx::DevicePlacement all = kx::PlanDevicePlacement(
      hp, cpu->model()->weights(), kCtx, static_cast<uint64_t>(hp.kv_dim()) * 2, 1ull << 50, -1);
  uint64_t total = all.scratch_bytes + all.head_bytes;
  for (uint64_t b : all.layer_weight_bytes) total += b + all.kv_bytes_per_layer;
  UseProfileWithMemory(total);

  struct Config {
    std::string budget;
    int ngl;
  };
  const Config configs[] = {{"0", -1},  {"25%", -1}, {"50%", -1}, {"100%", -1},
                            {"100%", 0}, {"100%", 10}};
  uint64_t previous_used = 0;
  for (const Config& c : configs) {
    kx::EngineOptions o = Options("sim");
    o.vram_budget = c.budget;
    o.n_gpu_layers = c.ngl;
    auto sim = kx::test::LoadEngine(path, o);
    const uint64_t used = sim->vram_budget() ? sim->vram_budget()->used() : 0;
    INFO(path << ": --vram-budget " << c.budget << " -ngl " << c.ngl << " → "
              << sim->n_device_layers() << " layers, head " << sim->device_head() << ", "
              << used << " of " << total << " bytes");
    if (c.budget == "0") CHECK((sim->n_device_layers() == 0 && !sim->device_head()));
    if (c.ngl == -1) {  // more budget never places less; a budget holds what it placed
      CHECK(used >= previous_used);
      CHECK(used <= total);
      previous_used = used;
    }
    if (c.budget == "100%") {
      CHECK(sim->device_head() == (c.ngl != 0));
      CHECK(sim->n_device_layers() == (c.ngl < 0 ? hp.n_layer : std::min(c.ngl, hp.n_layer)));
    }
    const auto got = kx::test::TeacherForced(*sim, prompt, forced_n);
    CHECK(kx::test::AllFinite(got));
    CHECK(kx::test::MaxAbsDiff(got, want) == 0.0);
  }
  {
    kx::EngineOptions o = Options("sim");
    o.vram_budget = "50%";
    auto sim = kx::test::LoadEngine(path, o);
    auto cpu2 = kx::test::LoadEngine(path, Options("cpu"));
    CHECK(kx::test::Greedy(*sim, prompt, kGreedy) == kx::test::Greedy(*cpu2, prompt, kGreedy));
  }
  ::unsetenv("KAIROX_DEVICE_PROFILE");
}

}  // namespace

TEST_CASE("device: the default model on the sim device equals the CPU path", "[smollm2]") {
  CheckModel(kx::test::DefaultModelOrSkip());
}

TEST_CASE("device: Gemma 3 on the sim device equals the CPU path", "[gemma3]") {
  const std::string path = Gemma3Path();
  if (::access(path.c_str(), R_OK) != 0) {
    kx::test::Skip("Gemma 3 270M not found at " + path + " (cmake/fetch_model.sh gemma3)");
  }
  CheckModel(path);
}
