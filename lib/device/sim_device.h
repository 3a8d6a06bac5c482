// The sim device: a simulated GPU on the CPU, for checking the logic of pipelines that move
// bytes between host and device on several streams (not for speed). It behaves like a GPU
// in the ways that make such pipelines wrong when an event is missing:
//
// - Memory: one arena of address space reserved at creation (the VRAM budget plus slack for
//   alignment), handed out in kDeviceAlignment blocks; device pointers are host addresses
//   inside it, never aliasing host tensors, so ops run CPU kernels on them. Poison is 0xFF
//   bytes (a quiet NaN as F16 and F32, -1 as int32): every allocation starts poisoned, every
//   free poisons, and Device::Poison poisons on request. Copies and ops check that their
//   device ranges lie inside live allocations (a GPU would fault); a copy that lands in
//   memory freed meanwhile is an error.
// - Streams: one worker thread per stream runs its queue in order (copies, memsets, ops,
//   event records and waits). A copy takes profile.CopySeconds(bytes) times a jitter factor
//   drawn uniformly from [1 - jitter, 1 + jitter] (seeded per stream from `seed`), slept on
//   the worker; its bytes move when it lands, at the end of that time, not when it is
//   enqueued. So reading a destination before the copy's event completes sees poison or
//   stale bytes, and copies on different streams complete in either order.
// - The host-to-device link: with profile.shared_h2d_link, host-to-device copies on every
//   stream take one link in turn (PCIe moves one transfer's bytes at a time, as kairox-sim's
//   link does): a critical (or compute-stream) copy waits for the copy in flight, at most one
//   background bundle, and queued background copies do not start while a critical one waits.
//   Without it each stream copies on its own engine. Device-to-host copies never share with
//   host-to-device ones (PCIe is full duplex).
// - Timing events (CreateTimingEvent) note the steady-clock time their record ran on the
//   worker; EventElapsedSeconds subtracts two such times.
// - Ops run on their stream's worker through sim_ops.h, with no modelled compute time.
//   Landings, memsets, ops and Peek hold one lock over the arena's contents, so a missing
//   event gives wrong values, never a data race inside the simulator itself.
// - Errors while queued work runs (an op's error, a copy into freed memory) are sticky: the
//   rest of the queued copies and ops are dropped (records and waits still run, so nothing
//   hangs), and every later call returns the first error.
// - Negative control: debug_skip_wait_index / debug_skip_all_waits turn the N-th (0-based,
//   counted over StreamWaitEvent and EventSynchronize calls in call order) or every wait into
//   a no-op, so tests can show that their equivalence checks fail when ordering is broken.
//
// Usage:
//   kx::SimOptions o;
//   KX_ASSIGN_OR_RETURN(o.profile, kx::LoadDeviceProfile("rtx4090-pcie4"));
//   o.vram_limit = 256ull << 20;
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<kx::SimDevice> sim, kx::SimDevice::Create(o));
//   // ... use it as a kx::Device (device.h); sim->Peek(...) reads device bytes directly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "device/device.h"
#include "device/device_profile.h"

namespace kx {

struct SimOptions {
  DeviceProfile profile;
  uint64_t vram_limit = 0;              // the VRAM budget; 0 = the profile's memory
  MemoryBudget* host_budget = nullptr;  // pinned buffers count here; null = not counted
  uint64_t seed = 0;
  double jitter = 0.3;             // in [0, 1): relative spread of copy durations
  uint32_t queue_capacity = 1024;  // commands per stream; enqueueing blocks when full
  bool record_landings = false;    // keep the completion order of copies (Landings())
  // Negative controls (see above): skip one wait, or all of them.
  std::optional<uint64_t> debug_skip_wait_index;
  bool debug_skip_all_waits = false;
};

// One completed copy, in completion order.
struct SimLanding {
  StreamKind stream;
  CopyDirection direction;
  uint64_t index;  // the copy's enqueue index on its stream, counting every command from 0
  uint64_t bytes;
};

class SimDevice final : public Device {
 public:
  // InvalidArgument for a bad option (a budget above the profile's memory, jitter outside
  // [0, 1), a zero queue); ResourceExhausted when the arena's address space is refused.
  static absl::StatusOr<std::unique_ptr<SimDevice>> Create(const SimOptions& options);
  // Waits for all queued work, then stops the workers.
  ~SimDevice() override;

  // Copies device bytes to the host now, bypassing the streams: what a kernel would read at
  // this instant. Any arena address may be read (freed memory shows its poison).
  absl::Status Peek(void* dst_host, const void* src_device, uint64_t bytes);
  // Copies landed so far (empty unless record_landings; at most the first 4096).
  std::vector<SimLanding> Landings() const;
  // Waits skipped by the debug switches so far.
  uint64_t skipped_waits() const;

 protected:
  absl::StatusOr<DeviceInfo> DoInfo() override;
  absl::StatusOr<void*> DoAlloc(uint64_t bytes) override;
  void DoFree(void* ptr, uint64_t bytes) override;
  absl::StatusOr<void*> DoAllocPinned(uint64_t bytes) override;
  void DoFreePinned(void* ptr, uint64_t bytes) override;
  absl::Status DoPoison(void* ptr, uint64_t bytes) override;
  absl::StatusOr<void*> DoCreateEvent(bool timing) override;
  absl::StatusOr<double> DoEventElapsedSeconds(void* start, void* end) override;
  void DoDestroyEvent(void* event) override;
  absl::Status DoRecordEvent(StreamKind stream, void* event) override;
  absl::Status DoStreamWaitEvent(StreamKind stream, void* event) override;
  absl::Status DoEventSynchronize(void* event) override;
  absl::StatusOr<bool> DoEventQuery(void* event) override;
  absl::Status DoStreamSynchronize(StreamKind stream) override;
  absl::Status DoCopy(StreamKind stream, CopyDirection direction, void* dst, const void* src,
                      uint64_t bytes) override;
  absl::Status DoMemset(StreamKind stream, void* dst, uint8_t value, uint64_t bytes) override;
  const void* DoFindOp(std::string_view op) override;
  absl::Status DoLaunch(StreamKind stream, const OpRef& op, const void* args) override;

 private:
  struct Impl;
  SimDevice(const SimOptions& options, std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kx
