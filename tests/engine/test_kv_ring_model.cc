// The sliding-window ring KV cache (EngineOptions::kv_ring) on Gemma 3 270M (15 of its 18
// layers local, window 512): a prompt longer than the ring (window + n_batch = 576 slots)
// evaluated in batches, then greedy decoding; every logit of the ring engine equals the full
// cache's bit for bit, and the ring holds fewer KV bytes. Skipped (exit 77) without the model
// (cmake/fetch_model.sh gemma3). About 5 s on 2 cores; KAIROX_RING_LONG=1 runs the longer
// check (a 700-token prompt, decoding to position 1040).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "model/llama.h"
#include "model/model.h"
#include "test_util.h"

namespace {

std::string Gemma3Path() {
  const std::string fallback =
      kx::test::EnvOr("HOME", "/root") + "/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf";
  return kx::test::EnvOr("KAIROX_GEMMA3_MODEL", fallback);
}

int Argmax(std::span<const float> v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

TEST_CASE("Gemma 3 with the ring KV cache gives the full cache's logits", "[engine][kv][model]") {
  const std::string path = Gemma3Path();
  if (::access(path.c_str(), R_OK) != 0) {
    kx::test::Skip("Gemma 3 270M not found at " + path + " (cmake/fetch_model.sh gemma3)");
  }
  const bool long_run = kx::test::EnvOr("KAIROX_RING_LONG", "0") == "1";
  const int n_prompt = long_run ? 700 : 600, n_end = long_run ? 1040 : 640;
  auto model = kx::Model::Load(path);
  INFO(model.status().message());
  REQUIRE(model.ok());
  std::shared_ptr<const kx::Model> shared = std::move(*model);
  std::unique_ptr<kx::Engine> engines[2];
  for (int ring = 0; ring < 2; ++ring) {
    kx::EngineOptions o;
    o.n_threads = 2;
    o.n_ctx = 2048;
    o.sparse = false;
    o.kv_ring = ring == 1;
    auto e = kx::Engine::Create(shared, o);
    INFO(e.status().message());
    REQUIRE(e.ok());
    engines[ring] = std::move(*e);
  }
  kx::Engine& full = *engines[0];
  kx::Engine& ring = *engines[1];
  const kx::LlamaHParams& hp = ring.hparams();
  REQUIRE(hp.sliding_window == 512);
  int n_local = 0;
  for (int l = 0; l < hp.n_layer; ++l) n_local += hp.IsLocalLayer(l) ? 1 : 0;
  REQUIRE(n_local == 15);
  // Per layer K and V of n_ctx positions, or of the 576-slot ring.
  const uint64_t row = full.KvCacheBytes() / (uint64_t{2048} * hp.n_layer);
  CHECK(full.KvCacheBytes() == row * 2048 * hp.n_layer);
  CHECK(ring.KvCacheBytes() == row * (576 * n_local + 2048 * (hp.n_layer - n_local)));

  auto rng = kx::test::SeededRng(2027);
  std::vector<int32_t> prompt(n_prompt);
  for (auto& t : prompt) t = static_cast<int32_t>(1000 + rng() % 20000);
  for (kx::Engine* e : {&full, &ring}) {
    const absl::Status st = e->Eval(prompt);
    INFO(st.message());
    REQUIRE(st.ok());
  }
  int differing = 0;
  for (int pos = n_prompt; pos < n_end; ++pos) {
    const auto a = full.Logits(), b = ring.Logits();
    REQUIRE(a.size() == b.size());
    differing += std::memcmp(a.data(), b.data(), a.size_bytes()) != 0 ? 1 : 0;
    const int32_t next = Argmax(b);
    REQUIRE(Argmax(a) == next);
    for (kx::Engine* e : {&full, &ring}) REQUIRE(e->Eval({&next, 1}).ok());
  }
  CHECK(differing == 0);
  CHECK(ring.n_past() == n_end);
  CHECK(ring.KvBytesPerToken() == full.KvBytesPerToken());
}
