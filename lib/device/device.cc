#include "device/device.h"

#include <utility>

#include "base/check.h"
#include "base/size_parse.h"

namespace kx {
namespace {

bool ValidStream(StreamKind stream) {
  return static_cast<int>(stream) < kStreamCount;  // the enum is unsigned
}

absl::Status BadStream(const char* call) {
  return absl::InvalidArgumentError(absl::StrCat(call, ": not a stream"));
}

}  // namespace

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
    case DeviceKind::kSim:
      return "sim";
  }
  return "?";
}

std::string_view StreamKindName(StreamKind stream) {
  switch (stream) {
    case StreamKind::kCompute:
      return "compute";
    case StreamKind::kCritical:
      return "critical";
    case StreamKind::kBackground:
      return "background";
  }
  return "?";
}

// ---- Handles ------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      pinned_host_(std::exchange(other.pinned_host_, false)),
      what_(std::move(other.what_)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    pinned_host_ = std::exchange(other.pinned_host_, false);
    what_ = std::move(other.what_);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (owner_ != nullptr) owner_->ReleaseBuffer(*this);
}

Event::Event(Event&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      handle_(std::exchange(other.handle_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Event::Reset() {
  if (owner_ != nullptr) owner_->ReleaseEvent(*this);
}

// ---- Device -------------------------------------------------------------------------------

Device::Device(DeviceKind kind, std::string name, uint64_t vram_limit, MemoryBudget* host_budget)
    : kind_(kind), name_(std::move(name)), vram_(vram_limit), host_budget_(host_budget) {}

Device::~Device() { CheckNoLiveHandles(); }

void Device::CheckNoLiveHandles() const {
  std::lock_guard<std::mutex> lock(mu_);
  KX_CHECK_MSG(live_buffers_ == 0, "a DeviceBuffer outlives its Device");
  KX_CHECK_MSG(live_events_ == 0, "an Event outlives its Device");
}

absl::StatusOr<DeviceBuffer> Device::Alloc(std::string_view what, uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": Alloc '", std::string(what), "' of 0 bytes"));
  }
  if (absl::Status s = vram_.Reserve(what, bytes); !s.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(name_, " VRAM: ", s.message()));
  }
  absl::StatusOr<void*> ptr = DoAlloc(bytes);
  if (!ptr.ok()) {
    vram_.Release(what, bytes);
    return absl::Status(
        ptr.status().code(),
        absl::StrCat(name_, ": allocating ", FormatBytes(bytes), " for '", std::string(what), "' (",
                     vram_.Report(), "): ", ptr.status().message()));
  }
  DeviceBuffer buffer;
  buffer.owner_ = this;
  buffer.ptr_ = *ptr;
  buffer.bytes_ = bytes;
  buffer.what_ = std::string(what);
  std::lock_guard<std::mutex> lock(mu_);
  ++live_buffers_;
  return buffer;
}

absl::StatusOr<DeviceBuffer> Device::AllocPinned(std::string_view what, uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": AllocPinned '", std::string(what), "' of 0 bytes"));
  }
  if (host_budget_ != nullptr) {
    if (absl::Status s = host_budget_->Reserve(what, bytes); !s.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(name_, " pinned host memory: ", s.message()));
    }
  }
  absl::StatusOr<void*> ptr = DoAllocPinned(bytes);
  if (!ptr.ok()) {
    if (host_budget_ != nullptr) host_budget_->Release(what, bytes);
    return absl::Status(ptr.status().code(),
                        absl::StrCat(name_, ": pinning ", FormatBytes(bytes), " for '",
                                     std::string(what), "': ", ptr.status().message()));
  }
  DeviceBuffer buffer;
  buffer.owner_ = this;
  buffer.ptr_ = *ptr;
  buffer.bytes_ = bytes;
  buffer.pinned_host_ = true;
  buffer.what_ = std::string(what);
  std::lock_guard<std::mutex> lock(mu_);
  ++live_buffers_;
  return buffer;
}

void Device::Free(DeviceBuffer& buffer) {
  KX_CHECK_MSG(buffer.owner_ == nullptr || buffer.owner_ == this,
               "Device::Free: the buffer belongs to another device");
  buffer.Reset();
}

void Device::ReleaseBuffer(DeviceBuffer& buffer) {
  if (buffer.pinned_host_) {
    DoFreePinned(buffer.ptr_, buffer.bytes_);
    if (host_budget_ != nullptr) host_budget_->Release(buffer.what_, buffer.bytes_);
  } else {
    DoFree(buffer.ptr_, buffer.bytes_);
    vram_.Release(buffer.what_, buffer.bytes_);
  }
  buffer.owner_ = nullptr;
  buffer.ptr_ = nullptr;
  buffer.bytes_ = 0;
  buffer.pinned_host_ = false;
  buffer.what_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  --live_buffers_;
}

absl::Status Device::Poison(const DeviceBuffer& buffer, uint64_t offset, uint64_t bytes) {
  if (buffer.owner_ != this || buffer.pinned_host_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": Poison: not a device buffer of this device"));
  }
  if (offset > buffer.bytes_ || bytes > buffer.bytes_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(name_, ": Poison [", offset, ", +", bytes,
                                              ") outside '", buffer.what_, "' (", buffer.bytes_,
                                              " bytes)"));
  }
  if (bytes == 0) return absl::OkStatus();
  return DoPoison(static_cast<uint8_t*>(buffer.ptr_) + offset, bytes);
}

