// attention_decode under the CUDA emulator against a float64 reference and against the CPU
// engine's own attention arithmetic (forward.cc RunAttentionPart: the scalar dot_*_rows /
// axpy_*_rows vector kernels and its float softmax), on F16 and Q8_0 caches, with the
// shapes of SmolLM2-135M, Qwen2.5-1.5B and Gemma 3 270M (sliding window), ragged ones, and
// long contexts split across blocks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/attention_decode.cuh"

namespace {

using kx::test::AllWithin;
using kx::test::Poison;
using kx::test::RandomFloats;

constexpr double kU = 0x1p-24;  // float's unit roundoff

struct AttnShape {
  const char* name;
  int n_head, n_kv_head, head_dim;
  int window;  // 0: global
};

// One layer's K and V caches of n_ctx rows (kv_cache.cuh), random where the query may look
// and all-ones bytes (F16 NaN; Q8_0 a NaN scale) in the rows it must not read — before the
// window and after pos — so a stray read turns the output into NaN.
struct Cache {
  int32_t type;
  uint64_t row_bytes;
  std::vector<uint8_t> k, v;
};

Cache MakeCache(std::mt19937_64& rng, int32_t type, int kv_dim, int n_ctx, int first, int pos) {
  Cache c{type, kx_cuda_kv_row_bytes(type, kv_dim), {}, {}};
  REQUIRE(c.row_bytes > 0);
  for (std::vector<uint8_t>* cache : {&c.k, &c.v}) {
    cache->assign(c.row_bytes * n_ctx, kx::test::kPoisonByte);
    for (int p = first; p <= pos; ++p) {
      uint8_t* row = cache->data() + c.row_bytes * p;
      if (type == KX_CUDA_KV_F16) {
        const std::vector<uint16_t> h = kx::test::RandomHalves(rng, kv_dim);
        std::memcpy(row, h.data(), c.row_bytes);
      } else {
        const std::vector<float> x = RandomFloats(rng, kv_dim);
        REQUIRE(kx::cpu::QuantizeRow(kx::GgmlType::kQ8_0, x.data(), kv_dim, row).ok());
      }
    }
  }
  return c;
}

// Element i of head h's row at position p, as the kernel and the CPU read it.
double CacheValue(const Cache& c, const std::vector<uint8_t>& cache, int p, int h, int hd, int i) {
  const uint8_t* row = cache.data() + c.row_bytes * p;
  if (c.type == KX_CUDA_KV_F16) {
    uint16_t bits;
    std::memcpy(&bits, row + (static_cast<size_t>(h) * hd + i) * 2, 2);
    return kx::cpu::HalfToFloat(bits);
  }
  const int block = (h * hd + i) / KX_CUDA_Q8_0_BLOCK_ELEMS;
  const uint8_t* b = row + static_cast<size_t>(block) * KX_CUDA_Q8_0_BLOCK_BYTES;
  uint16_t d;
  std::memcpy(&d, b, 2);
  const auto q = static_cast<int8_t>(b[2 + (h * hd + i) % KX_CUDA_Q8_0_BLOCK_ELEMS]);
  return static_cast<double>(kx::cpu::HalfToFloat(d)) * q;
}

// The CPU engine's attention of one head: kernels/cpu/layer_ops.cc (cpu::AttendHead, which
// RunAttentionPart calls), with the scalar vector kernels.
void CpuAttentionHead(const Cache& c, int kv_dim, int hd, int kvh, int first_key, int n_keys,
                      const float* qh, float attn_scale, float* out) {
  const kx::cpu::VecKernels& vec = kx::cpu::KernelsFor(kx::Isa::kScalar)->vec;
  const bool kv_q8 = c.type == KX_CUDA_KV_Q8_0;
  const size_t kv_row_bytes = c.row_bytes;
  const size_t key0 = static_cast<size_t>(first_key) * kv_row_bytes +
                      static_cast<size_t>(kvh) * hd * kv_row_bytes / kv_dim;
  const uint8_t* kc = c.k.data();
  const uint8_t* vc = c.v.data();
  std::vector<float> sc(n_keys);
  if (kv_q8) {
    vec.dot_q8_0_rows(kc + key0, kv_row_bytes, n_keys, qh, hd, sc.data());
  } else {
    vec.dot_f16_rows(reinterpret_cast<const uint16_t*>(kc + key0), kv_dim, n_keys, qh, hd,
                     sc.data());
  }
  float max_s = -INFINITY;
  for (int t = 0; t < n_keys; ++t) {
    sc[t] *= attn_scale;
    max_s = std::max(max_s, sc[t]);
  }
  float sum = 0.0f;
  for (int t = 0; t < n_keys; ++t) {
    sc[t] = std::exp(sc[t] - max_s);
    sum += sc[t];
  }
  const float inv = 1.0f / sum;
  for (int t = 0; t < n_keys; ++t) sc[t] *= inv;
  std::memset(out, 0, sizeof(float) * hd);
  if (kv_q8) {
    vec.axpy_q8_0_rows(sc.data(), vc + key0, kv_row_bytes, n_keys, out, hd);
  } else {
    vec.axpy_f16_rows(sc.data(), reinterpret_cast<const uint16_t*>(vc + key0), kv_dim, n_keys, out,
                      hd);
  }
}

using AttnFn = kx_cuda_status (*)(const kx_cuda_attention_decode_args*, void*);

// How the call is made: the workspace's size in splits (0: none), and whether dst is q.
struct Call {
  int workspace_splits = KX_CUDA_ATTENTION_MAX_SPLITS;
  bool in_place = false;
  float q_scale = 2.0f;  // |q| ≤ q_scale: larger gives a peakier softmax
};

void CheckAttention(std::mt19937_64& rng, const AttnShape& s, int32_t type, int pos,
                    Call call = {}) {
  INFO(s.name << (type == KX_CUDA_KV_Q8_0 ? " q8_0" : " f16") << " pos " << pos
              << " workspace splits " << call.workspace_splits << " in place " << call.in_place);
  const int hd = s.head_dim, kvd = s.n_kv_head * hd, group = s.n_head / s.n_kv_head;
  const int first = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
  const int n_keys = pos - first + 1;
  const int n_ctx = pos + 4;
  const Cache c = MakeCache(rng, type, kvd, n_ctx, first, pos);
  const std::vector<float> q = RandomFloats(rng, static_cast<size_t>(s.n_head) * hd, call.q_scale);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));  // ReadLlamaHParams' attn_scale

  // References per head: float64, and the CPU engine's float path.
  std::vector<double> want(q.size()), tol(q.size()), cpu_tol(q.size());
  std::vector<float> cpu(q.size());
  for (int h = 0; h < s.n_head; ++h) {
    const int kvh = h / group;
    std::vector<double> sc(n_keys);
    double s_max = 0.0, v_max = 0.0, top = -INFINITY;
    for (int t = 0; t < n_keys; ++t) {
      double dot = 0.0, abs_dot = 0.0;
      for (int i = 0; i < hd; ++i) {
        const double term =
            double{scale} * q[h * hd + i] * CacheValue(c, c.k, first + t, kvh, hd, i);
        dot += term;
        abs_dot += std::fabs(term);
      }
      sc[t] = dot;
      s_max = std::max(s_max, abs_dot);
      top = std::max(top, dot);
      for (int i = 0; i < hd; ++i) {
        v_max = std::max(v_max, std::fabs(CacheValue(c, c.v, first + t, kvh, hd, i)));
      }
    }
    double sum = 0.0;
    for (double& x : sc) sum += (x = std::exp(x - top));
    for (int i = 0; i < hd; ++i) {
      double acc = 0.0;
      for (int t = 0; t < n_keys; ++t)
        acc += sc[t] / sum * CacheValue(c, c.v, first + t, kvh, hd, i);
      want[h * hd + i] = acc;
    }
    // The bound, with u = 2^-24, n keys, S = max_t Σ_i |scale·q_i·K_t[i]|, V = max |V_t[i]|:
    // (a) scores: D products summed in float in some order, plus the scale (the kernel folds
    //     scale·log2 e into q: two roundings; Q8_0 multiplies by d once per block on the CPU)
    //     put each score within (D + 3)·u·S; since ∂out/∂s_t = p_t (V_t − out), the output
    //     moves by at most 2·V times that.
    // (b) weights: each is one exp (≤ 2 ulp = 4u), at most n running-max rescales in the
    //     kernel (exp and multiply, 5u each) and two merges (5u each), and the rounding of
    //     its exponent s − m (relative ln2·u·|s − m|, at most 0.53u once normalised, since
    //     y·2^-y ≤ 0.53); numerator and denominator each sum n terms (n·u). Each is within
    //     (6n + 15)u, relatively, and out = A / L within (2(6n + 15) + 1)·u·V.
    // The CPU's path takes a subset of these steps (no rescales or merges), so the same
    // bound holds for it, and kernel and CPU are within twice it of each other.
    tol[h * hd] = v_max * (2.0 * (hd + 3) * kU * s_max + (12.0 * n_keys + 31) * kU);
    std::fill(&tol[h * hd], &tol[h * hd] + hd, tol[h * hd]);
    std::fill(&cpu_tol[h * hd], &cpu_tol[h * hd] + hd, 2 * tol[h * hd]);
    CpuAttentionHead(c, kvd, hd, kvh, first, n_keys, &q[h * hd], scale, &cpu[h * hd]);
  }
  // The CPU path itself is within the bound of the float64 reference (checks the references).
  REQUIRE(AllWithin(cpu.data(), want.data(), tol.data(), cpu.size()));

  std::vector<float> q_dev = q, out(q.size());
  Poison(out);
  std::vector<float> workspace;
  kx_cuda_attention_decode_args args{};
  args.struct_size = sizeof args;
  args.q = q_dev.data();
  args.k_cache = c.k.data();
  args.v_cache = c.v.data();
  args.dst = call.in_place ? q_dev.data() : out.data();
  if (call.workspace_splits > 0) {
    const uint64_t bytes = static_cast<uint64_t>(s.n_head) * call.workspace_splits * (hd + 2) * 4;
    workspace.resize(bytes / sizeof(float));
    Poison(workspace);
    args.workspace = workspace.data();
    args.workspace_bytes = bytes;
  }
  args.kv_type = type;
  args.n_head = s.n_head;
  args.n_kv_head = s.n_kv_head;
  args.head_dim = hd;
  args.pos = pos;
  args.window = s.window;
  args.scale = scale;
  REQUIRE(kx::test::FindOpOrFail<AttnFn>("attention_decode")(&args, nullptr) == KX_CUDA_OK);
  const float* got = args.dst;
  REQUIRE(AllWithin(got, want.data(), tol.data(), q.size()));
  const std::vector<double> cpu64(cpu.begin(), cpu.end());
  REQUIRE(AllWithin(got, cpu64.data(), cpu_tol.data(), q.size()));
}

