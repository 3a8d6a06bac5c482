#include "device/cuda_device.h"

#include "base/log.h"

namespace kx {
namespace {

// The device the calling thread last made current through any CudaDevice (-1: none yet).
thread_local int32_t tls_current_device = -1;

// An op launcher as the module registers it (kernels/cuda/op_registry.h); every op's args
// struct is passed as a pointer, so calling through const void* is the same call.
using OpLauncher = kx_cuda_status (*)(const void* args, void* stream);

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(const CudaApi& api,
                                                               const CudaDeviceOptions& options) {
  KX_RETURN_IF_ERROR(CudaCall(api, api.set_device(options.device), "cudaSetDevice"));
  tls_current_device = options.device;
  kx_cuda_device_info info{};
  info.struct_size = sizeof(info);
  KX_RETURN_IF_ERROR(CudaCall(api, api.device_info(options.device, &info), "device_info"));
  uint64_t limit = info.free_memory_bytes;
  if (options.vram_budget) {
    limit = ResolveSize(*options.vram_budget, info.total_memory_bytes);
    if (limit > info.total_memory_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("cuda:", options.device, ": VRAM budget ",
                                                     FormatBytes(limit), " exceeds the device's ",
                                                     FormatBytes(info.total_memory_bytes)));
    }
  }
  std::string name = absl::StrCat("cuda:", options.device, " ", info.name);
  std::unique_ptr<CudaDevice> dev(new CudaDevice(api, options, std::move(name), limit));
  for (void*& s : dev->streams_) {
    KX_RETURN_IF_ERROR(CudaCall(api, api.stream_create(&s), "cudaStreamCreateWithFlags"));
  }
  Log().info("{}: {} of {} as the VRAM budget", dev->name(), FormatBytes(limit),
             FormatBytes(info.total_memory_bytes));
  return dev;
}

CudaDevice::CudaDevice(const CudaApi& api, const CudaDeviceOptions& options, std::string name,
                       uint64_t vram_limit)
    : Device(DeviceKind::kCuda, std::move(name), vram_limit, options.host_budget),
      api_(api),
      device_(options.device),
      profile_(options.profile) {}

CudaDevice::~CudaDevice() {
  CheckNoLiveHandles();
  if (!MakeCurrent().ok()) return;
  for (void* s : streams_) {
    if (s == nullptr) continue;
    if (absl::Status st = CudaCall(api_, api_.stream_synchronize(s), "cudaStreamSynchronize");
        !st.ok()) {
      Log().error("{}: {}", name(), st.ToString());
    }
    (void)api_.stream_destroy(s);
  }
}

absl::Status CudaDevice::MakeCurrent() {
  if (tls_current_device == device_) return absl::OkStatus();
  KX_RETURN_IF_ERROR(CudaCall(api_, api_.set_device(device_), "cudaSetDevice"));
  tls_current_device = device_;
  return absl::OkStatus();
}

absl::StatusOr<DeviceInfo> CudaDevice::DoInfo() {
  KX_RETURN_IF_ERROR(MakeCurrent());
  DeviceInfo info;
  info.name = name();
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  KX_RETURN_IF_ERROR(
      CudaCall(api_, api_.mem_get_info(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  info.total_bytes = total_bytes;
  info.free_bytes = free_bytes;
  if (profile_) {
    info.h2d_bytes_per_s = profile_->h2d_bytes_per_s;
    info.d2h_bytes_per_s = profile_->d2h_bytes_per_s;
    info.device_bytes_per_s = profile_->device_bytes_per_s;
    info.copy_latency_s = profile_->copy_latency_s;
  }
  return info;
}

absl::StatusOr<void*> CudaDevice::DoAlloc(uint64_t bytes) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  void* p = nullptr;
  KX_RETURN_IF_ERROR(CudaCall(api_, api_.alloc(bytes, &p), "cudaMalloc"));
  return p;
}

void CudaDevice::DoFree(void* ptr, uint64_t bytes) {
  absl::Status st = MakeCurrent();
  if (st.ok()) st = CudaCall(api_, api_.free(ptr), "cudaFree");
  if (!st.ok()) Log().error("{}: {}", name(), st.ToString());
}

absl::StatusOr<void*> CudaDevice::DoAllocPinned(uint64_t bytes) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  void* p = nullptr;
  KX_RETURN_IF_ERROR(CudaCall(api_, api_.host_alloc_pinned(bytes, &p), "cudaHostAlloc"));
  return p;
}

void CudaDevice::DoFreePinned(void* ptr, uint64_t bytes) {
  if (absl::Status st = CudaCall(api_, api_.host_free_pinned(ptr), "cudaFreeHost"); !st.ok()) {
    Log().error("{}: {}", name(), st.ToString());
  }
}

absl::Status CudaDevice::DoPoison(void* ptr, uint64_t bytes) { return absl::OkStatus(); }

absl::StatusOr<void*> CudaDevice::DoCreateEvent(bool timing) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  void* e = nullptr;
  KX_RETURN_IF_ERROR(CudaCall(api_, timing ? api_.timing_event_create(&e) : api_.event_create(&e),
                              "cudaEventCreateWithFlags"));
  return e;
}

absl::StatusOr<double> CudaDevice::DoEventElapsedSeconds(void* start, void* end) {
  float ms = 0.0f;
  absl::Status st = CudaCall(api_, api_.event_elapsed_ms(start, end, &ms), "cudaEventElapsedTime");
  // The module maps cudaErrorNotReady (a record still pending) to a runtime error; say what
  // the interface promises instead.
  if (!st.ok()) return absl::FailedPreconditionError(st.message());
  return static_cast<double>(ms) * 1e-3;
}

void CudaDevice::DoDestroyEvent(void* event) {
  if (absl::Status st = CudaCall(api_, api_.event_destroy(event), "cudaEventDestroy"); !st.ok()) {
    Log().error("{}: {}", name(), st.ToString());
  }
}

absl::Status CudaDevice::DoRecordEvent(StreamKind s, void* event) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  return CudaCall(api_, api_.event_record(event, stream(s)), "cudaEventRecord");
}

