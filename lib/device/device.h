// The device layer: one interface for a GPU that holds part of a model, shaped like CUDA so
// that the CUDA implementation is a thin layer over the module's C table.
//
// A Device has (after ggml-backend's device -> stream -> buffer layering):
// - memory under a hard VRAM budget with named accounting (vram()): Alloc reserves under
//   `what` before it allocates and fails with ResourceExhausted naming what, how much and
//   the limit; pinned host staging buffers counted against an optional host budget;
// - three fixed streams (StreamKind): compute (op launches), critical (copies the current
//   token waits for) and background (prefetches, reloads), each executing its work in the
//   order it was enqueued, the three concurrently with one another;
// - events, created once and recorded again and again (cudaEvent_t semantics): RecordEvent
//   marks the stream's work so far, StreamWaitEvent makes a stream wait for it,
//   EventSynchronize/EventQuery let the host wait or poll;
// - asynchronous copies (host->device, device->host, device->device) and memsets on a stream;
// - named ops: Launch(stream, "axpy_rows_f16", &args) with the op's C argument struct
//   (kx_cuda_<op>_args, which starts with uint32_t struct_size). The cuda device finds the op
//   in the module (kx_cuda_api::find_op), the sim device in lib/device/sim_ops.h.
//
// Implementations: "sim" (sim_device.h: a simulated GPU on the CPU, for the correctness of
// pipeline logic) and "cuda" (cuda_device.h). Open one with OpenDevice (open_device.h).
//
// Ownership: DeviceBuffer and Event are move-only handles that free themselves; they must
// not outlive their Device (destroying a Device that still has live handles aborts).
// Thread safety: every member may be called from any thread. Work enqueued on one stream
// runs in the order the enqueueing calls returned; callers that enqueue on one stream from
// several threads order those calls themselves. Host memory given to an asynchronous copy
// must stay valid and unchanged (source) or untouched (destination) until the copy is known
// complete through an event or a synchronize, as with cudaMemcpyAsync.
// Errors: argument errors come back from the call that made them. Errors that happen while
// queued work runs (a failed op) surface at the next call and are sticky: the device then
// fails every call (as CUDA does after a kernel fault) and must be reopened.
//
// Usage: upload, compute, download; the compute stream waits for the upload.
//   KX_ASSIGN_OR_RETURN(std::unique_ptr<kx::Device> dev, kx::OpenDevice(options));
//   KX_ASSIGN_OR_RETURN(kx::DeviceBuffer w, dev->Alloc("ffn weights", w_bytes));
//   KX_ASSIGN_OR_RETURN(kx::Event uploaded, dev->CreateEvent());   // once, not per token
//   KX_ASSIGN_OR_RETURN(kx::Event computed, dev->CreateEvent());
//   KX_RETURN_IF_ERROR(dev->CopyH2D(kx::StreamKind::kCritical, w.data(), host_w, w_bytes));
//   KX_RETURN_IF_ERROR(dev->RecordEvent(kx::StreamKind::kCritical, uploaded));
//   KX_RETURN_IF_ERROR(dev->StreamWaitEvent(kx::StreamKind::kCompute, uploaded));
//   KX_RETURN_IF_ERROR(dev->Launch(kx::StreamKind::kCompute, "axpy_rows_f16", &args));
//   KX_RETURN_IF_ERROR(dev->RecordEvent(kx::StreamKind::kCompute, computed));
//   KX_RETURN_IF_ERROR(dev->StreamWaitEvent(kx::StreamKind::kCritical, computed));
//   KX_RETURN_IF_ERROR(dev->CopyD2H(kx::StreamKind::kCritical, host_y, y.data(), y_bytes));
//   KX_RETURN_IF_ERROR(dev->StreamSynchronize(kx::StreamKind::kCritical));   // host_y ready
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/memory_budget.h"
#include "base/status.h"
#include "device/device_profile.h"

