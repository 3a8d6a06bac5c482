// The dense forward pass on writer-made tiny llama models, against a float64
// reference forward written independently in tiny_model.cc.
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "model/model.h"
#include "test_util.h"

namespace {

using kx::test::TinyModelSpec;
using kx::test::TinyModelWeights;

std::string TempPath(const std::string& tag) {
  return "/tmp/kx_test_" + tag + "_" + std::to_string(::getpid()) + ".gguf";
}

double Cosine(std::span<const float> a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<int32_t> RandomTokens(uint64_t seed, int n) {
  auto rng = kx::test::SeededRng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 256);
  return t;
}

struct Loaded {
  std::string path;
  TinyModelWeights weights;
  std::unique_ptr<kx::Engine> engine;
  ~Loaded() { ::unlink(path.c_str()); }
};

std::unique_ptr<Loaded> Load(const TinyModelSpec& spec, const std::string& tag,
                             kx::EngineOptions opts = {}) {
  auto out = std::make_unique<Loaded>();
  out->path = TempPath(tag);
  auto st = kx::test::WriteTinyModel(out->path, spec, &out->weights);
  INFO(st.message());
  REQUIRE(st.ok());
  if (opts.n_threads == 0) opts.n_threads = 2;
  auto e = kx::Engine::Load(out->path, opts);
  INFO(e.status().message());
  REQUIRE(e.ok());
  out->engine = std::move(*e);
  return out;
}

// Q8 activations (|error| ≤ d/2 per element, d = max|x|/127) and the F16 KV
// cache (relative error 2^-11) perturb the logits by well under 1% of their
// norm on these shapes; 0.999 cosine leaves room and still fails on any
// structural bug (wrong RoPE pairing, GQA mapping, norm, or residual).
constexpr double kMinCosine = 0.999;

void CheckAgainstReference(const TinyModelSpec& spec, const std::string& tag) {
  auto m = Load(spec, tag);
  const auto tokens = RandomTokens(spec.seed + 7, 24);
  REQUIRE(m->engine->Eval(tokens, /*all_logits=*/true).ok());
  const auto ref = kx::test::ReferenceForward(spec, m->weights, tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto got = m->engine->Logits(static_cast<int>(i));
    REQUIRE(got.size() == ref[i].size());
    const double cos = Cosine(got, ref[i]);
    INFO("position " << i << " cosine " << cos);
    CHECK(cos >= kMinCosine);
  }
}

}  // namespace

TEST_CASE("dense forward matches the float64 reference (Q4_1 weights, Q8_0 tied head)") {
  TinyModelSpec spec;
  CheckAgainstReference(spec, "q41");
}

TEST_CASE("dense forward matches the reference for F16, BF16, F32, Q8_0 weights") {
  for (kx::GgmlType t :
       {kx::GgmlType::kF16, kx::GgmlType::kBF16, kx::GgmlType::kF32, kx::GgmlType::kQ8_0}) {
    TinyModelSpec spec;
    spec.weight_type = t;
    spec.embd_type = t == kx::GgmlType::kQ8_0 ? kx::GgmlType::kF16 : kx::GgmlType::kQ8_0;
    spec.tied_output = false;
    spec.seed = 99 + static_cast<uint64_t>(t);
    INFO("weight type " << kx::TypeName(t));
    CheckAgainstReference(spec, std::string("t") + kx::TypeName(t));
  }
}

// ReLU-family FFNs (the <arch>.feed_forward_activation key): ReGLU, FATReLU
// (t near the median positive gate value of these models, so about half the
// ReLU-active neurons are cut) and dReLU, each against the reference.
TEST_CASE("dense forward matches the reference for relu, fatrelu and drelu FFNs") {
  for (const char* act : {"relu", "fatrelu", "drelu"}) {
    TinyModelSpec spec;
    spec.ffn_act = act;
    spec.ffn_act_threshold = std::string(act) == "fatrelu" ? 0.5f : 0.0f;
    spec.seed = 4242;
    INFO("activation " << act);
    CheckAgainstReference(spec, std::string("act_") + act);
  }
}

// Issue 3's weight types. K-quant rows need n_in % 256 == 0, so these models
// are 256 wide (ff 512); the legacy types run at the default shapes too.
TEST_CASE("dense forward matches the reference for Q4_0, Q5_0, Q5_1 and K-quant weights") {
  for (kx::GgmlType t :
       {kx::GgmlType::kQ4_K, kx::GgmlType::kQ6_K, kx::GgmlType::kQ5_K, kx::GgmlType::kQ4_0,
        kx::GgmlType::kQ5_0, kx::GgmlType::kQ5_1, kx::GgmlType::kQ3_K, kx::GgmlType::kQ2_K}) {
    TinyModelSpec spec;
    spec.weight_type = t;
    spec.n_embd = 256;
    spec.n_ff = 512;
    spec.tied_output = false;
    spec.seed = 300 + static_cast<uint64_t>(t);
    INFO("weight type " << kx::TypeName(t));
    CheckAgainstReference(spec, std::string("t") + kx::TypeName(t));
  }
}

