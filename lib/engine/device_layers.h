// The part of the model that runs on a device (lib/device): the non-FFN part of the first
// layers — attention norm, Q/K/V/O projections, biases, QK-norm, RoPE, the KV cache and
// attention, the post-attention norm and the residual add — and the LM head with the final
// norm. The FFN stays on the CPU (dense or sparse, RAM or disk tier), so the hidden state
// crosses once each way per device layer: host → device before the layer's attention,
// device → host after its residual add.
//
// Placement (at session creation, documented in docs/device.md): the device's scratch first
// (the hidden state, q/k/v, the attention output and its workspace, logits), then the LM
// head with the output norm when it fits what is left, then layers 0, 1, … in order, each
// with its attention weights and its KV cache (2 · n_ctx rows), while they fit and at most
// n_gpu_layers of them (-ngl; -1: all that fit; 0: nothing on the device, not even the head).
// Every byte is reserved from the device's VRAM budget under a name ("scratch", "LM head",
// "layer weights", "KV cache"); weights are copied to the device byte for byte (GGUF blocks
// as the file stores them), once.
//
// Each op goes through Device::Launch by name with the CUDA op's argument struct
// (kernels/cuda/<op>.cuh): the cuda device runs the CUDA kernels, the sim device runs the CPU
// kernels (lib/device/sim_ops) — the same arithmetic as the CPU path, so on sim the logits
// equal the CPU path's bit for bit. Copies go on the critical stream, ops on the compute
// stream, ordered by events (never by the host waiting in between).
//
// Usage (engine-internal; forward.cc):
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<DeviceLayers> dl, DeviceLayers::Create(m, std::move(dev)));
//   if (dl->OnDevice(l)) KX_RETURN_IF_ERROR(dl->AttentionBlock(l, x_row, pos));
//   if (dl->head()) KX_RETURN_IF_ERROR(dl->Head(x_row, logits_row));
// The decode graph (decode_graph.h) splits a step in two: BeginAttentionBlock / BeginHead
// enqueue it and return, StepEvents gives the events its externals wait for, and EndStep
// (in the node after them) waits for the download and reports the status.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "device/device.h"
#include "model/llama.h"

namespace kx {

struct DevicePlacement {
  int n_layers = 0;   // layers [0, n_layers) have their non-FFN part on the device
  bool head = false;  // the output norm and the LM head
  uint64_t scratch_bytes = 0;
  uint64_t head_bytes = 0;
  std::vector<uint64_t> layer_weight_bytes;  // per placed layer
  uint64_t kv_bytes_per_layer = 0;
};

// The placement rule above, for a budget of `vram_bytes` (pure: tests call it directly).
DevicePlacement PlanDevicePlacement(const LlamaHParams& hp, const LlamaWeights& w, int n_ctx,
                                    uint64_t kv_row_bytes, uint64_t vram_bytes, int n_gpu_layers);

class DeviceLayers {
 public:
  struct Config {
    const LlamaHParams* hp = nullptr;
    const LlamaWeights* w = nullptr;
    int n_ctx = 0;
    uint64_t kv_row_bytes = 0;
    bool kv_q8 = false;
    int n_gpu_layers = -1;
    int64_t debug_fault_step = -1;  // EngineOptions::debug_device_layer_fault
  };
  // Plans, reserves and uploads. A device whose budget holds nothing gives a DeviceLayers
  // with no layers and no head (the session then runs on the CPU) and a log line saying why.
  static absl::StatusOr<std::unique_ptr<DeviceLayers>> Create(const Config& config,
                                                              std::unique_ptr<Device> device);
  ~DeviceLayers();

  bool OnDevice(int layer) const { return layer < placement_.n_layers; }
  int n_layers() const { return placement_.n_layers; }
  bool head() const { return placement_.head; }
  Device& device() { return *device_; }
  const DevicePlacement& placement() const { return placement_; }

  // Layer `layer`'s attention block for one token at position `pos`, in place on the hidden
  // state x (n_embd floats, host): x += attention(x) (with Gemma's post-attention norm).
  // Writes the layer's device KV cache at `pos`. Blocks until x is back on the host.
  // The first error is kept (status()); every later call returns it without running.
  absl::Status AttentionBlock(int layer, float* x, int64_t pos);
  // logits = output · rmsnorm(x) for one token (n_vocab floats, host); x is not changed.
  absl::Status Head(const float* x, float* logits);
  // OK, or the first error of AttentionBlock/Head (sticky: a device error leaves its queues
  // in an unknown state; the session must be recreated).
  const absl::Status& status() const { return status_; }

  // The same steps without the host's wait: enqueue the upload, the kernels and the
  // download (into x, or logits) and return. x (logits) must stay untouched until EndStep.
  // After an error nothing is enqueued and StepEvents says so.
  absl::Status BeginAttentionBlock(int layer, float* x, int64_t pos);
  absl::Status BeginHead(const float* x, float* logits);
  // The step begun last: its upload landed (up), its kernels ran (gpu), its download landed
  // (down) — each completes after the one before. False when that step enqueued nothing
  // (an error before or while enqueueing): nothing will complete, so the caller does not wait.
  bool StepEvents(const Event** up, const Event** gpu, const Event** down) const;
  // Waits for the step begun last (a no-op when it enqueued nothing); returns status().
  absl::Status EndStep();

 private:
  DeviceLayers(const Config& config, std::unique_ptr<Device> device, DevicePlacement placement);
  absl::Status Upload();
  absl::Status EnqueueAttentionBlock(int layer, float* x, int64_t pos);
  absl::Status EnqueueHead(const float* x, float* logits);
  // Keeps the first error; whether the step's work is all enqueued.
  bool Begun(const absl::Status& enqueued);
  // Test fault (Config::debug_fault_step): the output pointer this step's faulting kernel
  // gets instead of `device_dst`.
  float* FaultOr(float* device_dst, float* host);
  absl::Status Matvec(const WeightRef& host_w, const void* device_w, const float* x, float* y);

  struct LayerBuffers;
  Config config_;
  std::unique_ptr<Device> device_;
  DevicePlacement placement_;
  std::vector<LayerBuffers> layers_;
  DeviceBuffer scratch_;
  DeviceBuffer head_weights_;
  Event uploaded_, computed_, returned_;
  // Device views into scratch_.
  float *d_x_ = nullptr, *d_xn_ = nullptr, *d_q_ = nullptr, *d_k_ = nullptr, *d_v_ = nullptr,
        *d_attn_ = nullptr, *d_ffo_ = nullptr, *d_logits_ = nullptr, *d_workspace_ = nullptr;
  uint64_t workspace_bytes_ = 0;
  const void* d_output_norm_ = nullptr;
  const void* d_output_ = nullptr;
  absl::Status status_;
  bool step_pending_ = false;  // the last Begin enqueued a step EndStep has not waited for
  int64_t steps_ = 0;          // steps begun (the fault injection counts them)
  bool fault_ = false;         // this step is Config::debug_fault_step
};

}  // namespace kx
