// The engine's device side at load and per token: the attention layers and the head on the
// device (engine/device_layers.h), the split FFN in what the device has left
// (engine/device_ffn.h), and their sticky status.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/size_parse.h"
#include "device/open_device.h"
#include "engine/engine_impl.h"

namespace kx {

// EngineOptions::device → the device's share of the model (engine/device_layers.h), or none.
absl::Status OpenDeviceLayers(Engine::Impl& m) {
  const EngineOptions& o = m.options;
  if (o.n_gpu_layers < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-ngl must be -1 (all that fit), 0 or a layer count, got ", o.n_gpu_layers));
  }
  DeviceOptions d;
  absl::StatusOr<std::optional<DeviceKind>> kind = ParseDeviceKind(o.device);
  if (!kind.ok())
    return absl::InvalidArgumentError(absl::StrCat("--device: ", kind.status().message()));
  d.kind = *kind;
  if (!o.vram_budget.empty()) {
    absl::StatusOr<SizeSpec> spec = ParseSize(o.vram_budget);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--vram-budget: ", spec.status().message()));
    }
    if (!spec->is_percent && spec->bytes == 0) {
      Log().info("--vram-budget 0: nothing on the device");
      return absl::OkStatus();
    }
    d.vram_budget = *spec;
  }
  d.profile = o.device_profile;
  d.host_budget = m.ram.get();
  d.seed = o.device_seed;
  if (o.debug_skip_event_wait >= 0) {
    d.debug_skip_wait_index = static_cast<uint64_t>(o.debug_skip_event_wait);
  }
  KX_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, OpenDevice(d));
  if (dev == nullptr) {
    if (!o.vram_budget.empty() || o.n_gpu_layers > 0) {
      Log().warn("no device (--device {}): --vram-budget and -ngl have nothing to place", o.device);
    }
    return absl::OkStatus();
  }
  const DeviceLayers::Config c{.hp = &m.hp,
                               .w = &m.w,
                               .n_ctx = m.n_ctx,
                               .kv_row_bytes = m.kv_row_bytes,
                               .kv_q8 = m.kv_type == EngineOptions::KvType::kQ8_0,
                               .n_gpu_layers = o.n_gpu_layers,
                               .debug_fault_step = o.debug_device_layer_fault};
  KX_ASSIGN_OR_RETURN(m.device, DeviceLayers::Create(c, std::move(dev)));
  return absl::OkStatus();
}

// EngineOptions::vram_ffn → the split FFN (engine/device_ffn.h) in what the device has left,
// or none (no device, no sidecar, bundles not used in decode, or "0").
absl::Status OpenDeviceFfn(Engine::Impl& m) {
  const EngineOptions& o = m.options;
  if (m.device == nullptr || m.sparse == nullptr) {
    if (!o.vram_ffn.empty() && o.vram_ffn != "0") {
      Log().warn("--vram-ffn {}: no {} for the split FFN", o.vram_ffn,
                 m.device == nullptr ? "device" : "sidecar");
    }
    return absl::OkStatus();
  }
  // Asked as if attached: a trace keeps the split FFN (it records the predicted sets).
  if (!m.sparse->DecodesBundles(/*with_device_ffn=*/true)) {
    Log().info("device FFN: off (decode runs masked-dense)");
    return absl::OkStatus();
  }
  const sparse::Sidecar& sc = m.sparse->sidecar();
  Device& dev = m.device->device();
  const uint64_t scratch = DeviceFfn::ScratchBytes(sc);
  const uint64_t left = dev.vram().limit() - dev.vram().used();
  const uint64_t all =
      static_cast<uint64_t>(sc.n_layer()) * sc.layer(0).layout.n_groups * DeviceFfn::SlotBytes(sc);
  uint64_t slots = left > scratch ? left - scratch : 0;
  if (!o.vram_ffn.empty()) {
    absl::StatusOr<SizeSpec> spec = ParseSize(o.vram_ffn);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--vram-ffn: ", spec.status().message()));
    }
    if (!spec->is_percent && spec->bytes == 0) {
      Log().info("--vram-ffn 0: the FFN stays on the CPU");
      return absl::OkStatus();
    }
    const uint64_t want =
        spec->is_percent ? static_cast<uint64_t>(spec->percent / 100.0 * static_cast<double>(all))
                         : spec->bytes;
    if (want + scratch > left) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "--vram-ffn ", o.vram_ffn, " needs ", FormatBytes(want + scratch), " of device memory (",
          FormatBytes(want), " of bundle slots, ", FormatBytes(scratch), " of scratch); the ",
          "VRAM budget leaves ", FormatBytes(left), " after the attention layers and the head (",
          dev.vram().Report(), "); lower -ngl or raise --vram-budget"));
    }
    slots = want;
  }
  if (left < scratch) {
    Log().info("device FFN: off (the VRAM budget leaves {}, its scratch needs {})",
               FormatBytes(left), FormatBytes(scratch));
    return absl::OkStatus();
  }
  DeviceFfnOptions fo;
  fo.slot_bytes = std::min(slots, all);
  fo.policy = o.device_policy;
  fo.log_path = o.device_log;
  if (o.device_staging_bundles >= 0) fo.staging_bundles = o.device_staging_bundles;
  fo.debug_skip_staging_wait = o.debug_skip_staging_wait;
  KX_ASSIGN_OR_RETURN(m.device_ffn, DeviceFfn::Create(dev, sc, *m.kernels, m.hp.ffn_act,
                                                      m.hp.ffn_act_threshold, fo));
  m.sparse->AttachDevice(m.device_ffn.get());
  return absl::OkStatus();
}

// The first device error of the attention layers or the split FFN (sticky), or OK.
absl::Status DeviceStatus(const Engine::Impl& m) {
  if (m.device != nullptr && !m.device->status().ok()) {
    return absl::InternalError(
        absl::StrCat("device ", m.device->device().name(), ": ", m.device->status().message()));
  }
  if (m.device_ffn != nullptr && !m.device_ffn->status().ok()) {
    return absl::InternalError(absl::StrCat("device ", m.device->device().name(),
                                            ": split FFN: ", m.device_ffn->status().message()));
  }
  return absl::OkStatus();
}

}  // namespace kx