// A Q4_K_M-style mix: Q4_K matrices with a Q6_K tied embedding / LM head.
TEST_CASE("dense forward matches the reference with a Q6_K tied head over Q4_K") {
  TinyModelSpec spec;
  spec.weight_type = kx::GgmlType::kQ4_K;
  spec.embd_type = kx::GgmlType::kQ6_K;
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.seed = 77;
  CheckAgainstReference(spec, "q4km");
}

// Types outside the supported list are refused at load, naming the tensor
// and the type (lib/model/llama.cc via kx::cpu::IsSupportedWeightType).
TEST_CASE("a model with an unsupported weight type is refused by name") {
  for (kx::GgmlType t : {kx::GgmlType::kIQ4_NL, kx::GgmlType::kTQ1_0}) {
    TinyModelSpec spec;
    spec.weight_type = t;
    spec.n_embd = 256;
    spec.n_ff = 512;
    INFO("weight type " << kx::TypeName(t));
    const std::string path = TempPath(std::string("unsup") + kx::TypeName(t));
    REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
    kx::EngineOptions opts;
    opts.n_threads = 1;
    auto e = kx::Engine::Load(path, opts);
    ::unlink(path.c_str());
    REQUIRE_FALSE(e.ok());
    const std::string msg(e.status().message());
    INFO(msg);
    CHECK(msg.find("blk.0.attn_q.weight") != std::string::npos);
    CHECK(msg.find(kx::TypeName(t)) != std::string::npos);
  }
}

// Qwen2: F32 Q/K/V biases after the projections and NeoX-style RoPE (the
// reference rotates (x_i, x_{i+hd/2}) for arch "qwen2"; adjacent pairs
// give cosines of 0.88-0.98 from position 1 on).
TEST_CASE("qwen2 models (Q/K/V biases, NeoX RoPE) match the float64 reference") {
  TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.qkv_bias = true;
  spec.rope_freq_base = 1000000.0f;
  spec.rms_eps = 1e-6f;
  spec.seed = 4242;
  SECTION("Q4_1 weights, Q8_0 tied head") { CheckAgainstReference(spec, "qwen2q41"); }
  SECTION("F16 weights, separate Q8_0 head, no GQA, 3 layers") {
    spec.weight_type = kx::GgmlType::kF16;
    spec.n_head_kv = spec.n_head;
    spec.n_layer = 3;
    spec.tied_output = false;
    CheckAgainstReference(spec, "qwen2f16");
  }
}

TEST_CASE("a llama file that carries Q/K/V biases has them added") {
  TinyModelSpec spec;
  spec.qkv_bias = true;
  spec.seed = 5151;
  CheckAgainstReference(spec, "llamabias");
}

TEST_CASE("a qwen2 model without its attention biases is refused naming the tensor") {
  TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.qkv_bias = false;
  const std::string path = TempPath("qwen2nobias");
  REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
  auto e = kx::Engine::Load(path, {});
  ::unlink(path.c_str());
  REQUIRE_FALSE(e.ok());
  INFO(e.status().message());
  CHECK(std::string(e.status().message()).find("blk.0.attn_q.bias") != std::string::npos);
}

TEST_CASE("multi-head attention without GQA and a different RoPE base") {
  TinyModelSpec spec;
  spec.n_head = 2;
  spec.n_head_kv = 2;
  spec.rope_freq_base = 500.0f;
  spec.n_layer = 3;
  CheckAgainstReference(spec, "mha");
}

TEST_CASE("logits are bit-identical with 1 and 2 threads") {
  TinyModelSpec spec;
  kx::EngineOptions one;
  one.n_threads = 1;
  kx::EngineOptions two;
  two.n_threads = 2;
  auto a = Load(spec, "t1", one);
  auto b = Load(spec, "t2", two);
  const auto tokens = RandomTokens(5, 20);
  REQUIRE(a->engine->Eval(tokens, true).ok());
  REQUIRE(b->engine->Eval(tokens, true).ok());
  for (int i = 0; i < 20; ++i) {
    auto la = a->engine->Logits(i), lb = b->engine->Logits(i);
    REQUIRE(std::equal(la.begin(), la.end(), lb.begin()));
  }
  // And the decode path (one token at a time) too.
  for (int step = 0; step < 5; ++step) {
    const int32_t t = tokens[step];
    REQUIRE(a->engine->Eval({&t, 1}).ok());
    REQUIRE(b->engine->Eval({&t, 1}).ok());
    auto la = a->engine->Logits(), lb = b->engine->Logits();
    REQUIRE(std::equal(la.begin(), la.end(), lb.begin()));
  }
}

