// The non-attention ops of a transformer layer under the CUDA emulator — rms_norm,
// rope_store_kv, add, scale, swiglu, geglu — against the CPU engine's arithmetic: the
// engine's functions live in anonymous namespaces (lib/engine/forward.cc, engine.cc), so
// the references below are copies of them, cited line by line; the cache bytes are checked
// against the CPU library's own quantizer (cpu::QuantizeRow, the scalar f32_to_f16).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

#include "emu_test_util.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope_store_kv.cuh"
#include "model/llama_ffn_activation.h"

namespace {

using kx::test::AllWithin;
using kx::test::FindOpOrFail;
using kx::test::Poison;
using kx::test::RandomFloats;

// One float ulp is at most 2^-23 of the value.
constexpr double kUlp = 0x1p-23;

// ---- rms_norm --------------------------------------------------------------------------

// kernels/cpu/layer_ops.cc (cpu::RmsNorm, which lib/engine/forward.cc calls), verbatim.
void CpuRmsNorm(const float* src, const float* weight, float* dst, int n, float eps) {
  double sum_sq = 0.0;
  for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(src[i]) * src[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (int i = 0; i < n; ++i) dst[i] = src[i] * scale * weight[i];
}

using RmsNormFn = kx_cuda_status (*)(const kx_cuda_rms_norm_args*, void*);

// rows × n through the registry; `offset` floats shift every array (1: no 16-byte loads).
// `mode`: 0 out of place, 1 dst = src, 2 with a residual, dst = residual.
void CheckRmsNorm(std::mt19937_64& rng, int64_t rows, int64_t n, float eps, int offset, int mode) {
  INFO("rows " << rows << " n " << n << " offset " << offset << " mode " << mode);
  const size_t count = static_cast<size_t>(rows * n);
  std::vector<float> src(count + offset), weight(n + offset), residual(count + offset);
  const std::vector<float> s = RandomFloats(rng, count, 3.0f), w = RandomFloats(rng, n, 2.0f),
                           r = RandomFloats(rng, count, 2.0f);
  std::copy(s.begin(), s.end(), src.begin() + offset);
  std::copy(w.begin(), w.end(), weight.begin() + offset);
  std::copy(r.begin(), r.end(), residual.begin() + offset);
  std::vector<float> out(count + offset);
  Poison(out);

  // The reference: the CPU's RmsNorm row by row, then (mode 2) the residual add of
  // AttnResidualStage (lib/engine/forward.cc: ffo normed in place, then x += ffo).
  std::vector<double> want(count), tol(count);
  std::vector<float> y(n);
  for (int64_t row = 0; row < rows; ++row) {
    CpuRmsNorm(&s[row * n], w.data(), y.data(), static_cast<int>(n), eps);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(row * n + i);
      const float dst = mode == 2 ? r[k] + y[i] : y[i];
      want[k] = dst;
      // Only the double sum's order differs: it can move the float scale by one ulp
      // (2^-23), and each of the two products can then round the other way (2^-24 each):
      // 2^-22 of y. The residual add can round the other way once more: one ulp of dst.
      tol[k] = 2 * kUlp * std::fabs(y[i]) + (mode == 2 ? kUlp * std::fabs(dst) : 0.0);
    }
  }

  kx_cuda_rms_norm_args args{};
  args.struct_size = sizeof args;
  args.weight = weight.data() + offset;
  args.n_rows = rows;
  args.n = n;
  args.eps = eps;
  float* dst = nullptr;
  if (mode == 0) {
    args.src = src.data() + offset;
    dst = out.data() + offset;
  } else if (mode == 1) {
    args.src = src.data() + offset;
    dst = src.data() + offset;
  } else {
    args.src = src.data() + offset;
    args.residual = residual.data() + offset;
    dst = residual.data() + offset;
  }
  args.dst = dst;
  REQUIRE(FindOpOrFail<RmsNormFn>("rms_norm")(&args, nullptr) == KX_CUDA_OK);
  REQUIRE(AllWithin(dst, want.data(), tol.data(), count));
}

TEST_CASE("rms_norm under the emulator equals the CPU's RmsNorm", "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(31);
  CheckRmsNorm(rng, 1, 576, 1e-5f, 0, 0);   // SmolLM2 hidden state, 16-byte loads
  CheckRmsNorm(rng, 1, 640, 1e-6f, 0, 2);   // Gemma 3 post-norm + residual, in place
  CheckRmsNorm(rng, 1, 1536, 1e-6f, 1, 0);  // Qwen2.5, unaligned: one float at a time
  CheckRmsNorm(rng, 4, 256, 1e-6f, 0, 1);   // Gemma's per-head QK-norm, in place
  CheckRmsNorm(rng, 9, 64, 1e-5f, 1, 2);    // ragged rows, unaligned, residual
  CheckRmsNorm(rng, 3, 37, 1e-5f, 0, 0);    // n not a multiple of 4 or of a warp
  CheckRmsNorm(rng, 1, 1, 1e-5f, 0, 0);     // one element
}

TEST_CASE("rms_norm: zero rows is a no-op, bad arguments are refused", "[cuda_emu]") {
  kx_cuda_rms_norm_args args{};
  args.struct_size = sizeof args;
  args.n_rows = 0;
  REQUIRE(kx_cuda_rms_norm(&args, nullptr) == KX_CUDA_OK);
  std::vector<float> x(8, 1.0f);
  args.n_rows = 1;
  args.n = 8;
  args.src = x.data();
  args.dst = x.data();
  REQUIRE(kx_cuda_rms_norm(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);  // weight
  args.weight = x.data();
  args.eps = -1.0f;
  REQUIRE(kx_cuda_rms_norm(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.eps = 1e-5f;
  args.struct_size = 4;
  REQUIRE(kx_cuda_rms_norm(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  REQUIRE(kx_cuda_rms_norm(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
}

// ---- rope_store_kv ---------------------------------------------------------------------

// lib/engine/engine.cc:28-33 (RopeInvFreq), verbatim.
std::vector<float> RopeInvFreq(float base, int n_rot) {
  std::vector<float> inv_freq(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(static_cast<double>(base), -2.0 * i / n_rot));
  }
  return inv_freq;
}

struct RopeShape {
  const char* name;
  int n_head, n_kv_head, head_dim, n_rot;
  int32_t style;
  float base;
  bool bias, qk_norm;
};

using RopeFn = kx_cuda_status (*)(const kx_cuda_rope_store_kv_args*, void*);

// The CPU's stages for n_tokens tokens (forward.cc QkvBiasStage 305-314, QkNormStage
// 316-331, RopeStage 333-367 with RopeTables 124-135 and RopeHead 92-101), in place on
// q/k/v, with a per-element bound on how far the kernel may differ (see below).
void CpuRopeStages(const RopeShape& s, int n_tokens, int pos, const std::vector<float>& bq,
                   const std::vector<float>& bk, const std::vector<float>& bv,
                   const std::vector<float>& qn, const std::vector<float>& kn, float eps,
                   std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                   std::vector<double>& q_tol, std::vector<double>& k_tol) {
  const int hd = s.head_dim, qd = s.n_head * hd, kvd = s.n_kv_head * hd, half = s.n_rot / 2;
  const std::vector<float> inv_freq = RopeInvFreq(s.base, s.n_rot);
  for (int b = 0; b < n_tokens; ++b) {
    for (int i = 0; s.bias && i < qd; ++i) q[b * qd + i] += bq[i];
    for (int i = 0; s.bias && i < kvd; ++i) k[b * kvd + i] += bk[i];
    for (int i = 0; s.bias && i < kvd; ++i) v[b * kvd + i] += bv[i];
    std::vector<float> ct(half), st(half);
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos + b) * inv_freq[i];
      ct[i] = static_cast<float>(std::cos(theta));
      st[i] = static_cast<float>(std::sin(theta));
    }
    auto head = [&](float* h, const std::vector<float>& norm, double* tol) {
      if (s.qk_norm) CpuRmsNorm(h, norm.data(), h, hd, eps);
      // Where the kernel may differ: the norm's double sum order (scale within one ulp, so
      // normed values within 2^-22) and the device's double pow/cos/sin (c, s within one
      // ulp, 2^-23). x_a·c − x_b·s then moves by at most (2^-22 + 2^-23 + 2·2^-24)
      // (|x_a| + |x_b|) plus one ulp of the result: under 2^-20 (|x_a| + |x_b|). Dimensions
      // past n_rot are only normed: 2^-22 |x|.
      for (int i = 0; i < hd; ++i) tol[i] = s.qk_norm ? 2 * kUlp * std::fabs(h[i]) : 0.0;
      for (int i = 0; i < half; ++i) {
        const int a = s.style == KX_CUDA_ROPE_NEOX ? i : 2 * i;
        const int c = s.style == KX_CUDA_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = h[a], x1 = h[c];
        h[a] = x0 * ct[i] - x1 * st[i];
        h[c] = x0 * st[i] + x1 * ct[i];
        tol[a] = tol[c] = 8 * kUlp * (std::fabs(x0) + std::fabs(x1));
      }
    };
    for (int h = 0; h < s.n_head; ++h) head(&q[b * qd + h * hd], qn, &q_tol[b * qd + h * hd]);
    for (int h = 0; h < s.n_kv_head; ++h) {
      head(&k[b * kvd + h * hd], kn, &k_tol[b * kvd + h * hd]);
    }
  }
}

void CheckRope(std::mt19937_64& rng, const RopeShape& s, int32_t kv_type, int pos, int n_tokens) {
  INFO(s.name << (kv_type == KX_CUDA_KV_Q8_0 ? " q8_0" : " f16") << " pos " << pos << " tokens "
              << n_tokens);
  const int hd = s.head_dim, qd = s.n_head * hd, kvd = s.n_kv_head * hd;
  const float eps = 1e-6f;
  std::vector<float> q = RandomFloats(rng, static_cast<size_t>(n_tokens) * qd, 2.0f);
  std::vector<float> k = RandomFloats(rng, static_cast<size_t>(n_tokens) * kvd, 2.0f);
  std::vector<float> v = RandomFloats(rng, static_cast<size_t>(n_tokens) * kvd, 2.0f);
  const std::vector<float> bq = RandomFloats(rng, qd), bk = RandomFloats(rng, kvd),
                           bv = RandomFloats(rng, kvd);
  std::vector<float> qn = RandomFloats(rng, hd, 0.5f), kn = RandomFloats(rng, hd, 0.5f);
  for (float& w : qn) w += 1.0f;  // Gemma's stored norm weights are 1 + w
  for (float& w : kn) w += 1.0f;
  const int n_ctx = pos + n_tokens + 2;
  const uint64_t row_bytes = kx_cuda_kv_row_bytes(kv_type, kvd);
  REQUIRE(row_bytes > 0);
  // The caches start as random bytes: rows the op must not touch keep them.
  std::vector<uint8_t> kc(row_bytes * n_ctx), vc(row_bytes * n_ctx);
  for (uint8_t& byte : kc) byte = static_cast<uint8_t>(rng());
  for (uint8_t& byte : vc) byte = static_cast<uint8_t>(rng());
  const std::vector<uint8_t> kc0 = kc, vc0 = vc;

  std::vector<float> want_q = q, want_k = k, want_v = v;
  std::vector<double> q_tol(q.size()), k_tol(k.size());
  CpuRopeStages(s, n_tokens, pos, bq, bk, bv, qn, kn, eps, want_q, want_k, want_v, q_tol, k_tol);

  kx_cuda_rope_store_kv_args args{};
  args.struct_size = sizeof args;
  args.q = q.data();
  args.k = k.data();
  args.v = v.data();
  if (s.bias) {
    args.q_bias = bq.data();
    args.k_bias = bk.data();
    args.v_bias = bv.data();
  }
  if (s.qk_norm) {
    args.q_norm = qn.data();
    args.k_norm = kn.data();
  }
  args.k_cache = kc.data();
  args.v_cache = vc.data();
  args.kv_type = kv_type;
  args.rope_style = s.style;
  args.n_tokens = n_tokens;
  args.pos = pos;
  args.n_head = s.n_head;
  args.n_kv_head = s.n_kv_head;
  args.head_dim = hd;
  args.n_rot = s.n_rot;
  args.freq_base = s.base;
  args.norm_eps = eps;
  REQUIRE(FindOpOrFail<RopeFn>("rope_store_kv")(&args, nullptr) == KX_CUDA_OK);

  const std::vector<double> wq(want_q.begin(), want_q.end()), wk(want_k.begin(), want_k.end());
  REQUIRE(AllWithin(q.data(), wq.data(), q_tol.data(), q.size()));
  REQUIRE(AllWithin(k.data(), wk.data(), k_tol.data(), k.size()));
  REQUIRE(v == want_v);  // the bias add is the same single rounding

  // The cache rows are exactly the CPU's encoding of the kernel's own k and v (RopeStage:
  // cpu::QuantizeRow for Q8_0, f32_to_f16 for F16), every other row untouched.
  const kx::cpu::VecKernels& vec = kx::cpu::KernelsFor(kx::Isa::kScalar)->vec;
  std::vector<uint8_t> row(row_bytes);
  for (int p = 0; p < n_ctx; ++p) {
    const size_t at = static_cast<size_t>(p) * row_bytes;
    const int b = p - pos;
    for (int which = 0; which < 2; ++which) {
      const std::vector<uint8_t>& got = which == 0 ? kc : vc;
      const std::vector<uint8_t>& before = which == 0 ? kc0 : vc0;
      INFO("row " << p << (which == 0 ? " of K" : " of V"));
      if (b < 0 || b >= n_tokens) {
        REQUIRE(std::memcmp(&got[at], &before[at], row_bytes) == 0);
        continue;
      }
      const float* src = (which == 0 ? k.data() : v.data()) + static_cast<size_t>(b) * kvd;
      if (kv_type == KX_CUDA_KV_Q8_0) {
        REQUIRE(kx::cpu::QuantizeRow(kx::GgmlType::kQ8_0, src, kvd, row.data()).ok());
      } else {
        vec.f32_to_f16(src, reinterpret_cast<uint16_t*>(row.data()), kvd);
      }
      REQUIRE(std::memcmp(&got[at], row.data(), row_bytes) == 0);
    }
  }
}

TEST_CASE("rope_store_kv under the emulator equals the CPU's bias, QK-norm, RoPE and cache",
          "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(32);
  const RopeShape smollm{"SmolLM2", 9, 3, 64, 64, KX_CUDA_ROPE_ADJACENT, 100000.0f, false, false};
  const RopeShape qwen{"Qwen2.5", 12, 2, 128, 128, KX_CUDA_ROPE_NEOX, 1e6f, true, false};
  const RopeShape gemma{"Gemma3", 4, 1, 256, 256, KX_CUDA_ROPE_NEOX, 10000.0f, false, true};
  const RopeShape gemma_global{"Gemma3 global",   4,    1,     256, 256,
                               KX_CUDA_ROPE_NEOX, 1e6f, false, true};
  // Partial rotation with norms (dimensions past n_rot only normed), a ragged head count and
  // a head_dim that is not whole warps (F16 only: Q8_0 needs whole blocks).
  const RopeShape partial{"partial", 5, 5, 64, 32, KX_CUDA_ROPE_NEOX, 10000.0f, true, true};
  const RopeShape ragged{"ragged", 6, 3, 40, 40, KX_CUDA_ROPE_ADJACENT, 10000.0f, true, false};
  for (const int32_t type : {KX_CUDA_KV_F16, KX_CUDA_KV_Q8_0}) {
    for (const int pos : {0, 1, 37}) {
      CheckRope(rng, smollm, type, pos, 1);
      CheckRope(rng, qwen, type, pos, 1);
      CheckRope(rng, gemma, type, pos, 1);
    }
    CheckRope(rng, gemma_global, type, 513, 1);
    CheckRope(rng, partial, type, 7, 3);  // three tokens at positions 7..9
  }
  CheckRope(rng, ragged, KX_CUDA_KV_F16, 37, 2);
}

TEST_CASE("rope_store_kv: Q8_0 zero blocks and exact ties quantize as the CPU's", "[cuda_emu]") {
  // Deliberate values the random tests never draw: V's first block all zeros (the d = 0
  // branch), its second block max 127 so that d = 1 exactly and x / d lands on .5 ties,
  // which must round to even (rint, like the CPU's nearbyint), not away from zero.
  const int hd = 64;
  std::vector<float> q(hd, 0.5f), k(hd, 0.25f), v(hd, 0.0f);
  const float ties[] = {127.0f, 2.5f, -0.5f, 1.5f, -3.5f, 0.5f, 126.5f, -2.5f};
  std::copy(std::begin(ties), std::end(ties), v.begin() + KX_CUDA_Q8_0_BLOCK_ELEMS);
  std::vector<uint8_t> kc(kx_cuda_kv_row_bytes(KX_CUDA_KV_Q8_0, hd), 0xff), vc = kc;
  kx_cuda_rope_store_kv_args args{};
  args.struct_size = sizeof args;
  args.q = q.data();
  args.k = k.data();
  args.v = v.data();
  args.k_cache = kc.data();
  args.v_cache = vc.data();
  args.kv_type = KX_CUDA_KV_Q8_0;
  args.n_tokens = 1;
  args.n_head = args.n_kv_head = 1;
  args.head_dim = args.n_rot = hd;
  args.freq_base = 10000.0f;
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_OK);
  std::vector<uint8_t> want(vc.size());
  REQUIRE(kx::cpu::QuantizeRow(kx::GgmlType::kQ8_0, v.data(), hd, want.data()).ok());
  REQUIRE(vc == want);
  REQUIRE(std::all_of(vc.begin(), vc.begin() + KX_CUDA_Q8_0_BLOCK_BYTES,
                      [](uint8_t b) { return b == 0; }));
  const auto* qs = reinterpret_cast<const int8_t*>(vc.data() + KX_CUDA_Q8_0_BLOCK_BYTES + 2);
  REQUIRE(qs[1] == 2);   // 2.5 → 2
  REQUIRE(qs[2] == 0);   // −0.5 → −0
  REQUIRE(qs[3] == 2);   // 1.5 → 2
  REQUIRE(qs[4] == -4);  // −3.5 → −4
  REQUIRE(qs[6] == 126);
}

TEST_CASE("rope_store_kv: zero tokens is a no-op, bad arguments are refused", "[cuda_emu]") {
  kx_cuda_rope_store_kv_args args{};
  args.struct_size = sizeof args;
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_OK);  // n_tokens = 0
  std::vector<float> q(48, 1.0f), k(48, 1.0f), v(48, 1.0f);
  std::vector<uint8_t> k_cache(96), v_cache(96);
  args.q = q.data();
  args.k = k.data();
  args.v = v.data();
  args.k_cache = k_cache.data();
  args.v_cache = v_cache.data();
  args.n_tokens = 1;
  args.n_head = args.n_kv_head = 1;
  args.head_dim = 48;
  args.n_rot = 48;
  args.freq_base = 10000.0f;
  args.kv_type = KX_CUDA_KV_Q8_0;  // 48 is not whole Q8_0 blocks
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.kv_type = KX_CUDA_KV_F16;
  args.n_rot = 50;  // > head_dim
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.n_rot = 48;
  args.rope_style = 7;
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.rope_style = KX_CUDA_ROPE_NEOX;
  args.v_cache = nullptr;
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  args.v_cache = v_cache.data();
  REQUIRE(kx_cuda_rope_store_kv(&args, nullptr) == KX_CUDA_OK);
}

// ---- add, scale, swiglu, geglu ---------------------------------------------------------

template <typename Args>
using ElementwiseFn = kx_cuda_status (*)(const Args*, void*);

// n elements at `offset` floats into their arrays (1: no 16-byte loads), in place when asked
// (dst = the first input). Returns the kernel's output.
template <typename Args>
std::vector<float> RunElementwise(const char* op, const std::vector<float>& a,
                                  const std::vector<float>& b, float scale, int offset,
                                  bool in_place) {
  const size_t n = a.size();
  std::vector<float> in0(n + offset), in1(n + offset), out(n + offset);
  std::copy(a.begin(), a.end(), in0.begin() + offset);
  std::copy(b.begin(), b.end(), in1.begin() + offset);
  Poison(out);
  float* dst = in_place ? in0.data() + offset : out.data() + offset;
  Args args{};
  args.struct_size = sizeof args;
  args.dst = dst;
  args.n = static_cast<int64_t>(n);
  if constexpr (std::is_same_v<Args, kx_cuda_add_args>) {
    args.a = in0.data() + offset;
    args.b = in1.data() + offset;
  } else if constexpr (std::is_same_v<Args, kx_cuda_scale_args>) {
    args.src = in0.data() + offset;
    args.scale = scale;
  } else {
    args.gate = in0.data() + offset;
    args.up = in1.data() + offset;
  }
  REQUIRE(FindOpOrFail<ElementwiseFn<Args>>(op)(&args, nullptr) == KX_CUDA_OK);
  return std::vector<float>(dst, dst + n);
}

TEST_CASE("add, scale, swiglu and geglu under the emulator equal the CPU's expressions",
          "[cuda_emu]") {
  std::mt19937_64 rng = kx::test::SeededRng(33);
  // 1 element; ragged (vectors plus a tail), aligned or not (offset 1: one float at a time),
  // in place or not.
  struct Case {
    size_t n;
    int offset;
    bool in_place;
  };
  std::vector<Case> cases;
  for (const size_t n : {size_t{1}, size_t{37}}) {
    for (const int offset : {0, 1}) {
      for (const bool in_place : {false, true}) cases.push_back({n, offset, in_place});
    }
  }
  for (const Case& c : cases) {
    const size_t n = c.n;
    INFO("n " << n << " offset " << c.offset << " in place " << c.in_place);
    const std::vector<float> a = RandomFloats(rng, n, 10.0f), b = RandomFloats(rng, n, 3.0f);
    const float embd_scale = std::sqrt(640.0f);  // Gemma 3 270M: √n_embd
    std::vector<double> want(n), tol(n);

    // add (AttnResidualStage's x += ffo) and scale (EmbedStage's x *= embd_scale): one
    // IEEE operation each, so the results are identical.
    std::vector<float> got = RunElementwise<kx_cuda_add_args>("add", a, b, 0, c.offset, c.in_place);
    for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == a[i] + b[i]);
    got = RunElementwise<kx_cuda_scale_args>("scale", a, b, embd_scale, c.offset, c.in_place);
    for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == a[i] * embd_scale);

    // swiglu: the CPU's ActivatedValue(kSilu)·up (model/llama_ffn_activation.h, the
    // expression GatedFfnActivation evaluates). Only expf differs: the device's is within
    // 2 ulp, glibc's within 1, so e = exp(−g) differs by ≤ 3 ulp; 1 + e, the division and
    // the product each may then round the other way (1 ulp each): ≤ 6 ulp of the result,
    // a relative bound (no cancellation anywhere).
    got = RunElementwise<kx_cuda_swiglu_args>("swiglu", a, b, 0, c.offset, c.in_place);
    for (size_t i = 0; i < n; ++i) {
      want[i] = kx::ActivatedValue(kx::FfnActivation::kSilu, 0.0f, a[i], b[i]) * b[i];
      tol[i] = 6 * kUlp * std::fabs(want[i]);
    }
    REQUIRE(AllWithin(got.data(), want.data(), tol.data(), n));

    // geglu: ActivatedValue(kGeluTanh)·up, evaluated as g / (1 + e^(−2y))·up (GeluTanh). The
    // exp argument is the same float (the kernel rounds each operation as the CPU does), so
    // as for swiglu only expf differs: ≤ 6 ulp of the result, relatively.
    got = RunElementwise<kx_cuda_geglu_args>("geglu", a, b, 0, c.offset, c.in_place);
    for (size_t i = 0; i < n; ++i) {
      want[i] = kx::ActivatedValue(kx::FfnActivation::kGeluTanh, 0.0f, a[i], b[i]) * b[i];
      tol[i] = 6 * kUlp * std::fabs(want[i]);
    }
    REQUIRE(AllWithin(got.data(), want.data(), tol.data(), n));
  }
}

TEST_CASE("elementwise ops: grid-stride loops cover arrays larger than the grid", "[cuda_emu]") {
  // More vectors (16-byte loads), and more floats (offset 1: one at a time), than the
  // emulated grid has threads (4 SMs · 8 blocks · 256 = 8192). The loop is the same template
  // for every op, so add alone runs it.
  std::mt19937_64 rng = kx::test::SeededRng(34);
  for (const auto& [n, offset] : {std::pair<size_t, int>{33003, 0}, {9001, 1}}) {
    INFO("n " << n << " offset " << offset);
    const std::vector<float> a = RandomFloats(rng, n), b = RandomFloats(rng, n);
    const std::vector<float> got =
        RunElementwise<kx_cuda_add_args>("add", a, b, 0, offset, /*in_place=*/false);
    for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == a[i] + b[i]);
  }
}

TEST_CASE("elementwise ops: zero elements is a no-op, bad arguments are refused", "[cuda_emu]") {
  kx_cuda_glu_args glu{};
  glu.struct_size = sizeof glu;
  REQUIRE(kx_cuda_swiglu(&glu, nullptr) == KX_CUDA_OK);
  REQUIRE(kx_cuda_geglu(&glu, nullptr) == KX_CUDA_OK);
  glu.n = 4;
  REQUIRE(kx_cuda_geglu(&glu, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_add_args add{};
  add.struct_size = sizeof add;
  add.n = -1;
  REQUIRE(kx_cuda_add(&add, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  kx_cuda_scale_args scale{};
  scale.struct_size = 2;
  REQUIRE(kx_cuda_scale(&scale, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
  REQUIRE(kx_cuda_scale(nullptr, nullptr) == KX_CUDA_ERROR_INVALID_ARGUMENT);
}

}  // namespace
