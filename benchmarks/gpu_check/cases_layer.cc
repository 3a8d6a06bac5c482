// Layer ops of the forward pass: rms_norm, rope_store_kv, attention_decode and the
// element-wise ops (add, scale, swiglu, geglu), at the model's decode shapes (one token) and,
// for the element-wise ops, a prefill batch.
#include <cmath>

#include "benchmarks/gpu_check/cases.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope_store_kv.cuh"

namespace kx::gpu_check {
namespace {

constexpr double kFloatUlp = 1.0 / (1 << 24);  // 2^-24
constexpr double kHalfUlp = 1.0 / (1 << 11);   // 2^-11: half an ulp of a binary16
// Tokens of a prefill chunk (the engine's default n_batch) and in --small.
constexpr int64_t kPrefillTokens = 512;
constexpr int64_t kSmallPrefillTokens = 4;
// Rows the emulator computes per window for the prefill-sized cases (--small: one, so the
// self-test runs the window code too).
constexpr int64_t kEmuTokens = 4;

int64_t PrefillTokens(const CaseConfig& config) {
  return config.small ? kSmallPrefillTokens : kPrefillTokens;
}

int64_t EmuTokens(const CaseConfig& config) { return config.small ? 1 : kEmuTokens; }

std::string Dims(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

template <typename T>
T* At(void* const* buf, int i, int64_t offset = 0) {
  return i < 0 ? nullptr : static_cast<T*>(buf[i]) + offset;
}

// ---- rms_norm ---------------------------------------------------------------------------------

// The attention/FFN input norm of decode (one row), and a prefill chunk's norm added into the
// residual (the post-norm form), whose rows the emulator samples.
void AddRmsNorm(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  const ModelShapes& m = config.model;
  for (const bool prefill : {false, true}) {
    const int64_t rows = prefill ? PrefillTokens(config) : 1;
    const int64_t n = m.n_embd;
    Case c;
    c.op = "rms_norm";
    c.shape = Dims(rows, n) + (prefill ? " +res" : "");
    c.type = "f32";
    const int src = AddBuffer(&c, "src", Role::kInput, Elem::kF32,
                              AsBytes(RandomFloats(rng, rows * n, kActScale)));
    const int w =
        AddBuffer(&c, "weight", Role::kInput, Elem::kF32, AsBytes(RandomFloats(rng, n, kActScale)));
    const int res = prefill ? AddBuffer(&c, "residual", Role::kInput, Elem::kF32,
                                        AsBytes(RandomFloats(rng, rows * n, kActScale)))
                            : -1;
    const int dst = AddOutput(&c, "dst", Elem::kF32, rows * n, n);
    const float eps = m.norm_eps;
    c.launch = [=](void* fn, void* const* buf, RowWindow r, void* stream) {
      kx_cuda_rms_norm_args a{};
      a.struct_size = sizeof a;
      a.src = At<const float>(buf, src, r.begin * n);
      a.weight = At<const float>(buf, w);
      a.residual = At<const float>(buf, res, r.begin * n);
      a.dst = At<float>(buf, dst, r.begin * n);
      a.n_rows = r.end - r.begin;
      a.n = n;
      a.eps = eps;
      return reinterpret_cast<decltype(&kx_cuda_rms_norm)>(fn)(&a, stream);
    };
    // The same arithmetic on both sides (a double sum); the scale may round one ulp apart
    // where the double reductions differ in order, and a residual add can cancel.
    c.tol = Tolerance{16 * kFloatUlp * kActScale, 4 * kFloatUlp};
    c.n_rows = rows;
    c.emu_rows = prefill ? EmuTokens(config) : 0;
    c.bytes_moved = static_cast<uint64_t>(rows * n) * 4 * (prefill ? 3 : 2) + n * 4;
    cases->push_back(std::move(c));
  }
}

// ---- rope_store_kv ----------------------------------------------------------------------------

// Random caches of n_ctx rows: F16 values or Q8_0 blocks of magnitude about 1.
std::vector<uint8_t> RandomCache(std::mt19937_64& rng, int32_t kv_type, int64_t n_ctx,
                                 int64_t kv_dim) {
  return RandomWeights(rng, kv_type == KX_CUDA_KV_F16 ? kTypeF16 : kTypeQ8_0, n_ctx, kv_dim,
                       kActScale);
}

Elem CacheElem(int32_t kv_type) { return kv_type == KX_CUDA_KV_F16 ? Elem::kF16 : Elem::kQ8_0; }

const char* KvName(int32_t kv_type) { return kv_type == KX_CUDA_KV_F16 ? "f16kv" : "q8kv"; }

// One decode token at the last position of the context: Q/K/V biases (Qwen2 has them,
// SmolLM2 not), RoPE in the model's pairing, K and V written into both cache types.
void AddRopeStoreKv(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  const ModelShapes& m = config.model;
  const bool bias = m.qkv_bias;
  const bool neox = m.rope_neox;
  const int64_t d = m.head_dim;
  const int64_t q_dim = m.n_head * d;
  const int64_t kv_dim = m.n_kv_head * d;
  const int64_t pos = m.n_ctx - 1;
  for (const int32_t kv_type : {KX_CUDA_KV_F16, KX_CUDA_KV_Q8_0}) {
    Case c;
    c.op = "rope_store_kv";
    c.shape = std::to_string(m.n_head) + "/" + std::to_string(m.n_kv_head) + "h x " +
              std::to_string(d) + " @" + std::to_string(pos) + (bias ? " +bias" : "");
    c.type = KvName(kv_type);
    const int q =
        AddBuffer(&c, "q", Role::kInOut, Elem::kF32, AsBytes(RandomFloats(rng, q_dim, kActScale)));
    const int k =
        AddBuffer(&c, "k", Role::kInOut, Elem::kF32, AsBytes(RandomFloats(rng, kv_dim, kActScale)));
    const int v =
        AddBuffer(&c, "v", Role::kInOut, Elem::kF32, AsBytes(RandomFloats(rng, kv_dim, kActScale)));
    int qb = -1, kb = -1, vb = -1;
    if (bias) {
      qb = AddBuffer(&c, "q_bias", Role::kInput, Elem::kF32,
                     AsBytes(RandomFloats(rng, q_dim, kActScale)));
      kb = AddBuffer(&c, "k_bias", Role::kInput, Elem::kF32,
                     AsBytes(RandomFloats(rng, kv_dim, kActScale)));
      vb = AddBuffer(&c, "v_bias", Role::kInput, Elem::kF32,
                     AsBytes(RandomFloats(rng, kv_dim, kActScale)));
    }
    const int kc = AddBuffer(&c, "k_cache", Role::kInOut, CacheElem(kv_type),
                             RandomCache(rng, kv_type, m.n_ctx, kv_dim));
    const int vc = AddBuffer(&c, "v_cache", Role::kInOut, CacheElem(kv_type),
                             RandomCache(rng, kv_type, m.n_ctx, kv_dim));
    const int64_t n_head = m.n_head, n_kv_head = m.n_kv_head;
    const float base = static_cast<float>(m.rope_base);
    c.launch = [=](void* fn, void* const* buf, RowWindow, void* stream) {
      kx_cuda_rope_store_kv_args a{};
      a.struct_size = sizeof a;
      a.q = At<float>(buf, q);
      a.k = At<float>(buf, k);
      a.v = At<float>(buf, v);
      a.q_bias = At<const float>(buf, qb);
      a.k_bias = At<const float>(buf, kb);
      a.v_bias = At<const float>(buf, vb);
      a.k_cache = At<uint8_t>(buf, kc);
      a.v_cache = At<uint8_t>(buf, vc);
      a.kv_type = kv_type;
      a.rope_style = neox ? KX_CUDA_ROPE_NEOX : KX_CUDA_ROPE_ADJACENT;
      a.n_tokens = 1;
      a.pos = pos;
      a.n_head = n_head;
      a.n_kv_head = n_kv_head;
      a.head_dim = d;
      a.n_rot = d;
      a.freq_base = base;
      a.norm_eps = 0.0f;
      return reinterpret_cast<decltype(&kx_cuda_rope_store_kv)>(fn)(&a, stream);
    };
    // The angles' double cos/sin/pow may round to the neighbouring float on the device
    // (≤ 2 ulp of a double): a rotated value moves by an ulp or two of the inputs (|x| ≤ 2
    // after the bias, ≤ 2·√2 rotated). That can carry into the cache's rounding: one
    // binary16 step (F16) or one quantization step max|x|/127 of a block (Q8_0).
    const double x_max = 2.0 * std::sqrt(2.0) * kActScale;
    c.tol = kv_type == KX_CUDA_KV_F16 ? Tolerance{8 * kFloatUlp * x_max, 2 * kHalfUlp}
                                      : Tolerance{x_max / 127, 2 * kHalfUlp};
    c.bytes_moved = static_cast<uint64_t>(4 * (2 * q_dim + 4 * kv_dim)) +
                    (bias ? 4 * (q_dim + 2 * kv_dim) : 0) +
                    2 * kx_cuda_kv_row_bytes(kv_type, kv_dim);
    cases->push_back(std::move(c));
  }
}

// ---- attention_decode -------------------------------------------------------------------------

// One query token over n_ctx cached positions, with the full split workspace.
void AddAttentionDecode(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  const ModelShapes& m = config.model;
  const int64_t d = m.head_dim;
  const int64_t q_dim = m.n_head * d;
  const int64_t kv_dim = m.n_kv_head * d;
  for (const int32_t kv_type : {KX_CUDA_KV_F16, KX_CUDA_KV_Q8_0}) {
    Case c;
    c.op = "attention_decode";
    c.shape = std::to_string(m.n_head) + "/" + std::to_string(m.n_kv_head) + "h x " +
              std::to_string(d) + " x " + std::to_string(m.n_ctx) + " pos";
    c.type = KvName(kv_type);
    const int q =
        AddBuffer(&c, "q", Role::kInput, Elem::kF32, AsBytes(RandomFloats(rng, q_dim, kActScale)));
    const int kc = AddBuffer(&c, "k_cache", Role::kInput, CacheElem(kv_type),
                             RandomCache(rng, kv_type, m.n_ctx, kv_dim));
    const int vc = AddBuffer(&c, "v_cache", Role::kInput, CacheElem(kv_type),
                             RandomCache(rng, kv_type, m.n_ctx, kv_dim));
    const uint64_t ws_bytes = kx_cuda_attention_decode_workspace_bytes(m.n_head, d);
    const int ws = AddBuffer(&c, "workspace", Role::kInput, Elem::kU8,
                             std::vector<uint8_t>(static_cast<size_t>(ws_bytes)));
    const int dst = AddOutput(&c, "dst", Elem::kF32, q_dim);
    const int64_t n_head = m.n_head, n_kv_head = m.n_kv_head, pos = m.n_ctx - 1;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    c.launch = [=](void* fn, void* const* buf, RowWindow, void* stream) {
      kx_cuda_attention_decode_args a{};
      a.struct_size = sizeof a;
      a.q = At<const float>(buf, q);
      a.k_cache = At<const uint8_t>(buf, kc);
      a.v_cache = At<const uint8_t>(buf, vc);
      a.dst = At<float>(buf, dst);
      a.workspace = At<float>(buf, ws);
      a.workspace_bytes = ws_bytes;
      a.kv_type = kv_type;
      a.n_head = n_head;
      a.n_kv_head = n_kv_head;
      a.head_dim = d;
      a.pos = pos;
      a.window = 0;
      a.scale = scale;
      return reinterpret_cast<decltype(&kx_cuda_attention_decode)>(fn)(&a, stream);
    };
    // dst is a softmax-weighted mean of n_ctx values (|v| up to ~3): float sums whose split
    // into blocks follows the SM count (so differs between the emulator and the GPU), and
    // the device's expf (2 ulp). Terms are about max|v| / n_ctx each.
    c.tol = DotTolerance(m.n_ctx, 3.0 * kActScale / static_cast<double>(m.n_ctx), 4.0);
    c.bytes_moved = 2 * static_cast<uint64_t>(m.n_ctx) * kx_cuda_kv_row_bytes(kv_type, kv_dim) +
                    static_cast<uint64_t>(8 * q_dim);
    cases->push_back(std::move(c));
  }
}

// ---- element-wise -----------------------------------------------------------------------------

enum class Ew { kAdd, kScale, kSwiglu, kGeglu };

// `n` elements per token for decode (1 token) and a prefill chunk.
void AddElementwise(const CaseConfig& config, std::mt19937_64& rng, Ew op, const char* name,
                    int64_t n, std::vector<Case>* cases) {
  for (const int64_t rows : {int64_t{1}, PrefillTokens(config)}) {
    Case c;
    c.op = name;
    c.shape = Dims(rows, n);
    c.type = "f32";
    const int64_t total = rows * n;
    const int a = AddBuffer(&c, "a", Role::kInput, Elem::kF32,
                            AsBytes(RandomFloats(rng, total, 4 * kActScale)));
    const int b = op == Ew::kScale ? -1
                                   : AddBuffer(&c, "b", Role::kInput, Elem::kF32,
                                               AsBytes(RandomFloats(rng, total, kActScale)));
    const int dst = AddOutput(&c, "dst", Elem::kF32, total, n);
    c.launch = [=](void* fn, void* const* buf, RowWindow r, void* stream) -> kx_cuda_status {
      const int64_t off = r.begin * n;
      const int64_t count = (r.end - r.begin) * n;
      switch (op) {
        case Ew::kAdd: {
          kx_cuda_add_args x{sizeof x, At<const float>(buf, a, off), At<const float>(buf, b, off),
                             At<float>(buf, dst, off), count};
          return reinterpret_cast<decltype(&kx_cuda_add)>(fn)(&x, stream);
        }
        case Ew::kScale: {
          kx_cuda_scale_args x{sizeof x, At<const float>(buf, a, off), At<float>(buf, dst, off),
                               count, 0.125f};
          return reinterpret_cast<decltype(&kx_cuda_scale)>(fn)(&x, stream);
        }
        case Ew::kSwiglu:
        case Ew::kGeglu: {
          kx_cuda_glu_args x{sizeof x, At<const float>(buf, a, off), At<const float>(buf, b, off),
                             At<float>(buf, dst, off), count};
          return reinterpret_cast<decltype(&kx_cuda_swiglu)>(fn)(&x, stream);
        }
      }
      return KX_CUDA_ERROR_INTERNAL;
    };
    // add and scale are single IEEE operations: exact agreement. The gated activations use
    // the device's expf / tanhf (≤ 2 ulp each); 1 + tanh cancels for gate ≪ 0, where the
    // result is tiny: an absolute floor of a few ulps of |gate·up| (≤ 4).
    c.tol = (op == Ew::kAdd || op == Ew::kScale)
                ? Tolerance{0.0, 0.0}
                : Tolerance{16 * kFloatUlp * 4 * kActScale * kActScale, 8 * kFloatUlp};
    c.n_rows = rows;
    c.emu_rows = rows > 1 ? EmuTokens(config) : 0;
    c.bytes_moved = static_cast<uint64_t>(total) * 4 * (op == Ew::kScale ? 2 : 3);
    cases->push_back(std::move(c));
  }
}

}  // namespace

void AddLayerCases(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  const ModelShapes& m = config.model;
  AddRmsNorm(config, rng, cases);
  AddRopeStoreKv(config, rng, cases);
  AddAttentionDecode(config, rng, cases);
  AddElementwise(config, rng, Ew::kAdd, "add", m.n_embd, cases);
  AddElementwise(config, rng, Ew::kScale, "scale", m.n_embd, cases);
  AddElementwise(config, rng, Ew::kSwiglu, "swiglu", m.n_ff, cases);
  AddElementwise(config, rng, Ew::kGeglu, "geglu", m.n_ff, cases);
}

}  // namespace kx::gpu_check
