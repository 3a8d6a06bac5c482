// The sim device's layer ops: rms_norm, rope_store_kv, attention_decode, add, matvec —
// the CUDA module's contracts (kernels/cuda/<op>.cuh) computed with the CPU engine's own
// arithmetic (kernels/cpu/layer_ops.h, the kernel table's matvec with 16-bit activations,
// cpu::QuantizeRow for the Q8_0 cache), so a layer run on the sim device gives the CPU path's
// result bit for bit. Argument checks follow the module's launchers; device ranges are checked
// against the arena (SimMemory) where a GPU would fault.
#include <algorithm>
#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/sim_ops.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/layer_ops.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope_store_kv.cuh"

namespace kx {
namespace {

constexpr uint64_t kF32 = sizeof(float);

template <typename Args>
absl::Status CheckStruct(const void* raw, std::string_view op) {
  if (static_cast<const Args*>(raw)->struct_size < sizeof(Args)) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(op.data(), op.size()), ": args->struct_size is too small"));
  }
  return absl::OkStatus();
}

absl::Status RunRmsNorm(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "rms_norm";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_rms_norm_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_rms_norm_args*>(raw);
  if (a->n_rows < 0 || (a->n_rows > 0 && a->n <= 0) || !(a->eps >= 0.0f)) {
    return absl::InvalidArgumentError("rms_norm: n_rows >= 0, n > 0 and eps >= 0 are required");
  }
  if (a->n_rows == 0) return absl::OkStatus();
  const uint64_t total = static_cast<uint64_t>(a->n_rows) * a->n * kF32;
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "src", a->src, total));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "weight", a->weight, a->n * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "dst", a->dst, total));
  if (a->residual != nullptr) {
    KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "residual", a->residual, total));
  }
  std::vector<float> y(static_cast<size_t>(a->n));
  for (int64_t r = 0; r < a->n_rows; ++r) {
    const int64_t off = r * a->n;
    cpu::RmsNorm(a->src + off, a->weight, y.data(), a->n, a->eps);
    // The engine's post-norm stages: the norm in place, then x += it (one float add).
    for (int64_t i = 0; i < a->n; ++i) {
      a->dst[off + i] = a->residual != nullptr ? a->residual[off + i] + y[i] : y[i];
    }
  }
  return absl::OkStatus();
}

absl::Status RunAdd(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "add";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_add_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_add_args*>(raw);
  if (a->n < 0) return absl::InvalidArgumentError("add: n < 0");
  if (a->n == 0) return absl::OkStatus();
  for (const auto& [name, p] : {std::pair{"a", static_cast<const void*>(a->a)},
                                std::pair{"b", static_cast<const void*>(a->b)},
                                std::pair{"dst", static_cast<const void*>(a->dst)}}) {
    KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, name, p, a->n * kF32));
  }
  for (int64_t i = 0; i < a->n; ++i) a->dst[i] = a->a[i] + a->b[i];
  return absl::OkStatus();
}

absl::Status RunMatvec(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "matvec";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_matvec_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_matvec_args*>(raw);
  const cpu::TypeKernels* tk =
      a->type < 40 ? cpu::Kernels().For(static_cast<GgmlType>(a->type)) : nullptr;
  if (tk == nullptr) {
    return absl::UnimplementedError(absl::StrCat("matvec: weight type ", a->type, " unsupported"));
  }
  if (a->rows < 0 || a->n <= 0 || a->row_bytes <= 0) {
    return absl::InvalidArgumentError("matvec: rows >= 0, n > 0 and row_bytes > 0 are required");
  }
  if (a->rows == 0) return absl::OkStatus();
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(
      kOp, "w", a->w, static_cast<uint64_t>(a->row_bytes) * static_cast<uint64_t>(a->rows)));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "x", a->x, a->n * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "y", a->y, a->rows * kF32));
  // The engine's LinearGroup: activations prepared once, then every row.
  std::vector<uint8_t> act(tk->act_bytes(a->n));
  tk->quantize_act(a->x, a->n, act.data());
  if (a->accumulate == 0) {
    tk->matvec(a->w, static_cast<size_t>(a->row_bytes), a->n, a->rows, act.data(), a->y);
    return absl::OkStatus();
  }
  // y += W·x as the engine adds a projection into the residual: the product, then one add.
  std::vector<float> y(static_cast<size_t>(a->rows));
  tk->matvec(a->w, static_cast<size_t>(a->row_bytes), a->n, a->rows, act.data(), y.data());
  for (int64_t r = 0; r < a->rows; ++r) a->y[r] += y[r];
  return absl::OkStatus();
}