namespace kx {

// What runs a model's layers. Device::kind() is kSim or kCuda; kCpu means "no Device"
// (OpenDevice returns nullptr for it).
enum class DeviceKind : uint8_t { kCpu, kCuda, kSim };
std::string_view DeviceKindName(DeviceKind kind);  // "cpu", "cuda", "sim"

enum class StreamKind : uint8_t {
  kCompute = 0,     // op launches
  kCritical = 1,    // copies the current token waits for
  kBackground = 2,  // prefetches and reloads that must not delay critical copies
};
inline constexpr int kStreamCount = 3;
std::string_view StreamKindName(StreamKind stream);  // "compute", "critical", "background"

// Device memory returned by Alloc is aligned to this many bytes (cudaMalloc's guarantee).
inline constexpr uint64_t kDeviceAlignment = 256;

struct DeviceInfo {
  std::string name;          // "sim:rtx4090-pcie4", "cuda:0 NVIDIA H100 PCIe"
  uint64_t total_bytes = 0;  // the device's memory (the profile's, for sim)
  uint64_t free_bytes = 0;   // now, as the device reports it (total - vram().used() for sim)
  // Hints from the device profile for planning transfers; 0 = unknown.
  double h2d_bytes_per_s = 0.0;
  double d2h_bytes_per_s = 0.0;
  double device_bytes_per_s = 0.0;
  double copy_latency_s = 0.0;
};

class Device;

// Device memory from Device::Alloc, or pinned host memory from Device::AllocPinned: a
// move-only handle that frees the memory (and its budget reservation) when destroyed, reset
// or passed to Device::Free. data() is a device pointer for device memory (not readable by
// the host on cuda; a host address inside the sim device's arena on sim).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  uint64_t bytes() const { return bytes_; }
  const std::string& what() const { return what_; }  // the budget entry it is counted under
  bool pinned_host() const { return pinned_host_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  // Frees now (no-op when empty).
  void Reset();

 private:
  friend class Device;
  Device* owner_ = nullptr;
  void* ptr_ = nullptr;
  uint64_t bytes_ = 0;
  bool pinned_host_ = false;
  std::string what_;
};

// An event from Device::CreateEvent (a cudaEvent_t without timing) or CreateTimingEvent
// (with: EventElapsedSeconds reads it): move-only, destroyed with the handle. Before its
// first RecordEvent it counts as complete.
class Event {
 public:
  Event() = default;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { Reset(); }

  explicit operator bool() const { return handle_ != nullptr; }
  void Reset();

 private:
  friend class Device;
  Device* owner_ = nullptr;
  void* handle_ = nullptr;
};

// A resolved op: FindOp once, Launch many times without a name lookup. Valid while its
// device lives.
struct OpRef {
  const void* impl = nullptr;  // the device's own entry (a SimOp*, a CUDA launcher)
  std::string_view name;
};

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  DeviceKind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  absl::StatusOr<DeviceInfo> Info() { return DoInfo(); }

  // The VRAM budget every Alloc reserves from (entries are the `what` names).
  MemoryBudget& vram() { return vram_; }
  // The host budget pinned buffers count against; null = not counted.
  MemoryBudget* host_budget() const { return host_budget_; }

  // Reserves `bytes` under `what` in vram(), then allocates (kDeviceAlignment-aligned).
  // ResourceExhausted (naming the device, what, how much and the limit) when over budget or
  // when the device itself is out of memory; nothing stays reserved or allocated then.
  // InvalidArgument for 0 bytes.
  absl::StatusOr<DeviceBuffer> Alloc(std::string_view what, uint64_t bytes);
  // Page-locked host memory for staging copies, counted under `what` in host_budget().
  absl::StatusOr<DeviceBuffer> AllocPinned(std::string_view what, uint64_t bytes);
  // Frees `buffer` (device or pinned) and releases its reservation; leaves it empty. The
  // caller makes sure no queued work still uses it (an event or a synchronize).
  void Free(DeviceBuffer& buffer);
  // Overwrites [offset, offset + bytes) of a device buffer with poison at once (not on a
  // stream), for callers that evict a slot: sim fills 0xFF bytes (NaN as F16 and F32, -1 as
  // int32), so reading an evicted slot shows; cuda does nothing. OutOfRange past the end.
  absl::Status Poison(const DeviceBuffer& buffer, uint64_t offset, uint64_t bytes);

  absl::StatusOr<Event> CreateEvent();
  // An event that also notes when its latest record completed, for EventElapsedSeconds.
  // cuda: cudaEventDefault (recording it costs more than a plain event's), so only events
  // that are timed should be made this way; sim: the worker's steady-clock time.
  absl::StatusOr<Event> CreateTimingEvent();
  // Seconds from `start`'s latest record completing to `end`'s (cudaEventElapsedTime;
  // negative when `end` completed first). Both must be timing events of this device whose
  // latest records have completed: FailedPrecondition when one was never recorded or is still
  // pending, InvalidArgument for an event without timing. Such an error is not sticky.
  absl::StatusOr<double> EventElapsedSeconds(const Event& start, const Event& end);
  // Captures the work enqueued on `stream` so far; the event completes when that work has.
  absl::Status RecordEvent(StreamKind stream, Event& event);
  // Work enqueued on `stream` after this call starts only once the event's latest record
  // (as of this call) has completed. Does not block the host.
  absl::Status StreamWaitEvent(StreamKind stream, const Event& event);
  // Blocks until the event's latest record completed; then reports any sticky error.
  absl::Status EventSynchronize(const Event& event);
  // True when the event's latest record completed (or it was never recorded).
  absl::StatusOr<bool> EventQuery(const Event& event);
  // Blocks until everything enqueued on `stream` so far completed.
  absl::Status StreamSynchronize(StreamKind stream);
  // StreamSynchronize on every stream.
  absl::Status Synchronize();

