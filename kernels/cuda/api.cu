// The module's C entry points: argument checks, then a try/catch wall around each call so
// that nothing throws across the C boundary, then the CUDA work.
#include <cstdint>
#include <new>

#include "kernels/cuda/axpy_rows_f16.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/device_query.cuh"
#include "kernels/cuda/op_registry.h"

namespace kx::cuda {
namespace {

// Runs `body` (returning kx_cuda_status) with exceptions turned into a status.
template <typename Body>
kx_cuda_status Guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return RecordError(KX_CUDA_ERROR_OUT_OF_MEMORY, "host allocation failed");
  } catch (...) {
    return RecordError(KX_CUDA_ERROR_INTERNAL, "unexpected exception in the CUDA module");
  }
}

kx_cuda_status InvalidArgument(const char* message) {
  return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
}

kx_cuda_status DeviceCount(int32_t* count) {
  if (count == nullptr) return InvalidArgument("device_count: count is NULL");
  return Guarded([&]() -> kx_cuda_status {
    int n = 0;
    KX_CUDA_CHECK(QueryDeviceCount(&n));
    *count = n;
    return KX_CUDA_OK;
  });
}

kx_cuda_status DeviceInfo(int32_t device, kx_cuda_device_info* info) {
  if (info == nullptr) return InvalidArgument("device_info: info is NULL");
  if (info->struct_size < sizeof(uint32_t)) {
    return InvalidArgument("device_info: info->struct_size is not set");
  }
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(QueryDeviceInfo(device, info));
    return KX_CUDA_OK;
  });
}

kx_cuda_status SetDevice(int32_t device) {
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaSetDevice(device));
    return KX_CUDA_OK;
  });
}

kx_cuda_status Alloc(uint64_t bytes, void** ptr) {
  if (ptr == nullptr) return InvalidArgument("alloc: ptr is NULL");
  if (bytes == 0) return InvalidArgument("alloc: zero bytes requested");
  return Guarded([&]() -> kx_cuda_status {
    void* p = nullptr;
    KX_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
    *ptr = p;
    return KX_CUDA_OK;
  });
}

kx_cuda_status Free(void* ptr) {
  if (ptr == nullptr) return KX_CUDA_OK;
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaFree(ptr));
    return KX_CUDA_OK;
  });
}

kx_cuda_status Copy(void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind,
                    const char* name) {
  if (bytes == 0) return KX_CUDA_OK;
  if (dst == nullptr || src == nullptr) return InvalidArgument(name);
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(bytes), kind));
    return KX_CUDA_OK;
  });
}

kx_cuda_status MemcpyH2D(void* dst_device, const void* src_host, uint64_t bytes) {
  return Copy(dst_device, src_host, bytes, cudaMemcpyHostToDevice,
              "memcpy_h2d: NULL pointer with a non-zero size");
}

kx_cuda_status MemcpyD2H(void* dst_host, const void* src_device, uint64_t bytes) {
  return Copy(dst_host, src_device, bytes, cudaMemcpyDeviceToHost,
              "memcpy_d2h: NULL pointer with a non-zero size");
}

kx_cuda_status MemsetBytes(void* dst_device, int32_t byte_value, uint64_t bytes) {
  if (bytes == 0) return KX_CUDA_OK;
  if (dst_device == nullptr) return InvalidArgument("memset_bytes: dst is NULL");
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaMemset(dst_device, byte_value, static_cast<size_t>(bytes)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status AxpyRowsF16(const kx_cuda_axpy_rows_f16_args* args, void* stream) {
  return Guarded([&]() -> kx_cuda_status { return kx_cuda_axpy_rows_f16(args, stream); });
}

kx_cuda_status Synchronize() {
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaDeviceSynchronize());
    return KX_CUDA_OK;
  });
}

const char* LastErrorEntry() { return LastError(); }

// ---- ABI 2 -----------------------------------------------------------------------------

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }
cudaEvent_t AsEvent(void* event) { return static_cast<cudaEvent_t>(event); }

