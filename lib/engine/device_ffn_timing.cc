// The split FFN's stall attribution (docs/device.md, "Where the time goes"): timing events
// around each layer step's device parts and each batch of bundle loads, and the rule that
// charges End's wait to them. Split from device_ffn.cc to keep it readable.
#include <algorithm>
#include <cmath>

#include "engine/device_ffn.h"

namespace kx {

absl::Status DeviceFfn::StartLoadBatch(int layer) {
  LayerState& L = layers_[layer];
  // A batch queued while the layer's last one is in flight extends it (one `loaded` event
  // per layer): the timed span then covers both.
  if (L.loads_pending) return absl::OkStatus();
  L.load_bytes = 0;
  return device_.RecordEvent(StreamKind::kBackground, L.load_started);
}

absl::Status DeviceFfn::EndLoadBatch(int layer) {
  LayerState& L = layers_[layer];
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kBackground, L.loaded));
  KX_RETURN_IF_ERROR(device_.RecordEvent(StreamKind::kBackground, bg_tail_));
  L.loads_pending = true;
  L.loads_timed = true;
  return absl::OkStatus();
}

void DeviceFfn::TimeLoads(int layer) {
  LayerState& L = layers_[layer];
  if (!L.loads_timed) return;
  L.loads_timed = false;
  // Both records completed (loaded after load_started on one stream); an error here only
  // loses the sample.
  absl::StatusOr<double> s = device_.EventElapsedSeconds(L.load_started, L.loaded);
  if (!s.ok()) return;
  stats_.load_batches_timed += 1;
  stats_.load_ns += static_cast<int64_t>(std::max(0.0, *s) * 1e9);
  stats_.load_bytes_timed += L.load_bytes;
}

void DeviceFfn::AttributeWait(DeviceFfnLayerStep& step) {
  step.gpu_ns = step.h2d_critical_ns = step.h2d_background_ns = step.other_ns = 0;
  step.upload_ns = step.compute_ns = step.download_ns = 0;
  int64_t rest = step.wait_ns;
  if (n_listed_ > 0) {
    // End waited for returned_, which follows the others on the streams: all completed. An
    // error (a negative control skipped a wait) leaves the step untimed: all of it is other.
    absl::StatusOr<double> up = device_.EventElapsedSeconds(started_, uploaded_);
    absl::StatusOr<double> gpu = device_.EventElapsedSeconds(uploaded_, computed_);
    absl::StatusOr<double> down = device_.EventElapsedSeconds(computed_, returned_);
    if (up.ok() && gpu.ok() && down.ok()) {
      const double up_s = std::max(0.0, *up);
      // The upload's own time vs its queueing behind bundle loads on a shared copy engine
      // (events cannot see inside the engine). With no load in flight at Begin it is all its
      // own, and teaches the baseline: a running mean and mean deviation of such uploads.
      // With loads in flight, what exceeds the baseline by more than twice the deviation (the
      // copies' own spread) waited for them. Before the first idle step the baseline is the
      // device's hints (latency + bytes / bandwidth per copy), when it has them.
      double own_s = up_s;
      if (!bg_busy_) {
        constexpr double kWeight = 0.125;  // about the last 8 idle steps
        if (upload_samples_ == 0) {
          upload_base_s_ = up_s;
        } else {
          upload_dev_s_ += kWeight * (std::fabs(up_s - upload_base_s_) - upload_dev_s_);
          upload_base_s_ += kWeight * (up_s - upload_base_s_);
        }
        ++upload_samples_;
      } else {
        const double model_s =
            upload_hint_bytes_per_s_ > 0
                ? kUploadCopies * upload_hint_latency_s_ +
                      static_cast<double>(UploadBytes(n_listed_)) / upload_hint_bytes_per_s_
                : 0.0;
        const double base_s = upload_samples_ > 0 ? upload_base_s_ + 2.0 * upload_dev_s_ : model_s;
        if (base_s > 0) own_s = std::min(up_s, base_s);
      }
      const auto ns = [](double s) { return static_cast<int64_t>(std::max(0.0, s) * 1e9); };
      step.upload_ns = ns(up_s);
      step.compute_ns = ns(*gpu);
      step.download_ns = ns(*down);
      const int64_t queued_ns = std::max<int64_t>(0, step.upload_ns - ns(own_s));
      // From the last part back: the host waited for the end of the device's timeline.
      const auto take = [&rest](int64_t part) {
        const int64_t t = std::min(rest, part);
        rest -= t;
        return t;
      };
      step.h2d_critical_ns += take(step.download_ns);
      step.gpu_ns += take(step.compute_ns);
      step.h2d_critical_ns += take(step.upload_ns - queued_ns);
      step.h2d_background_ns += take(queued_ns);
      stats_.timed_steps += 1;
    }
  }
  step.other_ns = rest;
}

}  // namespace kx