absl::Status RunRopeStoreKv(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "rope_store_kv";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_rope_store_kv_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_rope_store_kv_args*>(raw);
  const int64_t hd = a->head_dim, qd = a->n_head * hd, kvd = a->n_kv_head * hd;
  const bool q8 = a->kv_type == KX_CUDA_KV_Q8_0;
  const uint64_t row_bytes = kx_cuda_kv_row_bytes(a->kv_type, kvd);
  if (a->n_tokens < 0 || a->pos < 0 || a->n_head <= 0 || a->n_kv_head <= 0 || hd <= 0 ||
      a->n_rot < 2 || a->n_rot > hd || a->n_rot % 2 != 0 || row_bytes == 0 ||
      !(a->freq_base > 0.0f)) {
    return absl::InvalidArgumentError("rope_store_kv: bad shape, kv_type, n_rot or freq_base");
  }
  if (a->n_tokens == 0) return absl::OkStatus();
  const uint64_t n = static_cast<uint64_t>(a->n_tokens);
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "q", a->q, n * qd * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "k", a->k, n * kvd * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "v", a->v, n * kvd * kF32));
  const uint64_t cache_bytes = (static_cast<uint64_t>(a->pos) + n) * row_bytes;
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "k_cache", a->k_cache, cache_bytes));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "v_cache", a->v_cache, cache_bytes));
  const std::vector<float> inv_freq = cpu::RopeInvFreq(a->freq_base, static_cast<int>(a->n_rot));
  const int half = static_cast<int>(a->n_rot / 2);
  std::vector<float> cos_t(half), sin_t(half);
  const cpu::VecKernels& vec = cpu::Kernels().vec;
  for (int64_t t = 0; t < a->n_tokens; ++t) {
    float* q = a->q + t * qd;
    float* k = a->k + t * kvd;
    float* v = a->v + t * kvd;
    // QkvBiasStage, QkNormStage, RopeStage of lib/engine/forward.cc, in that order.
    if (a->q_bias != nullptr)
      for (int64_t i = 0; i < qd; ++i) q[i] += a->q_bias[i];
    if (a->k_bias != nullptr)
      for (int64_t i = 0; i < kvd; ++i) k[i] += a->k_bias[i];
    if (a->v_bias != nullptr)
      for (int64_t i = 0; i < kvd; ++i) v[i] += a->v_bias[i];
    if (a->q_norm != nullptr) {
      for (int64_t h = 0; h < a->n_head; ++h)
        cpu::RmsNorm(q + h * hd, a->q_norm, q + h * hd, hd, a->norm_eps);
    }
    if (a->k_norm != nullptr) {
      for (int64_t h = 0; h < a->n_kv_head; ++h)
        cpu::RmsNorm(k + h * hd, a->k_norm, k + h * hd, hd, a->norm_eps);
    }
    cpu::RopeTables(inv_freq.data(), half, a->pos + t, 1, cos_t.data(), sin_t.data());
    const bool neox = a->rope_style == KX_CUDA_ROPE_NEOX;
    for (int64_t h = 0; h < a->n_head; ++h) {
      cpu::RopeHead(q + h * hd, cos_t.data(), sin_t.data(), static_cast<int>(a->n_rot), neox);
    }
    for (int64_t h = 0; h < a->n_kv_head; ++h) {
      cpu::RopeHead(k + h * hd, cos_t.data(), sin_t.data(), static_cast<int>(a->n_rot), neox);
    }
    uint8_t* krow = a->k_cache + static_cast<uint64_t>(a->pos + t) * row_bytes;
    uint8_t* vrow = a->v_cache + static_cast<uint64_t>(a->pos + t) * row_bytes;
    if (q8) {
      KX_RETURN_IF_ERROR(cpu::QuantizeRow(GgmlType::kQ8_0, k, kvd, krow));
      KX_RETURN_IF_ERROR(cpu::QuantizeRow(GgmlType::kQ8_0, v, kvd, vrow));
    } else {
      vec.f32_to_f16(k, reinterpret_cast<uint16_t*>(krow), kvd);
      vec.f32_to_f16(v, reinterpret_cast<uint16_t*>(vrow), kvd);
    }
  }
  return absl::OkStatus();
}

