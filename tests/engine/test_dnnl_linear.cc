// oneDNN bf16 prefill (engine/dnnl_linear.h): the matmul against a float64
// reference within the bf16 error bound, the group runner's row split and
// output bounds, no OpenMP threads, and the engine with it on vs off.
#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "catch2/catch.hpp"
#include "engine/dnnl_linear.h"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace {

// bf16 keeps 8 significant bits: rounding to nearest has unit roundoff
// u_w = 2^-8 for the weights. Activations: one bf16 has u_x = 2^-8; the
// split (hi + lo) has u_x = 2^-15 (dnnl_linear.cc). So w'·x' = w·x·(1 + e)
// with |e| <= u_w + u_x + u_w·u_x, and f32 accumulation of k products (twice
// when split, plus the sum of the two) adds at most 2.02·k·2^-24 relative to
// Σ|w'x'|. Per output: |y − y_exact| <= (u_w + u_x + u_w·u_x + 2.02·k·2^-24)·Σ|w_i·x_i|.
constexpr double kBf16Unit = 1.0 / 256.0;
constexpr double kSplitUnit = 1.0 / 32768.0;
double Bf16Bound(int64_t k, double abs_sum, bool split) {
  const double uw = kBf16Unit, ux = split ? kSplitUnit : kBf16Unit;
  return (uw + ux + uw * ux + 2.02 * static_cast<double>(k) * std::ldexp(1.0, -24)) * abs_sum;
}

constexpr float kSentinel = -12345.0f;

void SkipUnlessSupported() {
  if (!kx::DnnlLinear::Supported()) {
    kx::test::Skip("oneDNN has no optimized bf16 matmul on this CPU");
  }
}

int CountThreads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// An F32 or Q4_1 weight matrix and its exact float values.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows][k]
  kx::WeightRef ref;
};

TestWeight MakeWeight(kx::GgmlType type, int64_t rows, int64_t k, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  TestWeight t;
  const kx::cpu::TypeKernels* tk = kx::cpu::Kernels().For(type);
  REQUIRE(tk != nullptr);
  std::vector<float> row(static_cast<size_t>(k)), exact(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    std::vector<uint8_t> q = kx::test::QuantizeRow(type, row);
    if (r == 0) t.ref.row_bytes = q.size();
    REQUIRE(q.size() == t.ref.row_bytes);
    t.bytes.insert(t.bytes.end(), q.begin(), q.end());
    tk->dequantize(q.data(), exact.data(), k);
    t.values.insert(t.values.end(), exact.begin(), exact.end());
  }
  t.ref.data = t.bytes.data();
  t.ref.type = type;
  t.ref.n_in = k;
  t.ref.n_out = rows;
  t.ref.name = "test.weight";
  return t;
}

std::vector<float> RandomRows(int64_t m, int64_t ld, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * ld));
  for (float& v : x) v = dist(rng);
  return x;
}

// Checks dst[b·ldd + r] (r < rows) against float64 within Bf16Bound and that
// columns [rows, ldd) still hold the sentinel.
void CheckOutput(const TestWeight& w, const std::vector<float>& x, int64_t src_ld, int64_t m,
                 const std::vector<float>& dst, int64_t ldd, bool split) {
  const int64_t k = w.ref.n_in, rows = w.ref.n_out;
  int64_t bad = 0, unwritten = 0, clobbered = 0;
  double worst_ratio = 0.0;
  for (int64_t b = 0; b < m; ++b) {
    for (int64_t r = 0; r < ldd; ++r) {
      const float got = dst[static_cast<size_t>(b * ldd + r)];
      if (r >= rows) {
        clobbered += got != kSentinel;
        continue;
      }
      unwritten += got == kSentinel;
      double exact = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(w.values[static_cast<size_t>(r * k + i)]) *
                         x[static_cast<size_t>(b * src_ld + i)];
        exact += p;
        abs_sum += std::fabs(p);
      }
      const double err = std::fabs(got - exact), bound = Bf16Bound(k, abs_sum, split);
      bad += !(err <= bound);
      worst_ratio = std::max(worst_ratio, err / bound);
    }
  }
  INFO("m " << m << " k " << k << " rows " << rows << " split " << split << " worst |err|/bound "
            << worst_ratio);
  CHECK(unwritten == 0);
  CHECK(clobbered == 0);
  CHECK(bad == 0);
  std::fprintf(stderr, "m %lld k %lld rows %lld split %d: worst |err|/bound %.3f\n",
               static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(rows),
               split ? 1 : 0, worst_ratio);
}

