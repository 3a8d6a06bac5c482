// The Q8_0 KV cache (EngineOptions::KvType::kQ8_0) against the F16 one on a
// writer-made tiny llama model: same logits up to Q8_0's rounding of K and V.
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "test_util.h"

namespace {

using kx::EngineOptions;
using kx::test::TinyModelSpec;

// Q8_0 rounds each K/V element by ≤ d/2 (d = max|block|/127, ~0.4% of the
// block's largest value) against F16's 2^-11 relative; measured cosine vs
// F16 on this model is > 0.9999, so 0.999 leaves room yet catches any
// layout bug (wrong head offset or stride reads another head's keys).
constexpr double kMinCosine = 0.999;
constexpr int kPositions = 32;

double Cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// head_dim 32: the tiny default (64 / 4 = 16) is not whole Q8_0 blocks.
TinyModelSpec Spec32() {
  TinyModelSpec spec;
  spec.n_embd = 128;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 256;
  spec.seed = 4242;
  return spec;
}

struct TempModel {
  std::string path;
  explicit TempModel(const TinyModelSpec& spec, const std::string& tag)
      : path("/tmp/kx_test_kvq8_" + tag + "_" + std::to_string(::getpid()) + ".gguf") {
    auto st = kx::test::WriteTinyModel(path, spec, nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
  }
  ~TempModel() { ::unlink(path.c_str()); }
};

std::unique_ptr<kx::Engine> Open(const std::string& path, EngineOptions::KvType kv, int n_batch) {
  EngineOptions opts;
  opts.n_threads = 2;
  opts.n_batch = n_batch;
  opts.kv_type = kv;
  auto e = kx::Engine::Load(path, opts);
  INFO(e.status().message());
  REQUIRE(e.ok());
  return std::move(*e);
}

TEST_CASE("Q8_0 KV cache matches the F16 cache on a tiny model", "[engine][kv]") {
  const TinyModelSpec spec = Spec32();
  TempModel file(spec, "tiny");
  auto rng = kx::test::SeededRng(9090);
  std::vector<int32_t> tokens(kPositions);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 256);

  // Batches of 8: later batches attend to keys earlier ones quantized.
  auto f16 = Open(file.path, EngineOptions::KvType::kF16, 8);
  auto q8 = Open(file.path, EngineOptions::KvType::kQ8_0, 8);
  REQUIRE(f16->Eval(tokens, /*all_logits=*/true).ok());
  REQUIRE(q8->Eval(tokens, /*all_logits=*/true).ok());
  double worst = 1.0;
  bool identical = true;
  for (int i = 0; i < kPositions; ++i) {
    const auto a = f16->Logits(i), b = q8->Logits(i);
    REQUIRE(a.size() == b.size());
    const double cos = Cosine(a, b);
    worst = std::min(worst, cos);
    INFO("position " << i << " cosine " << cos);
    CHECK(cos >= kMinCosine);
    for (size_t j = 0; j < a.size(); ++j) identical = identical && a[j] == b[j];
  }
  WARN("tiny model: worst logits cosine Q8_0 vs F16 over " << kPositions
                                                           << " positions: " << worst);
  CHECK_FALSE(identical);  // the option must actually change the cache

  // Decode (one token per Eval) reads the same Q8_0 cache as prefill did.
  auto q8_decode = Open(file.path, EngineOptions::KvType::kQ8_0, 8);
  for (int i = 0; i < kPositions; ++i) {
    REQUIRE(q8_decode->Eval(std::span<const int32_t>(&tokens[i], 1)).ok());
    const double cos = Cosine(q8_decode->Logits(), f16->Logits(i));
    INFO("decode position " << i << " cosine " << cos);
    CHECK(cos >= kMinCosine);
  }

  // 34 bytes per 32 values against 64 for F16.
  REQUIRE(f16->n_past() == kPositions);
  REQUIRE(q8->KvBytesPerToken() * 64 == f16->KvBytesPerToken() * 34);
  const uint64_t kv_dim = static_cast<uint64_t>(spec.n_embd / spec.n_head * spec.n_head_kv);
  CHECK(f16->KvBytesPerToken() == 2ull * spec.n_layer * kv_dim * 2 * kPositions);
}

TEST_CASE("Q8_0 KV cache refuses a head_dim that is not whole blocks", "[engine][kv]") {
  TinyModelSpec spec;  // head_dim 16
  TempModel file(spec, "hd16");
  EngineOptions opts;
  opts.n_threads = 1;
  opts.kv_type = EngineOptions::KvType::kQ8_0;
  auto e = kx::Engine::Load(file.path, opts);
  REQUIRE_FALSE(e.ok());
  CHECK(std::string(e.status().message()).find("head_dim") != std::string::npos);
  opts.kv_type = EngineOptions::KvType::kF16;
  CHECK(kx::Engine::Load(file.path, opts).ok());
}

}  // namespace