const AttnShape kSmolLm2{"SmolLM2-135M", 9, 3, 64, 0};
const AttnShape kQwen{"Qwen2.5-1.5B", 12, 2, 128, 0};       // group 6: a tile of 8, 6 used
const AttnShape kGemma{"Gemma3-270M local", 4, 1, 256, 8};  // window 512 in the model
const AttnShape kMha{"ragged MHA", 6, 6, 40, 0};            // head_dim/8 = 5 lanes of 8
const AttnShape kGroup5{"ragged group 5", 10, 2, 96, 0};    // 12 of 16 lanes, 3 Q8_0 blocks

}  // namespace

TEST_CASE("attention_decode under the emulator equals the CPU's attention", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(41);
  for (const int32_t type : {KX_CUDA_KV_F16, KX_CUDA_KV_Q8_0}) {
    for (const int pos : {0, 1, 37}) {
      CheckAttention(rng, kSmolLm2, type, pos);
      CheckAttention(rng, kQwen, type, pos);
      CheckAttention(rng, kGemma, type, pos);
      CheckAttention(rng, kGroup5, type, pos);
    }
    CheckAttention(rng, kGemma, type, 7);  // the window exactly full
    CheckAttention(rng, kGemma, type, 8);  // one past it: position 0 drops out
  }
  CheckAttention(rng, kMha, KX_CUDA_KV_F16, 0);
  CheckAttention(rng, kMha, KX_CUDA_KV_F16, 37);
  Call peaky;
  peaky.q_scale = 16.0f;  // scores spread over tens: most weights underflow towards 0
  CheckAttention(rng, kQwen, KX_CUDA_KV_F16, 37, peaky);
  Call in_place;
  in_place.in_place = true;
  CheckAttention(rng, kSmolLm2, KX_CUDA_KV_Q8_0, 37, in_place);
}