absl::StatusOr<Event> Device::CreateEvent() { return NewEvent(/*timing=*/false); }

absl::StatusOr<Event> Device::CreateTimingEvent() { return NewEvent(/*timing=*/true); }

absl::StatusOr<Event> Device::NewEvent(bool timing) {
  KX_ASSIGN_OR_RETURN(void* handle, DoCreateEvent(timing));
  Event event;
  event.owner_ = this;
  event.handle_ = handle;
  std::lock_guard<std::mutex> lock(mu_);
  ++live_events_;
  return event;
}

void Device::ReleaseEvent(Event& event) {
  DoDestroyEvent(event.handle_);
  event.owner_ = nullptr;
  event.handle_ = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  --live_events_;
}

absl::Status Device::CheckEvent(const Event& event, const char* call) const {
  if (event.owner_ != this) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", call, ": ",
                     event.owner_ == nullptr ? "empty event" : "event of another device"));
  }
  return absl::OkStatus();
}

absl::Status Device::RecordEvent(StreamKind stream, Event& event) {
  if (!ValidStream(stream)) return BadStream("RecordEvent");
  KX_RETURN_IF_ERROR(CheckEvent(event, "RecordEvent"));
  return DoRecordEvent(stream, event.handle_);
}

absl::Status Device::StreamWaitEvent(StreamKind stream, const Event& event) {
  if (!ValidStream(stream)) return BadStream("StreamWaitEvent");
  KX_RETURN_IF_ERROR(CheckEvent(event, "StreamWaitEvent"));
  return DoStreamWaitEvent(stream, event.handle_);
}

absl::Status Device::EventSynchronize(const Event& event) {
  KX_RETURN_IF_ERROR(CheckEvent(event, "EventSynchronize"));
  return DoEventSynchronize(event.handle_);
}

absl::StatusOr<double> Device::EventElapsedSeconds(const Event& start, const Event& end) {
  KX_RETURN_IF_ERROR(CheckEvent(start, "EventElapsedSeconds"));
  KX_RETURN_IF_ERROR(CheckEvent(end, "EventElapsedSeconds"));
  return DoEventElapsedSeconds(start.handle_, end.handle_);
}

absl::StatusOr<bool> Device::EventQuery(const Event& event) {
  KX_RETURN_IF_ERROR(CheckEvent(event, "EventQuery"));
  return DoEventQuery(event.handle_);
}

absl::Status Device::StreamSynchronize(StreamKind stream) {
  if (!ValidStream(stream)) return BadStream("StreamSynchronize");
  return DoStreamSynchronize(stream);
}

absl::Status Device::Synchronize() {
  for (int s = 0; s < kStreamCount; ++s) {
    KX_RETURN_IF_ERROR(DoStreamSynchronize(static_cast<StreamKind>(s)));
  }
  return absl::OkStatus();
}

absl::Status Device::CopyH2D(StreamKind stream, void* dst_device, const void* src_host,
                             uint64_t bytes) {
  if (!ValidStream(stream)) return BadStream("CopyH2D");
  if (bytes == 0) return absl::OkStatus();
  if (dst_device == nullptr || src_host == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": CopyH2D: null pointer"));
  }
  return DoCopy(stream, CopyDirection::kHostToDevice, dst_device, src_host, bytes);
}

absl::Status Device::CopyD2H(StreamKind stream, void* dst_host, const void* src_device,
                             uint64_t bytes) {
  if (!ValidStream(stream)) return BadStream("CopyD2H");
  if (bytes == 0) return absl::OkStatus();
  if (dst_host == nullptr || src_device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": CopyD2H: null pointer"));
  }
  return DoCopy(stream, CopyDirection::kDeviceToHost, dst_host, src_device, bytes);
}

absl::Status Device::CopyD2D(StreamKind stream, void* dst_device, const void* src_device,
                             uint64_t bytes) {
  if (!ValidStream(stream)) return BadStream("CopyD2D");
  if (bytes == 0) return absl::OkStatus();
  if (dst_device == nullptr || src_device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": CopyD2D: null pointer"));
  }
  return DoCopy(stream, CopyDirection::kDeviceToDevice, dst_device, src_device, bytes);
}

absl::Status Device::Memset(StreamKind stream, void* dst_device, uint8_t value, uint64_t bytes) {
  if (!ValidStream(stream)) return BadStream("Memset");
  if (bytes == 0) return absl::OkStatus();
  if (dst_device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": Memset: null pointer"));
  }
  return DoMemset(stream, dst_device, value, bytes);
}

absl::StatusOr<OpRef> Device::FindOp(std::string_view op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(op);
  if (it == ops_.end()) {
    const void* impl = DoFindOp(op);
    if (impl == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("op '", std::string(op), "' is not supported by device ", name_));
    }
    it = ops_.emplace(std::string(op), impl).first;
  }
  return OpRef{it->second, it->first};
}

bool Device::Supports(std::string_view op) { return FindOp(op).ok(); }

absl::Status Device::Launch(StreamKind stream, std::string_view op, const void* args) {
  KX_ASSIGN_OR_RETURN(const OpRef ref, FindOp(op));
  return Launch(stream, ref, args);
}

absl::Status Device::Launch(StreamKind stream, const OpRef& op, const void* args) {
  if (!ValidStream(stream)) return BadStream("Launch");
  if (op.impl == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(name_, ": Launch: empty op"));
  if (args == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": Launch '", std::string(op.name), "': args is null"));
  }
  return DoLaunch(stream, op, args);
}

}  // namespace kx