TEST_CASE("batched prefill agrees with token-by-token decode") {
  TinyModelSpec spec;
  kx::EngineOptions opts;
  opts.n_batch = 8;
  auto batched = Load(spec, "batched", opts);
  auto single = Load(spec, "single");
  const auto tokens = RandomTokens(11, 19);  // 3 batches, the last one partial
  REQUIRE(batched->engine->Eval(tokens, true).ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    REQUIRE(single->engine->Eval({&tokens[i], 1}).ok());
    auto a = batched->engine->Logits(static_cast<int>(i));
    auto b = single->engine->Logits();
    std::vector<float> bv(b.begin(), b.end());
    INFO("position " << i);
    CHECK(Cosine(a, bv) >= 0.99999);
  }
  CHECK(batched->engine->n_past() == 19);
}

// 20 tokens, truncated to 10 and the last 10 evaluated again: both batches have at least
// kGemmMinCols (8) tokens, so both take the prefill matmul (kernels/cpu/legacy_gemm.h for the
// tiny model's Q4_1 / Q8_0), whose column results do not depend on the batch's size; a batch
// of fewer than 8 takes the matvec tiles, which sum in another order (not the same bits).
TEST_CASE("truncating the KV cache and re-evaluating reproduces the logits") {
  TinyModelSpec spec;
  auto m = Load(spec, "trunc");
  const auto tokens = RandomTokens(3, 20);
  REQUIRE(m->engine->Eval(tokens).ok());
  auto first = m->engine->Logits();
  std::vector<float> saved(first.begin(), first.end());
  m->engine->TruncateKv(10);
  CHECK(m->engine->n_past() == 10);
  REQUIRE(m->engine->Eval(std::span<const int32_t>(tokens).subspan(10)).ok());
  auto again = m->engine->Logits();
  CHECK(std::equal(again.begin(), again.end(), saved.begin()));
}

TEST_CASE("bad input is refused and changes nothing") {
  TinyModelSpec spec;
  kx::EngineOptions opts;
  opts.n_ctx = 16;
  auto m = Load(spec, "bad", opts);
  const auto tokens = RandomTokens(8, 10);
  REQUIRE(m->engine->Eval(tokens).ok());
  std::vector<int32_t> too_many(7, 3);
  auto st = m->engine->Eval(too_many);
  CHECK(absl::IsOutOfRange(st));
  CHECK(std::string(st.message()).find("context is full") != std::string::npos);
  CHECK(m->engine->n_past() == 10);
  std::vector<int32_t> bad_id = {5, 256};
  st = m->engine->Eval(bad_id);
  CHECK(absl::IsInvalidArgument(st));
  CHECK(m->engine->n_past() == 10);
  CHECK(!m->engine->Eval({}).ok());

  kx::EngineOptions big;
  big.n_ctx = spec.n_ctx_train + 1;
  std::string path = TempPath("ctx");
  REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
  auto e = kx::Engine::Load(path, big);
  CHECK(!e.ok());
  CHECK(std::string(e.status().message()).find("trained context") != std::string::npos);
  ::unlink(path.c_str());
}

TEST_CASE("unsupported architectures and missing files are refused by name") {
  auto missing = kx::Engine::Load("/nonexistent/model.gguf", {});
  CHECK(absl::IsNotFound(missing.status()));
  // "mistral" is what transformers calls Mistral files, but llama.cpp writes
  // them as "llama"; "mistral3" (Ministral 3) is another architecture.
  for (const char* arch : {"mistral", "mistral3", "gemma2", "qwen3"}) {
    TinyModelSpec spec;
    spec.arch = arch;
    const std::string path = TempPath(std::string("arch_") + arch);
    REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
    auto e = kx::Engine::Load(path, {});
    ::unlink(path.c_str());
    REQUIRE_FALSE(e.ok());
    const std::string msg(e.status().message());
    INFO(msg);
    CHECK(absl::IsUnimplemented(e.status()));
    CHECK(msg.find(std::string("'") + arch + "'") != std::string::npos);
    CHECK(msg.find("supported: llama, qwen2") != std::string::npos);
  }
}

TEST_CASE("two sessions share one model and keep separate KV caches") {
  TinyModelSpec spec;
  const std::string path = TempPath("shared");
  REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
  auto model = kx::Model::Load(path);
  REQUIRE(model.ok());
  ::unlink(path.c_str());  // the mapping stays valid while the model lives
  auto a = kx::Engine::Create(*model, {});
  auto b = kx::Engine::Create(*model, {});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->model().get() == (*b)->model().get());
  const auto tokens = RandomTokens(21, 9);
  REQUIRE((*a)->Eval(tokens).ok());
  REQUIRE((*b)->Eval(std::span<const int32_t>(tokens).first(4)).ok());
  CHECK((*a)->n_past() == 9);
  CHECK((*b)->n_past() == 4);
  REQUIRE((*b)->Eval(std::span<const int32_t>(tokens).subspan(4)).ok());
  auto la = (*a)->Logits(), lb = (*b)->Logits();
  std::vector<float> bv(lb.begin(), lb.end());
  CHECK(Cosine(la, bv) >= 0.99999);
  CHECK(!kx::Engine::Create(nullptr, {}).ok());
}