TEST_CASE("attention_decode splits long contexts across blocks and combines them", "[cuda_emu]") {
  // The emulated GPU has 4 SMs: a 301-key context over SmolLM2's 3 KV heads splits in 3
  // (2 blocks per SM wanted), each split at least 64 keys and whole warps of keys.
  std::mt19937_64 rng = kx::test::SeededRng(42);
  CheckAttention(rng, kSmolLm2, KX_CUDA_KV_F16, 300);
  Call two;
  two.workspace_splits = 2;  // room for two splits only
  CheckAttention(rng, kSmolLm2, KX_CUDA_KV_Q8_0, 300, two);
  Call none;
  none.workspace_splits = 0;  // no workspace: one block per KV head walks all 301 keys
  CheckAttention(rng, kSmolLm2, KX_CUDA_KV_F16, 300, none);
  const AttnShape wide_window{"Gemma3 window 100", 4, 1, 256, 100};
  CheckAttention(rng, wide_window, KX_CUDA_KV_Q8_0, 300);  // keys 201..300 in 2 splits
  Call in_place;
  in_place.in_place = true;
  CheckAttention(rng, kQwen, KX_CUDA_KV_F16, 200, in_place);
}

TEST_CASE("attention_decode refuses bad arguments", "[cuda_emu]") {
  std::vector<float> q(64), out(64);
  alignas(16) static uint8_t cache[4096];
  kx_cuda_attention_decode_args args{};
  args.struct_size = sizeof args;
  args.q = q.data();
  args.dst = out.data();
  args.k_cache = cache;
  args.v_cache = cache;
  args.kv_type = KX_CUDA_KV_F16;
  args.n_head = 2;
  args.n_kv_head = 1;
  args.head_dim = 32;
  args.scale = 1.0f;
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_OK);
  args.n_kv_head = 3;  // 2 heads are not groups of 3
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.n_kv_head = 1;
  args.head_dim = 36;  // not a multiple of 8
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.head_dim = 264;  // > 256
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.head_dim = 24;
  args.kv_type = KX_CUDA_KV_Q8_0;  // 24 is not whole Q8_0 blocks
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.kv_type = KX_CUDA_KV_F16;
  args.k_cache = cache + 2;  // F16 rows are read 16 bytes at a time
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.k_cache = cache;
  args.pos = -1;
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.pos = 0;
  args.dst = nullptr;
  REQUIRE(kx_cuda_attention_decode(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  REQUIRE(kx_cuda_attention_decode(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
}