kx_cuda_status StreamCreate(void** stream) {
  if (stream == nullptr) return InvalidArgument("stream_create: stream is NULL");
  return Guarded([&]() -> kx_cuda_status {
    cudaStream_t s = nullptr;
    KX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return KX_CUDA_OK;
  });
}

kx_cuda_status StreamDestroy(void* stream) {
  if (stream == nullptr) return KX_CUDA_OK;
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaStreamDestroy(AsStream(stream)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status EventCreate(void** event) {
  if (event == nullptr) return InvalidArgument("event_create: event is NULL");
  return Guarded([&]() -> kx_cuda_status {
    cudaEvent_t e = nullptr;
    KX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return KX_CUDA_OK;
  });
}

kx_cuda_status TimingEventCreate(void** event) {
  if (event == nullptr) return InvalidArgument("timing_event_create: event is NULL");
  return Guarded([&]() -> kx_cuda_status {
    cudaEvent_t e = nullptr;
    KX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
    *event = e;
    return KX_CUDA_OK;
  });
}

kx_cuda_status EventElapsedMs(void* start, void* end, float* ms) {
  if (start == nullptr || end == nullptr || ms == nullptr) {
    return InvalidArgument("event_elapsed_ms: start, end and ms must be non-NULL");
  }
  return Guarded([&]() -> kx_cuda_status {
    float elapsed = 0.0f;
    KX_CUDA_CHECK(cudaEventElapsedTime(&elapsed, AsEvent(start), AsEvent(end)));
    *ms = elapsed;
    return KX_CUDA_OK;
  });
}

kx_cuda_status EventDestroy(void* event) {
  if (event == nullptr) return KX_CUDA_OK;
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaEventDestroy(AsEvent(event)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status EventRecord(void* event, void* stream) {
  if (event == nullptr) return InvalidArgument("event_record: event is NULL");
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaEventRecord(AsEvent(event), AsStream(stream)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status EventQuery(void* event, int32_t* done) {
  if (event == nullptr || done == nullptr) {
    return InvalidArgument("event_query: event and done must be non-NULL");
  }
  return Guarded([&]() -> kx_cuda_status {
    const cudaError_t err = cudaEventQuery(AsEvent(event));
    if (err == cudaErrorNotReady) {
      *done = 0;
      return KX_CUDA_OK;
    }
    KX_CUDA_CHECK(err);
    *done = 1;
    return KX_CUDA_OK;
  });
}

kx_cuda_status EventSynchronize(void* event) {
  if (event == nullptr) return InvalidArgument("event_synchronize: event is NULL");
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaEventSynchronize(AsEvent(event)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status StreamWaitEvent(void* stream, void* event) {
  if (event == nullptr) return InvalidArgument("stream_wait_event: event is NULL");
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaStreamWaitEvent(AsStream(stream), AsEvent(event), 0));
    return KX_CUDA_OK;
  });
}

kx_cuda_status StreamSynchronize(void* stream) {
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaStreamSynchronize(AsStream(stream)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status CopyAsync(void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind,
                         void* stream, const char* name) {
  if (bytes == 0) return KX_CUDA_OK;
  if (dst == nullptr || src == nullptr) return InvalidArgument(name);
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, AsStream(stream)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status MemcpyH2DAsync(void* dst_device, const void* src_host, uint64_t bytes,
                              void* stream) {
  return CopyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, stream,
                   "memcpy_h2d_async: NULL pointer with a non-zero size");
}

kx_cuda_status MemcpyD2HAsync(void* dst_host, const void* src_device, uint64_t bytes,
                              void* stream) {
  return CopyAsync(dst_host, src_device, bytes, cudaMemcpyDeviceToHost, stream,
                   "memcpy_d2h_async: NULL pointer with a non-zero size");
}

kx_cuda_status MemcpyD2DAsync(void* dst_device, const void* src_device, uint64_t bytes,
                              void* stream) {
  return CopyAsync(dst_device, src_device, bytes, cudaMemcpyDeviceToDevice, stream,
                   "memcpy_d2d_async: NULL pointer with a non-zero size");
}

kx_cuda_status MemsetAsync(void* dst_device, int32_t byte_value, uint64_t bytes, void* stream) {
  if (bytes == 0) return KX_CUDA_OK;
  if (dst_device == nullptr) return InvalidArgument("memset_async: dst is NULL");
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(
        cudaMemsetAsync(dst_device, byte_value, static_cast<size_t>(bytes), AsStream(stream)));
    return KX_CUDA_OK;
  });
}

kx_cuda_status HostAllocPinned(uint64_t bytes, void** ptr) {
  if (ptr == nullptr) return InvalidArgument("host_alloc_pinned: ptr is NULL");
  if (bytes == 0) return InvalidArgument("host_alloc_pinned: zero bytes requested");
  return Guarded([&]() -> kx_cuda_status {
    void* p = nullptr;
    KX_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault));
    *ptr = p;
    return KX_CUDA_OK;
  });
}

kx_cuda_status HostFreePinned(void* ptr) {
  if (ptr == nullptr) return KX_CUDA_OK;
  return Guarded([&]() -> kx_cuda_status {
    KX_CUDA_CHECK(cudaFreeHost(ptr));
    return KX_CUDA_OK;
  });
}

kx_cuda_status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return InvalidArgument("mem_get_info: free_bytes and total_bytes must be non-NULL");
  }
  return Guarded([&]() -> kx_cuda_status {
    size_t free_b = 0;
    size_t total_b = 0;
    KX_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    *free_bytes = free_b;
    *total_bytes = total_b;
    return KX_CUDA_OK;
  });
}

void* FindOpEntry(const char* name) noexcept { return FindOp(name); }

const kx_cuda_api kApi = {
    /*struct_size=*/sizeof(kx_cuda_api),
    /*abi_version=*/KX_CUDA_ABI_VERSION,
    /*device_count=*/DeviceCount,
    /*device_info=*/DeviceInfo,
    /*set_device=*/SetDevice,
    /*alloc=*/Alloc,
    /*free=*/Free,
    /*memcpy_h2d=*/MemcpyH2D,
    /*memcpy_d2h=*/MemcpyD2H,
    /*memset_bytes=*/MemsetBytes,
    /*axpy_rows_f16=*/AxpyRowsF16,
    /*synchronize=*/Synchronize,
    /*last_error=*/LastErrorEntry,
    /*stream_create=*/StreamCreate,
    /*stream_destroy=*/StreamDestroy,
    /*event_create=*/EventCreate,
    /*event_destroy=*/EventDestroy,
    /*event_record=*/EventRecord,
    /*event_query=*/EventQuery,
    /*event_synchronize=*/EventSynchronize,
    /*stream_wait_event=*/StreamWaitEvent,
    /*stream_synchronize=*/StreamSynchronize,
    /*memcpy_h2d_async=*/MemcpyH2DAsync,
    /*memcpy_d2h_async=*/MemcpyD2HAsync,
    /*memcpy_d2d_async=*/MemcpyD2DAsync,
    /*memset_async=*/MemsetAsync,
    /*host_alloc_pinned=*/HostAllocPinned,
    /*host_free_pinned=*/HostFreePinned,
    /*mem_get_info=*/MemGetInfo,
    /*find_op=*/FindOpEntry,
    /*timing_event_create=*/TimingEventCreate,
    /*event_elapsed_ms=*/EventElapsedMs,
};

}  // namespace
}  // namespace kx::cuda

extern "C" KX_CUDA_EXPORT const kx_cuda_api* kx_cuda_get_api(uint32_t abi_version) {
  // Append-only table: this module serves every caller built against a version <= its own.
  if (abi_version == 0 || abi_version > KX_CUDA_ABI_VERSION) return nullptr;
  return &kx::cuda::kApi;
}
