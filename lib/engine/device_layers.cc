#include "engine/device_layers.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope_store_kv.cuh"

namespace kx {
namespace {

uint64_t AlignUp(uint64_t n) {
  return (n + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

uint64_t Bytes(const WeightRef& w) { return w.data != nullptr ? AlignUp(w.bytes()) : 0; }

// The non-FFN weights of one layer, in upload order.
std::vector<const WeightRef*> LayerTensors(const LlamaLayerWeights& L) {
  std::vector<const WeightRef*> out;
  for (const WeightRef* w : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv,
                             &L.attn_q_norm, &L.attn_k_norm, &L.post_attention_norm}) {
    if (w->data != nullptr) out.push_back(w);
  }
  return out;
}

uint64_t LayerWeightBytes(const LlamaLayerWeights& L) {
  uint64_t n = 0;
  for (const WeightRef* w : LayerTensors(L)) n += Bytes(*w);
  return n;
}

// Scratch: x, xn, ffo (n_embd), q and attn (q_dim), k and v (kv_dim), logits (n_vocab),
// each aligned, plus the attention workspace.
uint64_t ScratchBytes(const LlamaHParams& hp, uint64_t workspace_bytes) {
  const uint64_t f = sizeof(float);
  return 3 * AlignUp(f * hp.n_embd) + 2 * AlignUp(f * hp.q_dim()) + 2 * AlignUp(f * hp.kv_dim()) +
         AlignUp(f * hp.n_vocab) + AlignUp(workspace_bytes);
}

uint64_t WorkspaceBytes(const LlamaHParams& hp) {
  return kx_cuda_attention_decode_workspace_bytes(hp.n_head, hp.head_dim);
}

}  // namespace

struct DeviceLayers::LayerBuffers {
  DeviceBuffer weights;
  DeviceBuffer kv;  // K cache then V cache, n_ctx rows each
  // Device addresses of each uploaded tensor (null where the model has none).
  const void* attn_norm = nullptr;
  const void *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr, *post_norm = nullptr;
  uint8_t* k_cache = nullptr;
  uint8_t* v_cache = nullptr;
};

DevicePlacement PlanDevicePlacement(const LlamaHParams& hp, const LlamaWeights& w, int n_ctx,
                                    uint64_t kv_row_bytes, uint64_t vram_bytes, int n_gpu_layers) {
  DevicePlacement p;
  p.kv_bytes_per_layer = 2 * AlignUp(kv_row_bytes * static_cast<uint64_t>(n_ctx));
  if (n_gpu_layers == 0) return p;
  p.scratch_bytes = ScratchBytes(hp, WorkspaceBytes(hp));
  if (p.scratch_bytes > vram_bytes) return p;
  uint64_t left = vram_bytes - p.scratch_bytes;
  p.head_bytes = Bytes(w.output_norm) + Bytes(w.output);
  if (p.head_bytes <= left) {
    p.head = true;
    left -= p.head_bytes;
  }
  const int max_layers = n_gpu_layers < 0 ? hp.n_layer : std::min(n_gpu_layers, hp.n_layer);
  for (int l = 0; l < max_layers; ++l) {
    const uint64_t need = LayerWeightBytes(w.layers[l]) + p.kv_bytes_per_layer;
    if (need > left) break;
    left -= need;
    p.layer_weight_bytes.push_back(LayerWeightBytes(w.layers[l]));
    ++p.n_layers;
  }
  return p;
}

DeviceLayers::DeviceLayers(const Config& config, std::unique_ptr<Device> device,
                           DevicePlacement placement)
    : config_(config), device_(std::move(device)), placement_(std::move(placement)) {}

// Members go in reverse order: buffers and events before the device (declared first) —
// after the device finished what reads them.
DeviceLayers::~DeviceLayers() {
  if (device_ != nullptr) (void)device_->Synchronize();
}

absl::StatusOr<std::unique_ptr<DeviceLayers>> DeviceLayers::Create(const Config& config,
                                                                   std::unique_ptr<Device> device) {
  const LlamaHParams& hp = *config.hp;
  const uint64_t limit = device->vram().limit() - device->vram().used();
  DevicePlacement placement = PlanDevicePlacement(hp, *config.w, config.n_ctx, config.kv_row_bytes,
                                                  limit, config.n_gpu_layers);
  if (placement.n_layers == 0 && !placement.head) {
    Log().info(
        "device {}: nothing placed ({}; the VRAM budget leaves {} bytes, the scratch "
        "alone needs {})",
        device->name(), config.n_gpu_layers == 0 ? "-ngl 0" : "the budget holds no layer", limit,
        placement.scratch_bytes);
  }
  auto dl = std::unique_ptr<DeviceLayers>(
      new DeviceLayers(config, std::move(device), std::move(placement)));
  if (dl->placement_.n_layers > 0 || dl->placement_.head) KX_RETURN_IF_ERROR(dl->Upload());
  Log().info("device {}: {} of {} layers' attention and {} on the device; VRAM {}",
             dl->device_->name(), dl->placement_.n_layers, hp.n_layer,
             dl->placement_.head ? "the LM head" : "not the LM head", dl->device_->vram().Report());
  return dl;
}

absl::Status DeviceLayers::Upload() {
  const LlamaHParams& hp = *config_.hp;
  const LlamaWeights& w = *config_.w;
  Device& dev = *device_;
  KX_ASSIGN_OR_RETURN(uploaded_, dev.CreateEvent());
  KX_ASSIGN_OR_RETURN(computed_, dev.CreateEvent());
  KX_ASSIGN_OR_RETURN(returned_, dev.CreateEvent());

  // Scratch, carved into aligned views.
  workspace_bytes_ = WorkspaceBytes(hp);
  KX_ASSIGN_OR_RETURN(scratch_, dev.Alloc("scratch", placement_.scratch_bytes));
  uint8_t* at = scratch_.as<uint8_t>();
  auto take = [&](uint64_t bytes) {
    uint8_t* p = at;
    at += AlignUp(bytes);
    return reinterpret_cast<float*>(p);
  };
  const uint64_t f = sizeof(float);
  d_x_ = take(f * hp.n_embd);
  d_xn_ = take(f * hp.n_embd);
  d_ffo_ = take(f * hp.n_embd);
  d_q_ = take(f * hp.q_dim());
  d_attn_ = take(f * hp.q_dim());
  d_k_ = take(f * hp.kv_dim());
  d_v_ = take(f * hp.kv_dim());
  d_logits_ = take(f * hp.n_vocab);
  d_workspace_ = take(workspace_bytes_);

  // Weights: one buffer per layer (and one for the head), tensors at aligned offsets, copied
  // on the critical stream; the compute stream waits for them once, below.
  auto upload = [&](DeviceBuffer& buf, const WeightRef& t, uint64_t* offset) -> const void* {
    if (t.data == nullptr) return nullptr;
    uint8_t* dst = buf.as<uint8_t>() + *offset;
    *offset += AlignUp(t.bytes());
    (void)dev.CopyH2D(StreamKind::kCritical, dst, t.data, t.bytes());
    return dst;
  };
  if (placement_.head) {
    KX_ASSIGN_OR_RETURN(head_weights_, dev.Alloc("LM head", placement_.head_bytes));
    uint64_t off = 0;
    d_output_norm_ = upload(head_weights_, w.output_norm, &off);
    d_output_ = upload(head_weights_, w.output, &off);
  }
  layers_.resize(placement_.n_layers);
  for (int l = 0; l < placement_.n_layers; ++l) {
    const LlamaLayerWeights& L = w.layers[l];
    LayerBuffers& b = layers_[l];
    KX_ASSIGN_OR_RETURN(b.weights, dev.Alloc("layer weights", placement_.layer_weight_bytes[l]));
    KX_ASSIGN_OR_RETURN(b.kv, dev.Alloc("KV cache", placement_.kv_bytes_per_layer));
    uint64_t off = 0;
    b.attn_norm = upload(b.weights, L.attn_norm, &off);
    b.wq = upload(b.weights, L.wq, &off);
    b.wk = upload(b.weights, L.wk, &off);
    b.wv = upload(b.weights, L.wv, &off);
    b.wo = upload(b.weights, L.wo, &off);
    b.bq = static_cast<const float*>(upload(b.weights, L.bq, &off));
    b.bk = static_cast<const float*>(upload(b.weights, L.bk, &off));
    b.bv = static_cast<const float*>(upload(b.weights, L.bv, &off));
    b.q_norm = static_cast<const float*>(upload(b.weights, L.attn_q_norm, &off));
    b.k_norm = static_cast<const float*>(upload(b.weights, L.attn_k_norm, &off));
    b.post_norm = static_cast<const float*>(upload(b.weights, L.post_attention_norm, &off));
    b.k_cache = b.kv.as<uint8_t>();
    b.v_cache = b.k_cache + placement_.kv_bytes_per_layer / 2;
  }
  KX_RETURN_IF_ERROR(dev.RecordEvent(StreamKind::kCritical, uploaded_));
  KX_RETURN_IF_ERROR(dev.StreamWaitEvent(StreamKind::kCompute, uploaded_));
  // Any copy error (they were enqueued without checking, above) surfaces here.
  return dev.EventSynchronize(uploaded_);
}

absl::Status DeviceLayers::Matvec(const WeightRef& host_w, const void* device_w, const float* x,
                                  float* y) {
  kx_cuda_matvec_args a{};
  a.struct_size = sizeof a;
  a.type = static_cast<uint32_t>(host_w.type);
  a.w = device_w;
  a.row_bytes = static_cast<int64_t>(host_w.row_bytes);
  a.n = host_w.n_in;
  a.rows = host_w.n_out;
  a.x = x;
  a.y = y;
  return device_->Launch(StreamKind::kCompute, "matvec", &a);
}

absl::Status DeviceLayers::AttentionBlock(int layer, float* x, int64_t pos) {
  KX_RETURN_IF_ERROR(BeginAttentionBlock(layer, x, pos));
  return EndStep();
}

absl::Status DeviceLayers::Head(const float* x, float* logits) {
  KX_RETURN_IF_ERROR(BeginHead(x, logits));
  return EndStep();
}

absl::Status DeviceLayers::BeginAttentionBlock(int layer, float* x, int64_t pos) {
  fault_ = steps_++ == config_.debug_fault_step;
  step_pending_ = status_.ok() && Begun(EnqueueAttentionBlock(layer, x, pos));
  return status_;
}

absl::Status DeviceLayers::BeginHead(const float* x, float* logits) {
  fault_ = steps_++ == config_.debug_fault_step;
  step_pending_ = status_.ok() && Begun(EnqueueHead(x, logits));
  return status_;
}

bool DeviceLayers::Begun(const absl::Status& enqueued) {
  if (enqueued.ok()) return true;
  status_ = enqueued;
  // Part of the step may be queued (a failed device drops the rest, but its copies may still
  // be landing): the caller goes on without waiting for the step's events, so wait here until
  // nothing queued can still touch the host's x or logits.
  (void)device_->Synchronize();
  return false;
}

bool DeviceLayers::StepEvents(const Event** up, const Event** gpu, const Event** down) const {
  if (!step_pending_) return false;
  *up = &uploaded_;
  *gpu = &computed_;
  *down = &returned_;
  return true;
}

absl::Status DeviceLayers::EndStep() {
  if (step_pending_) {
    step_pending_ = false;
    absl::Status st = device_->EventSynchronize(returned_);
    if (!st.ok() && status_.ok()) status_ = st;
  }
  return status_;
}

float* DeviceLayers::FaultOr(float* device_dst, float* host) { return fault_ ? host : device_dst; }

absl::Status DeviceLayers::EnqueueAttentionBlock(int layer, float* x, int64_t pos) {
  const LlamaHParams& hp = *config_.hp;
  const LlamaLayerWeights& L = config_.w->layers[layer];
  const LayerBuffers& b = layers_[layer];
  Device& dev = *device_;
  const uint64_t x_bytes = sizeof(float) * hp.n_embd;
  constexpr StreamKind kCompute = StreamKind::kCompute;

  KX_RETURN_IF_ERROR(dev.CopyH2D(StreamKind::kCritical, d_x_, x, x_bytes));
  KX_RETURN_IF_ERROR(dev.RecordEvent(StreamKind::kCritical, uploaded_));
  KX_RETURN_IF_ERROR(dev.StreamWaitEvent(kCompute, uploaded_));

  kx_cuda_rms_norm_args norm{};
  norm.struct_size = sizeof norm;
  norm.src = d_x_;
  norm.weight = static_cast<const float*>(b.attn_norm);
  norm.dst = d_xn_;
  norm.n_rows = 1;
  norm.n = hp.n_embd;
  norm.eps = hp.rms_eps;
  KX_RETURN_IF_ERROR(dev.Launch(kCompute, "rms_norm", &norm));
  KX_RETURN_IF_ERROR(Matvec(L.wq, b.wq, d_xn_, d_q_));
  KX_RETURN_IF_ERROR(Matvec(L.wk, b.wk, d_xn_, d_k_));
  KX_RETURN_IF_ERROR(Matvec(L.wv, b.wv, d_xn_, d_v_));

  const bool local = hp.IsLocalLayer(layer);
  kx_cuda_rope_store_kv_args rope{};
  rope.struct_size = sizeof rope;
  rope.q = d_q_;
  rope.k = d_k_;
  rope.v = d_v_;
  rope.q_bias = b.bq;
  rope.k_bias = b.bk;
  rope.v_bias = b.bv;
  rope.q_norm = b.q_norm;
  rope.k_norm = b.k_norm;
  rope.k_cache = b.k_cache;
  rope.v_cache = b.v_cache;
  rope.kv_type = config_.kv_q8 ? KX_CUDA_KV_Q8_0 : KX_CUDA_KV_F16;
  rope.rope_style = hp.rope_style == RopeStyle::kNeox ? KX_CUDA_ROPE_NEOX : KX_CUDA_ROPE_ADJACENT;
  rope.n_tokens = 1;
  rope.pos = pos;
  rope.n_head = hp.n_head;
  rope.n_kv_head = hp.n_head_kv;
  rope.head_dim = hp.head_dim;
  rope.n_rot = hp.n_rot;
  rope.freq_base = local ? hp.rope_freq_base_local : hp.rope_freq_base;
  rope.norm_eps = hp.rms_eps;
  KX_RETURN_IF_ERROR(dev.Launch(kCompute, "rope_store_kv", &rope));

  kx_cuda_attention_decode_args att{};
  att.struct_size = sizeof att;
  att.q = d_q_;
  att.k_cache = b.k_cache;
  att.v_cache = b.v_cache;
  att.dst = FaultOr(d_attn_, x);  // x only as the test fault: a host address, which faults
  att.workspace = d_workspace_;
  att.workspace_bytes = workspace_bytes_;
  att.kv_type = rope.kv_type;
  att.n_head = hp.n_head;
  att.n_kv_head = hp.n_head_kv;
  att.head_dim = hp.head_dim;
  att.pos = pos;
  att.window = local ? hp.sliding_window : 0;
  att.scale = hp.attn_scale;
  KX_RETURN_IF_ERROR(dev.Launch(kCompute, "attention_decode", &att));

  KX_RETURN_IF_ERROR(Matvec(L.wo, b.wo, d_attn_, d_ffo_));
  if (b.post_norm != nullptr) {  // Gemma: x += rmsnorm(attn_out)
    kx_cuda_rms_norm_args post{};
    post.struct_size = sizeof post;
    post.src = d_ffo_;
    post.weight = b.post_norm;
    post.residual = d_x_;
    post.dst = d_x_;
    post.n_rows = 1;
    post.n = hp.n_embd;
    post.eps = hp.rms_eps;
    KX_RETURN_IF_ERROR(dev.Launch(kCompute, "rms_norm", &post));
  } else {
    kx_cuda_add_args add{};
    add.struct_size = sizeof add;
    add.a = d_x_;
    add.b = d_ffo_;
    add.dst = d_x_;
    add.n = hp.n_embd;
    KX_RETURN_IF_ERROR(dev.Launch(kCompute, "add", &add));
  }
  KX_RETURN_IF_ERROR(dev.RecordEvent(kCompute, computed_));
  KX_RETURN_IF_ERROR(dev.StreamWaitEvent(StreamKind::kCritical, computed_));
  KX_RETURN_IF_ERROR(dev.CopyD2H(StreamKind::kCritical, x, d_x_, x_bytes));
  return dev.RecordEvent(StreamKind::kCritical, returned_);
}

absl::Status DeviceLayers::EnqueueHead(const float* x, float* logits) {
  const LlamaHParams& hp = *config_.hp;
  Device& dev = *device_;
  KX_RETURN_IF_ERROR(dev.CopyH2D(StreamKind::kCritical, d_x_, x, sizeof(float) * hp.n_embd));
  KX_RETURN_IF_ERROR(dev.RecordEvent(StreamKind::kCritical, uploaded_));
  KX_RETURN_IF_ERROR(dev.StreamWaitEvent(StreamKind::kCompute, uploaded_));
  kx_cuda_rms_norm_args norm{};
  norm.struct_size = sizeof norm;
  norm.src = d_x_;
  norm.weight = static_cast<const float*>(d_output_norm_);
  norm.dst = d_xn_;
  norm.n_rows = 1;
  norm.n = hp.n_embd;
  norm.eps = hp.rms_eps;
  KX_RETURN_IF_ERROR(dev.Launch(StreamKind::kCompute, "rms_norm", &norm));
  KX_RETURN_IF_ERROR(Matvec(config_.w->output, d_output_, d_xn_, FaultOr(d_logits_, logits)));
  KX_RETURN_IF_ERROR(dev.RecordEvent(StreamKind::kCompute, computed_));
  KX_RETURN_IF_ERROR(dev.StreamWaitEvent(StreamKind::kCritical, computed_));
  KX_RETURN_IF_ERROR(
      dev.CopyD2H(StreamKind::kCritical, logits, d_logits_, sizeof(float) * hp.n_vocab));
  return dev.RecordEvent(StreamKind::kCritical, returned_);
}

}  // namespace kx