  // Asynchronous copies and memset on `stream`. dst/src ranges must lie inside device
  // buffers on the device side (sim checks; InvalidArgument otherwise). 0 bytes: no-op.
  absl::Status CopyH2D(StreamKind stream, void* dst_device, const void* src_host, uint64_t bytes);
  absl::Status CopyD2H(StreamKind stream, void* dst_host, const void* src_device, uint64_t bytes);
  absl::Status CopyD2D(StreamKind stream, void* dst_device, const void* src_device, uint64_t bytes);
  absl::Status Memset(StreamKind stream, void* dst_device, uint8_t value, uint64_t bytes);

  // Whether this device has the op (a name like "axpy_rows_f16").
  bool Supports(std::string_view op);
  // The op, looked up once and cached; NotFound naming the op and the device.
  absl::StatusOr<OpRef> FindOp(std::string_view op);
  // Enqueues the op on `stream`. `args` points to its kx_cuda_<op>_args; it is read before
  // Launch returns (as kernel arguments are), so it need not outlive the call. Pointers
  // inside it are device pointers.
  absl::Status Launch(StreamKind stream, std::string_view op, const void* args);
  absl::Status Launch(StreamKind stream, const OpRef& op, const void* args);

 protected:
  Device(DeviceKind kind, std::string name, uint64_t vram_limit, MemoryBudget* host_budget);

  // Aborts when a buffer or event of this device is still alive: the handle would free into
  // a destroyed device. Implementations call it first thing in their destructors.
  void CheckNoLiveHandles() const;

  // The implementation's side. Arguments are checked by the public members above (stream in
  // range, events owned by this device, non-null pointers for non-zero sizes).
  virtual absl::StatusOr<DeviceInfo> DoInfo() = 0;
  virtual absl::StatusOr<void*> DoAlloc(uint64_t bytes) = 0;
  virtual void DoFree(void* ptr, uint64_t bytes) = 0;
  virtual absl::StatusOr<void*> DoAllocPinned(uint64_t bytes) = 0;
  virtual void DoFreePinned(void* ptr, uint64_t bytes) = 0;
  virtual absl::Status DoPoison(void* ptr, uint64_t bytes) = 0;
  virtual absl::StatusOr<void*> DoCreateEvent(bool timing) = 0;
  virtual absl::StatusOr<double> DoEventElapsedSeconds(void* start, void* end) = 0;
  virtual void DoDestroyEvent(void* event) = 0;
  virtual absl::Status DoRecordEvent(StreamKind stream, void* event) = 0;
  virtual absl::Status DoStreamWaitEvent(StreamKind stream, void* event) = 0;
  virtual absl::Status DoEventSynchronize(void* event) = 0;
  virtual absl::StatusOr<bool> DoEventQuery(void* event) = 0;
  virtual absl::Status DoStreamSynchronize(StreamKind stream) = 0;
  virtual absl::Status DoCopy(StreamKind stream, CopyDirection direction, void* dst,
                              const void* src, uint64_t bytes) = 0;
  virtual absl::Status DoMemset(StreamKind stream, void* dst, uint8_t value, uint64_t bytes) = 0;
  // The op's entry, or null when the device does not have it.
  virtual const void* DoFindOp(std::string_view op) = 0;
  virtual absl::Status DoLaunch(StreamKind stream, const OpRef& op, const void* args) = 0;

 private:
  friend class DeviceBuffer;
  friend class Event;
  void ReleaseBuffer(DeviceBuffer& buffer);
  void ReleaseEvent(Event& event);
  absl::StatusOr<Event> NewEvent(bool timing);
  absl::Status CheckEvent(const Event& event, const char* call) const;

  const DeviceKind kind_;
  const std::string name_;
  MemoryBudget vram_;
  MemoryBudget* const host_budget_;

  mutable std::mutex mu_;                                // guards ops_ and the live-handle counts
  std::map<std::string, const void*, std::less<>> ops_;  // node-based: OpRef names stay valid
  int64_t live_buffers_ = 0;
  int64_t live_events_ = 0;
};

}  // namespace kx
