// The split FFN's pinned staging ring for bundle loads (DeviceFfnOptions::staging_bundles):
// split from device_ffn.cc to keep it readable.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/size_parse.h"
#include "base/timer.h"
#include "engine/device_ffn.h"

namespace kx {
namespace {
constexpr char kRingName[] = "FFN load staging (pinned)";
constexpr int kMinRing = 2;  // one buffer filling while the other's copy is in flight
}  // namespace

absl::Status DeviceFfn::InitStagingRing() {
  ring_n_ = 0;
  if (slots_per_layer_ == 0 || options_.staging_bundles <= 0) return absl::OkStatus();
  // A step queues at most slots_per_layer_ loads and the next layer's Prepare the next step's:
  // more buffers than two steps' loads would only wait idle.
  int n = std::min(options_.staging_bundles, 2 * slots_per_layer_);
  n = std::max(n, kMinRing);
  absl::StatusOr<DeviceBuffer> ring = device_.AllocPinned(kRingName, stride_ * n);
  while (!ring.ok() && absl::IsResourceExhausted(ring.status()) && n > kMinRing) {
    n = std::max(kMinRing, n / 2);
    ring = device_.AllocPinned(kRingName, stride_ * n);
  }
  if (!ring.ok()) {
    if (!absl::IsResourceExhausted(ring.status())) return ring.status();
    Log().info("device FFN: no pinned staging for bundle loads ({}); they copy from their source",
               std::string(ring.status().message()));
    return absl::OkStatus();
  }
  ring_ = std::move(*ring);
  ring_events_.clear();
  ring_events_.reserve(n);
  for (int i = 0; i < n; ++i) {
    KX_ASSIGN_OR_RETURN(Event e, device_.CreateEvent());
    ring_events_.push_back(std::move(e));
  }
  ring_used_.assign(n, 0);
  ring_next_ = 0;
  ring_n_ = n;
  Log().debug("device FFN: bundle loads staged through {} pinned buffers ({})", n,
              FormatBytes(stride_ * n));
  return absl::OkStatus();
}

absl::Status DeviceFfn::LoadBundle(int layer, int slot, const uint8_t* src) {
  if (ring_n_ == 0) {
    return device_.CopyH2D(StreamKind::kBackground, SlotPtr(layer, slot), src, stride_);
  }
  const int r = ring_next_;
  ring_next_ = ring_next_ + 1 == ring_n_ ? 0 : ring_next_ + 1;
  uint8_t* stage = ring_.as<uint8_t>() + stride_ * static_cast<uint64_t>(r);
  if (ring_used_[r] != 0 && !options_.debug_skip_staging_wait) {
    // The copy that read this buffer ring_n_ loads ago: normally landed long since.
    KX_ASSIGN_OR_RETURN(bool done, device_.EventQuery(ring_events_[r]));
    if (!done) {
      const int64_t t0 = NowNs();
      KX_RETURN_IF_ERROR(device_.EventSynchronize(ring_events_[r]));
      stats_.staging_wait_ns += NowNs() - t0;
    }
  }
  std::memcpy(stage, src, stride_);
  KX_RETURN_IF_ERROR(
      device_.CopyH2D(StreamKind::kBackground, SlotPtr(layer, slot), stage, stride_));
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kBackground, ring_events_[r]));
  ring_used_[r] = 1;
  stats_.staged_loads += 1;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DeviceFfn::CountStaleSlots() const {
  KX_RETURN_IF_ERROR(device_.StreamSynchronize(StreamKind::kBackground));
  std::vector<uint8_t> got(stride_);
  int64_t stale = 0;
  for (int l = 0; l < n_layer_; ++l) {
    const uint8_t* bundles = sidecar_.layer(l).bundles;
    if (bundles == nullptr) {
      return absl::FailedPreconditionError("device FFN: the sidecar's bundles are not mapped");
    }
    for (int s = 0; s < slots_per_layer_; ++s) {
      if (residency_->state(l, s) == policy::SlotState::kFree) continue;
      const int g = residency_->group_of(l, s);
      KX_RETURN_IF_ERROR(
          device_.CopyD2H(StreamKind::kCritical, got.data(), SlotPtr(l, s), stride_));
      KX_RETURN_IF_ERROR(device_.StreamSynchronize(StreamKind::kCritical));
      if (std::memcmp(got.data(), bundles + stride_ * static_cast<uint64_t>(g), stride_) != 0) {
        ++stale;
      }
    }
  }
  return stale;
}

}  // namespace kx