absl::Status CudaDevice::DoStreamWaitEvent(StreamKind s, void* event) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  return CudaCall(api_, api_.stream_wait_event(stream(s), event), "cudaStreamWaitEvent");
}

absl::Status CudaDevice::DoEventSynchronize(void* event) {
  return CudaCall(api_, api_.event_synchronize(event), "cudaEventSynchronize");
}

absl::StatusOr<bool> CudaDevice::DoEventQuery(void* event) {
  int32_t done = 0;
  KX_RETURN_IF_ERROR(CudaCall(api_, api_.event_query(event, &done), "cudaEventQuery"));
  return done != 0;
}

absl::Status CudaDevice::DoStreamSynchronize(StreamKind s) {
  return CudaCall(api_, api_.stream_synchronize(stream(s)), "cudaStreamSynchronize");
}

absl::Status CudaDevice::DoCopy(StreamKind s, CopyDirection direction, void* dst, const void* src,
                                uint64_t bytes) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  switch (direction) {
    case CopyDirection::kHostToDevice:
      return CudaCall(api_, api_.memcpy_h2d_async(dst, src, bytes, stream(s)), "memcpy_h2d_async");
    case CopyDirection::kDeviceToHost:
      return CudaCall(api_, api_.memcpy_d2h_async(dst, src, bytes, stream(s)), "memcpy_d2h_async");
    case CopyDirection::kDeviceToDevice:
      return CudaCall(api_, api_.memcpy_d2d_async(dst, src, bytes, stream(s)), "memcpy_d2d_async");
  }
  return absl::InvalidArgumentError("CopyDirection");
}

absl::Status CudaDevice::DoMemset(StreamKind s, void* dst, uint8_t value, uint64_t bytes) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  return CudaCall(api_, api_.memset_async(dst, value, bytes, stream(s)), "memset_async");
}

const void* CudaDevice::DoFindOp(std::string_view op) {
  const std::string name(op);  // the module wants a NUL-terminated name; once per op
  return api_.find_op(name.c_str());
}

absl::Status CudaDevice::DoLaunch(StreamKind s, const OpRef& op, const void* args) {
  KX_RETURN_IF_ERROR(MakeCurrent());
  const auto launch = reinterpret_cast<OpLauncher>(const_cast<void*>(op.impl));
  const kx_cuda_status status = launch(args, stream(s));
  if (status == KX_CUDA_OK) return absl::OkStatus();  // no message to build per launch
  return CudaCall(api_, status, absl::StrCat("launching '", std::string(op.name), "'"));
}

}  // namespace kx