absl::Status RunAttentionDecode(const void* raw, const SimMemory& mem) {
  constexpr std::string_view kOp = "attention_decode";
  KX_RETURN_IF_ERROR(CheckStruct<kx_cuda_attention_decode_args>(raw, kOp));
  const auto* a = static_cast<const kx_cuda_attention_decode_args*>(raw);
  const int64_t hd = a->head_dim, kvd = a->n_kv_head * hd;
  const uint64_t row_bytes = kx_cuda_kv_row_bytes(a->kv_type, kvd);
  if (a->n_head <= 0 || a->n_kv_head <= 0 || a->n_head % a->n_kv_head != 0 || hd <= 0 ||
      hd > cpu::kAttnMaxHeadDim || a->pos < 0 || a->window < 0 || row_bytes == 0) {
    return absl::InvalidArgumentError("attention_decode: bad shape, position or kv_type");
  }
  const int64_t first = a->window > 0 ? std::max<int64_t>(0, a->pos - a->window + 1) : 0;
  const int n_keys = static_cast<int>(a->pos + 1 - first);
  const uint64_t cache_bytes = static_cast<uint64_t>(a->pos + 1) * row_bytes;
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "q", a->q, a->n_head * hd * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "dst", a->dst, a->n_head * hd * kF32));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "k_cache", a->k_cache, cache_bytes));
  KX_RETURN_IF_ERROR(mem.CheckDeviceRange(kOp, "v_cache", a->v_cache, cache_bytes));
  const int group = static_cast<int>(a->n_head / a->n_kv_head);
  std::vector<float> scratch(
      static_cast<size_t>(cpu::AttnScratchFloats(n_keys, group, static_cast<int>(hd))));
  const bool q8 = a->kv_type == KX_CUDA_KV_Q8_0;
  for (int64_t kvh = 0; kvh < a->n_kv_head; ++kvh) {
    // RunAttentionPart's offsets: a head is whole Q8_0 blocks, so its offset scales like the row.
    const uint64_t key0 = static_cast<uint64_t>(first) * row_bytes +
                          static_cast<uint64_t>(kvh) * hd * row_bytes / kvd;
    // dst may equal q: AttendGroup writes the group's heads after it has read their q.
    cpu::AttendGroup(cpu::Kernels(), q8, a->q + kvh * group * hd, group, a->k_cache + key0,
                     a->v_cache + key0, row_bytes, n_keys, static_cast<int>(hd), a->scale,
                     scratch.data(), a->dst + kvh * group * hd);
  }
  return absl::OkStatus();
}

constexpr std::array kLayerOps = {
    SimOp{"rms_norm", RunRmsNorm, sizeof(kx_cuda_rms_norm_args)},
    SimOp{"add", RunAdd, sizeof(kx_cuda_add_args)},
    SimOp{"matvec", RunMatvec, sizeof(kx_cuda_matvec_args)},
    SimOp{"rope_store_kv", RunRopeStoreKv, sizeof(kx_cuda_rope_store_kv_args)},
    SimOp{"attention_decode", RunAttentionDecode, sizeof(kx_cuda_attention_decode_args)},
};

}  // namespace

std::span<const SimOp> SimLayerOps() { return kLayerOps; }

}  // namespace kx
