// Decode on the per-token task graph (engine/decode_graph.h) against the
// pool path: teacher-forced logits bit for bit, on writer-made tiny llama
// (Q4_1: the fused sparse kernel where the CPU has it) and gemma3 (F32,
// post norms, q/k norms, local layers: the per-run sparse path) models,
// dense, sparse over a sidecar from the real prepare pipeline (bundles and
// masked-dense), and sparse under a RAM budget (bundles read by the tier),
// with 1 and 2 threads.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "prepare/prepare.h"
#include "test_util.h"

namespace {

using Executor = kx::EngineOptions::Executor;

std::string TempDir() {
  static const std::string dir = [] {
    std::string d = "/tmp/kx_test_decode_graph_" + std::to_string(::getpid());
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  return dir;
}

kx::test::TinyModelSpec Spec(const std::string& arch) {
  if (arch == "gemma3") {
    kx::test::TinyModelSpec s = kx::test::ArchGoldenSpec("gemma3");
    s.n_layer = 3;  // layers 0-1 local (window 5), layer 2 global
    s.n_ff = 256;
    s.seed = 77;
    return s;
  }
  kx::test::TinyModelSpec s;
  s.n_layer = 3;
  s.n_embd = 64;
  s.n_ff = 256;
  s.seed = 55;  // Q4_1 weights, Q8_0 tied head
  return s;
}

// Per arch: the model, written once, and its sidecar (s = 0.5; llama: down
// blocks, groups of 32; gemma3: down_t rows, groups of 16), prepared the
// first time a sparse test needs it.
struct Prepared {
  std::string model, sidecar;
};

const Prepared& Tiny(const std::string& arch, bool with_sidecar) {
  static std::map<std::string, Prepared> cache;
  Prepared& r = cache[arch];
  if (r.model.empty()) {
    const std::string model = TempDir() + "/" + arch + ".gguf";
    auto st = kx::test::WriteTinyModel(model, Spec(arch), nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
    r.model = model;
  }
  if (with_sidecar && r.sidecar.empty()) {
    kx::PrepareOptions o;
    o.model_path = r.model;
    o.sidecar_path = TempDir() + "/" + arch + ".kairox.gguf";
    o.sparsity = 0.5f;
    o.levels = {0.0f, 0.5f};
    // Both bundle layouts run on the graph: llama's sidecar keeps the model's
    // own down blocks (the default for its Q4_1), gemma3's has down_t rows.
    o.down_layout = arch == "llama" ? kx::PrepareOptions::DownLayoutChoice::kBlocks
                                    : kx::PrepareOptions::DownLayoutChoice::kRows;
    o.group_size = 16;
    o.n_threads = 2;
    o.calibration.token_budget = 400;
    o.calibration.max_new_tokens = 32;
    o.predictor.ranks = {16};
    o.predictor.max_rank = 16;
    o.predictor.train.epochs = 2;
    auto rep = kx::Prepare(o);
    INFO(rep.status().message());
    REQUIRE(rep.ok());
    r.sidecar = o.sidecar_path;
  }
  return r;
}

enum class Mode { kDense, kSparse, kMaskedDense, kTiered };

std::unique_ptr<kx::Engine> Load(const std::string& arch, Mode mode, Executor exec, int threads) {
  kx::EngineOptions o;
  o.n_threads = threads;
  o.n_ctx = 64;
  o.executor = exec;
  if (mode == Mode::kDense) {
    o.sparse = false;
  } else {
    o.sidecar = Tiny(arch, true).sidecar;
    if (mode == Mode::kTiered) o.ram_budget = "25%";
    o.masked_dense = mode == Mode::kMaskedDense;  // dense kernels, the runtime masks
  }
  auto e = kx::Engine::Load(Tiny(arch, false).model, o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  return std::move(*e);
}

// A 4-token prompt in one Eval (a batch: the pool path on both engines,
// except under a tier, which evaluates it token by token), then
// teacher-forced single tokens (decode: the executor under test). The
// logits after the prompt and after every decode token.
std::vector<std::vector<float>> Run(kx::Engine& e, const std::vector<int32_t>& tokens) {
  constexpr size_t kPrompt = 4;
  std::vector<std::vector<float>> out;
  absl::Status st = e.Eval(std::span<const int32_t>(tokens.data(), kPrompt));
  INFO(st.message());
  REQUIRE(st.ok());
  out.emplace_back(e.Logits().begin(), e.Logits().end());
  for (size_t i = kPrompt; i < tokens.size(); ++i) {
    st = e.Eval(std::span<const int32_t>(&tokens[i], 1));
    INFO(st.message());
    REQUIRE(st.ok());
    out.emplace_back(e.Logits().begin(), e.Logits().end());
  }
  return out;
}

void CheckSame(const std::string& arch, Mode mode, int threads) {
  INFO(arch << (mode == Mode::kDense         ? " dense"
                : mode == Mode::kSparse      ? " sparse"
                : mode == Mode::kMaskedDense ? " masked-dense"
                                             : " tiered")
            << ", " << threads << " thread(s)");
  // 20 tokens: past gemma3's 5-position window on its local layers.
  const auto tokens = kx::test::RandomTokens(1000 + threads, 20);
  auto pool = Load(arch, mode, Executor::kPool, threads);
  auto graph = Load(arch, mode, Executor::kGraph, threads);
  if (mode != Mode::kDense) {
    REQUIRE(pool->sparse() != nullptr);
    REQUIRE(graph->sparse() != nullptr);
    REQUIRE((graph->sparse()->tier() != nullptr) == (mode == Mode::kTiered));
  }
  const auto a = Run(*pool, tokens);
  const auto b = Run(*graph, tokens);
  // The graph really ran the decode tokens (and the pool engine never built one).
  CHECK(pool->DecodeGraphParts() == 0);
  CHECK(graph->DecodeGraphParts() > 0);
  REQUIRE(a.size() == b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    INFO("step " << t);
    REQUIRE(a[t].size() == b[t].size());
    bool finite = true;
    for (float x : b[t]) finite &= std::isfinite(x);
    CHECK(finite);
    CHECK(std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) == 0);
  }
  if (mode != Mode::kDense) {
    // The same neurons were predicted and kept, layer by layer.
    CHECK(pool->sparse()->stats().predicted == graph->sparse()->stats().predicted);
    CHECK(pool->sparse()->stats().kept == graph->sparse()->stats().kept);
    CHECK(graph->sparse()->stats().layer_tokens > 0);
  }
}

}  // namespace

TEST_CASE("graph decode equals pool decode: llama, dense") {
  for (int threads : {1, 2}) CheckSame("llama", Mode::kDense, threads);
}

TEST_CASE("graph decode equals pool decode: gemma3, dense") {
  for (int threads : {1, 2}) CheckSame("gemma3", Mode::kDense, threads);
}

TEST_CASE("graph decode equals pool decode: llama, sparse over bundles") {
  for (int threads : {1, 2}) CheckSame("llama", Mode::kSparse, threads);
}

TEST_CASE("graph decode equals pool decode: gemma3, sparse over bundles") {
  for (int threads : {1, 2}) CheckSame("gemma3", Mode::kSparse, threads);
}

TEST_CASE("graph decode equals pool decode: llama and gemma3, sparse masked-dense") {
  for (int threads : {1, 2}) {
    CheckSame("llama", Mode::kMaskedDense, threads);
    CheckSame("gemma3", Mode::kMaskedDense, threads);
  }
}

TEST_CASE("graph decode equals pool decode: llama, sparse under a 25% RAM budget") {
  for (int threads : {1, 2}) CheckSame("llama", Mode::kTiered, threads);
}

TEST_CASE("graph decode equals pool decode: gemma3, sparse under a 25% RAM budget") {
  for (int threads : {1, 2}) CheckSame("gemma3", Mode::kTiered, threads);
}

TEST_CASE("graph decode keeps the per-op profile") {
  auto e = Load("llama", Mode::kSparse, Executor::kGraph, 2);
  const auto tokens = kx::test::RandomTokens(7, 10);
  Run(*e, tokens);
  const kx::OpProfile& p = e->profile();
  for (const char* op : {"qkv", "attention", "attn_out", "ffn_sparse", "predict", "lm_head"}) {
    INFO(op);
    bool found = false;
    for (const auto& entry : p.entries) {
      if (std::strcmp(entry.name, op) == 0) {
        found = true;
        CHECK(entry.ns > 0);
        CHECK(entry.calls > 0);
      }
    }
    CHECK(found);
  }
}
