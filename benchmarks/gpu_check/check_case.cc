#include "benchmarks/gpu_check/check_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "benchmarks/gpu_check/quant_blocks.h"

namespace kx::gpu_check {
namespace {

constexpr size_t kQ8_0BlockBytes = 34;
constexpr int64_t kQ8_0BlockElems = 32;

}  // namespace

size_t ElemBytes(Elem e) {
  switch (e) {
    case Elem::kF32:
    case Elem::kI32:
      return 4;
    case Elem::kF16:
    case Elem::kBF16:
      return 2;
    case Elem::kU8:
      return 1;
    case Elem::kQ8_0:
      return kQ8_0BlockBytes;
  }
  return 1;
}

int64_t ElemCount(Elem e, size_t bytes) {
  const int64_t units = static_cast<int64_t>(bytes / ElemBytes(e));
  return e == Elem::kQ8_0 ? units * kQ8_0BlockElems : units;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

int AddBuffer(Case* c, std::string name, Role role, Elem elem, std::vector<uint8_t> host,
              int64_t elems_per_row) {
  Buffer b;
  b.name = std::move(name);
  b.role = role;
  b.elem = elem;
  b.host = std::move(host);
  b.elems_per_row = elems_per_row;
  c->buffers.push_back(std::move(b));
  return static_cast<int>(c->buffers.size()) - 1;
}

int AddOutput(Case* c, std::string name, Elem elem, int64_t n, int64_t elems_per_row) {
  const int64_t units = elem == Elem::kQ8_0 ? n / kQ8_0BlockElems : n;
  return AddBuffer(c, std::move(name), Role::kOutput, elem,
                   std::vector<uint8_t>(static_cast<size_t>(units) * ElemBytes(elem)),
                   elems_per_row);
}

// The decode context the attention cases read: long enough that the KV reads dominate.
constexpr int64_t kCheckContext = 1024;

ModelShapes SmolLm2Shapes() {
  ModelShapes m;
  m.name = "smollm2";
  m.n_layer = 30;
  m.n_embd = 576;
  m.n_ff = 1536;
  m.n_head = 9;
  m.n_kv_head = 3;
  m.head_dim = 64;
  m.n_vocab = 49152;
  m.weight_type = kTypeQ4_1;
  m.weight_type2 = kTypeQ4_1;
  m.output_type = kTypeQ8_0;  // tied embeddings
  m.n_ctx = kCheckContext;
  m.rope_base = 100000.0;
  m.norm_eps = 1e-5f;
  return m;
}

ModelShapes Qwen15bShapes() {
  ModelShapes m;
  m.name = "qwen1.5b";
  m.n_layer = 28;
  m.n_embd = 1536;
  m.n_ff = 8960;
  m.n_head = 12;
  m.n_kv_head = 2;
  m.head_dim = 128;
  m.n_vocab = 151936;
  m.weight_type = kTypeQ4_K;
  m.weight_type2 = kTypeQ6_K;  // Q4_K_M keeps some ffn_down and attn_v in Q6_K
  m.output_type = kTypeQ6_K;
  m.n_ctx = kCheckContext;
  m.qkv_bias = true;
  m.rope_neox = true;
  m.rope_base = 1000000.0;
  m.norm_eps = 1e-6f;
  return m;
}

ModelShapes SmallShapes() {
  ModelShapes m = SmolLm2Shapes();
  m.name = "small";
  m.n_layer = 2;
  m.n_embd = 256;  // a multiple of the K-quants' 256-element super-blocks
  m.n_ff = 512;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_vocab = 1024;
  m.n_ctx = 48;
  return m;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) ? 1u : 0u;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 0x1f) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign ? -v : v;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (x < 0x38800000u) {
    // Subnormal half (or zero): scale into the 10-bit mantissa, round to nearest even.
    float a;
    std::memcpy(&a, &x, sizeof a);
    const float scaled = a * 16777216.0f;  // 2^24: one half subnormal ulp
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = dist(rng);
    if (x == 0.0f) x = 0.5f * scale;
  }
  return v;
}

std::vector<uint16_t> RandomHalves(std::mt19937_64& rng, int64_t n, float scale) {
  const std::vector<float> f = RandomFloats(rng, n, scale);
  std::vector<uint16_t> v(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    v[i] = FloatToHalf(f[i]);
    if ((v[i] & 0x7fffu) == 0) v[i] = FloatToHalf(0.5f * scale);
  }
  return v;
}

Tolerance DotTolerance(int64_t k, double term, double slack) {
  constexpr double kFloatUlp = 1.0 / (1 << 24);  // 2^-24: half an ulp of 1
  constexpr double kUlps = 16.0;
  const double sqrt_k = std::sqrt(static_cast<double>(k));
  // Rounding errors of k additions, each of a partial sum about sqrt(k)·term in size.
  Tolerance t;
  t.abs = slack * kUlps * kFloatUlp * sqrt_k * sqrt_k * term;
  t.rel = slack * kUlps * kFloatUlp * sqrt_k;
  return t;
}

}  // namespace kx::gpu_check