std::string TempPath(const std::string& tag) {
  return "/tmp/kx_test_dnnl_" + tag + "_" + std::to_string(::getpid()) + ".gguf";
}

double Cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST_CASE("F32ToBf16 rounds to nearest even and keeps NaN") {
  CHECK(kx::F32ToBf16(1.0f) == 0x3F80);
  CHECK(kx::F32ToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie: down to even
  CHECK(kx::F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie: up to even
  CHECK(kx::F32ToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(kx::F32ToBf16(-2.5f) == 0xC020);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(kx::cpu::Bf16ToFloat(kx::F32ToBf16(nan))));
  auto rng = kx::test::SeededRng(41);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (int i = 0; i < 1000; ++i) {
    const float f = dist(rng);
    CHECK(kx::F32ToBf16(f) == kx::cpu::FloatToBf16(f));
  }
}

TEST_CASE("bf16 matmul matches float64 within the bf16 bound") {
  SkipUnlessSupported();
  auto rng = kx::test::SeededRng(7);
  kx::ThreadPool pool(2);
  const bool split = GENERATE(false, true);
  kx::DnnlLinear dl(pool.size(), split);
  struct Shape {
    kx::GgmlType type;
    int64_t m, k, rows, src_ld, ldd;
  };
  // All weights live as long as dl: it finds its bf16 copies by address.
  std::vector<TestWeight> alive;
  alive.reserve(3);
  for (const Shape& s : {Shape{kx::GgmlType::kF32, 16, 64, 48, 64, 48},
                         Shape{kx::GgmlType::kQ4_1, 37, 576, 200, 600, 211},
                         Shape{kx::GgmlType::kQ4_1, 64, 1536, 96, 1536, 100}}) {
    TestWeight& w = alive.emplace_back(MakeWeight(s.type, s.rows, s.k, rng));
    const std::vector<float> x = RandomRows(s.m, s.src_ld, rng);
    std::vector<float> dst(static_cast<size_t>(s.m * s.ldd), kSentinel);
    const kx::DnnlLinear::Job job{&w.ref, dst.data(), s.ldd};
    kx::ThreadPool::HotScope hot(pool);
    REQUIRE(dl.RunGroup(x.data(), s.src_ld, static_cast<int>(s.m), &job, 1, pool));
    CheckOutput(w, x, s.src_ld, s.m, dst, s.ldd, split);
  }
  // Weights are converted once each: 2 bytes per weight.
  CHECK(dl.weight_bytes() == 2u * (48 * 64 + 200 * 576 + 96 * 1536));
}

TEST_CASE("a group's jobs split across threads write exactly their rows") {
  SkipUnlessSupported();
  auto rng = kx::test::SeededRng(8);
  const int64_t k = 256, m = 33;
  const bool split = GENERATE(false, true);
  for (int n_threads : {1, 2, 3}) {
    kx::ThreadPool pool(n_threads);
    kx::DnnlLinear dl(pool.size(), split);
    // Q/K/V-like: unequal row counts, so thread ranges cross job boundaries.
    TestWeight q = MakeWeight(kx::GgmlType::kQ4_1, 160, k, rng);
    TestWeight kk = MakeWeight(kx::GgmlType::kQ4_1, 48, k, rng);
    TestWeight v = MakeWeight(kx::GgmlType::kF32, 48, k, rng);
    const std::vector<float> x = RandomRows(m, k, rng);
    std::vector<float> dq(static_cast<size_t>(m * 170), kSentinel);
    std::vector<float> dk(static_cast<size_t>(m * 48), kSentinel);
    std::vector<float> dv(static_cast<size_t>(m * 50), kSentinel);
    const kx::DnnlLinear::Job jobs[] = {
        {&q.ref, dq.data(), 170}, {&kk.ref, dk.data(), 48}, {&v.ref, dv.data(), 50}};
    const int threads_before = CountThreads();
    {
      kx::ThreadPool::HotScope hot(pool);
      // Twice: the second run reuses cached weights and primitives.
      for (int rep = 0; rep < 2; ++rep) {
        REQUIRE(dl.RunGroup(x.data(), k, static_cast<int>(m), jobs, 3, pool));
      }
    }
    INFO("threads " << n_threads);
    CheckOutput(q, x, k, m, dq, 170, split);
    CheckOutput(kk, x, k, m, dk, 48, split);
    CheckOutput(v, x, k, m, dv, 50, split);
    CHECK(dl.weight_bytes() == 2u * k * (160 + 48 + 48));
    // oneDNN ran inline in the pool's threads: no OpenMP team was started.
    CHECK(CountThreads() == threads_before);
  }
}

TEST_CASE("engine prefill through oneDNN matches the native path on a tiny model") {
  SkipUnlessSupported();
  ::unsetenv("KAIROX_PREFILL");  // the options below decide
  const auto path_kind =
      GENERATE(kx::EngineOptions::Prefill::kDnnl, kx::EngineOptions::Prefill::kDnnlFast);
  const bool split = path_kind == kx::EngineOptions::Prefill::kDnnl;
  kx::test::TinyModelSpec spec;
  spec.n_embd = 128;
  spec.n_ff = 256;
  const std::string path = TempPath("tiny");
  kx::test::TinyModelWeights weights;
  REQUIRE(kx::test::WriteTinyModel(path, spec, &weights).ok());
  kx::EngineOptions native_opts;
  native_opts.n_threads = 2;
  native_opts.prefill = kx::EngineOptions::Prefill::kNative;
  kx::EngineOptions dnnl_opts = native_opts;
  dnnl_opts.prefill = path_kind;
  dnnl_opts.dnnl_min_batch = 16;
  auto native = kx::Engine::Load(path, native_opts);
  auto dnnl = kx::Engine::Load(path, dnnl_opts);
  ::unlink(path.c_str());
  REQUIRE(native.ok());
  REQUIRE(dnnl.ok());

  auto rng = kx::test::SeededRng(9);
  std::vector<int32_t> tokens(40);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 256);
  // A batch below dnnl_min_batch stays native and converts nothing.
  REQUIRE((*dnnl)->Eval(std::span<const int32_t>(tokens).first(8)).ok());
  CHECK((*dnnl)->PrefillWeightBytes() == 0);
  (*dnnl)->TruncateKv(0);

  REQUIRE((*native)->Eval(tokens, true).ok());
  const int threads_before = CountThreads();
  REQUIRE((*dnnl)->Eval(tokens, true).ok());
  // No OpenMP team spins beside the engine's pool after a oneDNN prefill.
  CHECK(CountThreads() == threads_before);
  // Every linear weight, and the tied LM head (all logits: a 40-token batch).
  const uint64_t d = spec.n_embd, ff = spec.n_ff;
  const uint64_t kvd = d / spec.n_head * spec.n_head_kv;
  const uint64_t per_layer = d * d * 2 + d * kvd * 2 + 3 * d * ff;
  CHECK((*dnnl)->PrefillWeightBytes() == 2 * (spec.n_layer * per_layer + 256 * d));

  // bf16 rounding (u = 2^-8 per factor) perturbs each linear output by well
  // under 1% of its magnitude (random signs: ~2^-8·sqrt(Σ(w·x)²)); through 2
  // layers and the head the logits stay within cosine 0.999 of the native
  // path (the native path itself is within 0.999 of float64: test_engine.cc).
  // With split activations only the weights' rounding is left: half the
  // error, and 1 − cosine scales with its square, so 0.9997. A wrong row,
  // transpose or stride gives an unrelated vector.
  const double min_cos = split ? 0.9997 : 0.999;
  double worst_cos = 1.0;
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
    const double cos = Cosine((*dnnl)->Logits(i), (*native)->Logits(i));
    worst_cos = std::min(worst_cos, cos);
    INFO("position " << i << " cosine " << cos);
    CHECK(cos >= min_cos);
  }
  std::fprintf(stderr, "tiny model, %s activations: worst cosine dnnl vs native prefill %.6f\n",
               split ? "split bf16" : "bf16", worst_cos);
  // Decode after a oneDNN prefill is the native path over the same KV cache.
  for (int step = 0; step < 4; ++step) {
    const int32_t t = tokens[static_cast<size_t>(step)];
    REQUIRE((*native)->Eval({&t, 1}).ok());
    REQUIRE((*dnnl)->Eval({&t, 1}).ok());
    CHECK(Cosine((*dnnl)->Logits(), (*native)->Logits()) >= min_cos);
  }
}
