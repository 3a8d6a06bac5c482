// The sliding-window ring KV cache (EngineOptions::kv_ring, engine_impl.h kv_slots) against
// the full cache on a writer-made tiny gemma3 model (layers 0-4 local with a 5-position
// window, layer 5 global): the same logits bit for bit through prompt batches that cross
// the ring's end and decode past it, on both executors, 1 and 2 threads, F16 and Q8_0;
// fewer KV bytes held; a short rewind kept, a rewind past what the rings hold clearing the
// cache (n_past() 0) rather than reading overwritten slots. About 0.2 s.
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "kernels/cpu/kernels.h"
#include "model/llama.h"
#include "test_util.h"

namespace {

using Executor = kx::EngineOptions::Executor;
using KvType = kx::EngineOptions::KvType;

constexpr int kWindow = 5;  // ArchGoldenSpec("gemma3")'s sliding window
constexpr int kBatch = 4;   // small batches: the ring is kWindow + kBatch = 9 slots
constexpr int kCtx = 64;

const std::string& TinyGemma() {
  static const std::string path = [] {
    const std::string dir = kx::test::TempDir("kv_ring");
    kx::test::TinyModelSpec s = kx::test::ArchGoldenSpec("gemma3");
    s.n_layer = 6;  // layers 0-4 local, layer 5 global (every sixth)
    s.n_ff = 256;
    s.seed = 78;
    const std::string model = dir + "/gemma3.gguf";
    const absl::Status st = kx::test::WriteTinyModel(model, s, nullptr);
    if (!st.ok()) FAIL(st.message());
    return model;
  }();
  return path;
}

std::unique_ptr<kx::Engine> Load(bool ring, Executor exec, int threads, KvType kv,
                                 bool k_blocked = true) {
  kx::EngineOptions o;
  o.n_threads = threads;
  o.n_ctx = kCtx;
  o.n_batch = kBatch;
  o.executor = exec;
  o.sparse = false;
  o.kv_type = kv;
  o.kv_ring = ring;
  o.kv_k_blocked = k_blocked;
  auto e = kx::Engine::Load(TinyGemma(), o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  REQUIRE((*e)->hparams().sliding_window == kWindow);
  return std::move(*e);
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() ||
        std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("ring KV: the logits of the full cache, bit for bit, with fewer bytes") {
  // A 23-token prompt (batches of 4 wrapping the 9-slot ring twice), then 20 decode tokens.
  const auto prompt = kx::test::RandomTokens(31, 23), forced = kx::test::RandomTokens(32, 20);
  for (KvType kv : {KvType::kF16, KvType::kQ8_0}) {
    for (Executor exec : {Executor::kPool, Executor::kGraph}) {
      for (int threads : {1, 2}) {
        INFO((kv == KvType::kF16 ? "f16" : "q8_0")
             << (exec == Executor::kPool ? " pool" : " graph") << ", " << threads << " thread(s)");
        auto full = Load(false, exec, threads, kv);
        auto ring = Load(true, exec, threads, kv);
        // K and V of one position of one layer; five of the six layers hold 9 positions.
        const uint64_t row = full->KvCacheBytes() / (6 * kCtx);
        CHECK(full->KvCacheBytes() == row * 6 * kCtx);
        // F16 keys are stored in whole blocks of kx::cpu::kAttnKeyBlock positions per head
        // (engine_impl.h kv_k_blocked): a 9-slot ring takes 16 slots there.
        const uint64_t ring_slots = kv == KvType::kF16
                                        ? (kWindow + kBatch + kx::cpu::kAttnKeyBlock - 1) /
                                              kx::cpu::kAttnKeyBlock * kx::cpu::kAttnKeyBlock
                                        : kWindow + kBatch;
        CHECK(ring->KvCacheBytes() == row * (5 * ring_slots + kCtx));
        CHECK(ring->KvCacheBytes() < full->KvCacheBytes());
        const auto a = kx::test::TeacherForced(*full, prompt, forced);
        const auto b = kx::test::TeacherForced(*ring, prompt, forced);
        REQUIRE(a.size() == forced.size());
        CHECK(SameBits(a, b));
        // A local layer reads its window, not n_past, in either layout.
        REQUIRE(ring->n_past() == 43);
        CHECK(ring->KvBytesPerToken() == row * (5 * kWindow + 43));
        CHECK(full->KvBytesPerToken() == ring->KvBytesPerToken());
      }
    }
  }
}

TEST_CASE("ring KV: a short rewind is kept, a long one clears the cache") {
  const auto tokens = kx::test::RandomTokens(41, 40);
  const std::span<const int32_t> all(tokens);
  auto full = Load(false, Executor::kGraph, 2, KvType::kF16);
  auto ring = Load(true, Executor::kGraph, 2, KvType::kF16);
  for (auto* e : {full.get(), ring.get()}) REQUIRE(e->Eval(all.first(30)).ok());

  // Back 4 tokens (one batch): the ring still holds the window of position 26.
  full->TruncateKv(26);
  ring->TruncateKv(26);
  CHECK(ring->n_past() == 26);
  for (auto* e : {full.get(), ring.get()}) REQUIRE(e->Eval(all.subspan(26, 6)).ok());
  {
    const auto a = full->Logits(), b = ring->Logits();
    CHECK(std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
  }

  // Back 20 tokens: positions 12.. of the local layers were overwritten. The ring engine
  // clears rather than attend over them; evaluated again from 0 it agrees.
  full->TruncateKv(12);
  ring->TruncateKv(12);
  CHECK(full->n_past() == 12);
  CHECK(ring->n_past() == 0);
  REQUIRE(ring->Eval(all.first(12)).ok());
  for (auto* e : {full.get(), ring.get()}) REQUIRE(e->Eval(all.subspan(12, 10)).ok());
  {
    const auto a = full->Logits(), b = ring->Logits();
    CHECK(std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
  }
}

// F16 keys in blocks (engine_impl.h kv_k_blocked, the default) against keys in rows: the same
// logits bit for bit, with and without the ring (whose runs start and wrap inside blocks), on
// both executors, prompt batches and decode.
TEST_CASE("blocked K cache: the logits of the row layout, bit for bit") {
  const auto prompt = kx::test::RandomTokens(33, 23), forced = kx::test::RandomTokens(34, 20);
  for (bool ring : {false, true}) {
    for (Executor exec : {Executor::kPool, Executor::kGraph}) {
      for (int threads : {1, 2}) {
        INFO((ring ? "ring" : "full")
             << (exec == Executor::kPool ? " pool" : " graph") << ", " << threads << " thread(s)");
        auto rows = Load(ring, exec, threads, KvType::kF16, false);
        auto blocked = Load(ring, exec, threads, KvType::kF16, true);
        const auto a = kx::test::TeacherForced(*rows, prompt, forced);
        const auto b = kx::test::TeacherForced(*blocked, prompt, forced);
        REQUIRE(a.size() == forced.size());
        CHECK(SameBits(a, b));
      }
    }
  }
}
