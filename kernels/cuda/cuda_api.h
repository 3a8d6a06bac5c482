/* The C interface of the CUDA backend module (libkairox_cuda.so).
 *
 * kairox never links CUDA: lib/device/device_loader dlopen()s the module and calls
 * kx_cuda_get_api(). The module links the CUDA runtime statically, so on a machine
 * without a GPU only this module is affected (it needs the driver, libcuda.so.1).
 *
 * ABI rules: kx_cuda_api is append-only. KX_CUDA_ABI_VERSION is bumped when members are
 * appended; a module serves any caller whose version is <= its own, and the caller checks
 * struct_size before touching members newer than it knows.
 *
 * Conventions: every fallible call returns kx_cuda_status (0 = ok) and writes its outputs
 * through pointers; on failure last_error() gives a message for the calling thread and the
 * outputs are unchanged. Calls act on the calling thread's current device (set_device).
 * Nothing throws across this boundary.
 *
 * Usage:
 *   kx_cuda_get_api_fn get = (kx_cuda_get_api_fn)dlsym(handle, KX_CUDA_GET_API_SYMBOL);
 *   const kx_cuda_api* api = get(KX_CUDA_ABI_VERSION);
 *   int32_t n = 0;
 *   if (!api || api->device_count(&n) != KX_CUDA_OK) puts(api ? api->last_error() : "abi");
 */
#ifndef KAIROX_KERNELS_CUDA_CUDA_API_H_
#define KAIROX_KERNELS_CUDA_CUDA_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KX_CUDA_ABI_VERSION 3u
#define KX_CUDA_GET_API_SYMBOL "kx_cuda_get_api"
#define KX_CUDA_MODULE_NAME "libkairox_cuda.so"

typedef int32_t kx_cuda_status;
enum {
  KX_CUDA_OK = 0,
  KX_CUDA_ERROR_INVALID_ARGUMENT = 1, /* a caller bug: null pointer, bad size */
  KX_CUDA_ERROR_NO_DEVICE = 2,        /* no driver, driver too old, no GPU */
  KX_CUDA_ERROR_OUT_OF_MEMORY = 3,
  KX_CUDA_ERROR_UNSUPPORTED = 4, /* no kernel image for this GPU, or similar */
  KX_CUDA_ERROR_RUNTIME = 5,     /* any other CUDA error */
  KX_CUDA_ERROR_INTERNAL = 6     /* an exception caught at the boundary */
};

#define KX_CUDA_DEVICE_NAME_LEN 256

typedef struct kx_cuda_device_info {
  uint32_t struct_size; /* set by the caller to sizeof(kx_cuda_device_info) */
  char name[KX_CUDA_DEVICE_NAME_LEN];
  uint64_t total_memory_bytes;
  uint64_t free_memory_bytes; /* at the time of the call */
  int32_t compute_capability_major;
  int32_t compute_capability_minor;
  int32_t multiprocessor_count;
} kx_cuda_device_info;

/* Sparse FFN down-projection over active rows (PowerInfer's ffn_down_t axpy):
 *   dst[j] += sum_{k < n_active} coeff[k] * w[rows[k] * w_row_stride + j],  j < n_cols
 * w: F16 (IEEE binary16), row-major, one row per FFN neuron (neuron-major), device memory.
 * rows: int32 row indices into w, each in [0, n_rows) (not checked on the device).
 * coeff: F32, coeff[k] pairs with rows[k] (the caller gathers activations, so the rows may
 *        live in a compacted GPU copy whose numbering differs from the neuron ids).
 * dst: F32 [n_cols], accumulated into; floating-point atomics make the summation order, and
 *      so the last bits, vary between runs.
 * No workspace. All pointers are device pointers; n_active = 0 is a no-op. */
typedef struct kx_cuda_axpy_rows_f16_args {
  uint32_t struct_size; /* sizeof(kx_cuda_axpy_rows_f16_args) */
  const uint16_t* w;
  int64_t n_rows;
  int64_t n_cols;
  int64_t w_row_stride; /* elements between rows; >= n_cols */
  const int32_t* rows;
  const float* coeff;
  int64_t n_active;
  float* dst;
} kx_cuda_axpy_rows_f16_args;

typedef struct kx_cuda_api {
  uint32_t struct_size; /* sizeof(kx_cuda_api) as the module was built */
  uint32_t abi_version; /* the module's KX_CUDA_ABI_VERSION */

  kx_cuda_status (*device_count)(int32_t* count);
  kx_cuda_status (*device_info)(int32_t device, kx_cuda_device_info* info);
  kx_cuda_status (*set_device)(int32_t device);

  /* Device memory. free(NULL) does nothing. */
  kx_cuda_status (*alloc)(uint64_t bytes, void** ptr);
  kx_cuda_status (*free)(void* ptr);
  /* Synchronous copies (they wait for the copy, not for queued kernels on other streams). */
  kx_cuda_status (*memcpy_h2d)(void* dst_device, const void* src_host, uint64_t bytes);
  kx_cuda_status (*memcpy_d2h)(void* dst_host, const void* src_device, uint64_t bytes);
  kx_cuda_status (*memset_bytes)(void* dst_device, int32_t byte_value, uint64_t bytes);

  /* Enqueues the kernel on `stream` (a cudaStream_t; NULL = the default stream). Launch
   * errors are reported here; errors during execution surface at the next synchronize. */
  kx_cuda_status (*axpy_rows_f16)(const kx_cuda_axpy_rows_f16_args* args, void* stream);

  /* Waits for all work on the current device; reports asynchronous kernel errors. */
  kx_cuda_status (*synchronize)(void);

  /* The calling thread's last error message ("" if none). Valid until the thread's next
   * call into the module. Never NULL. */
  const char* (*last_error)(void);

  /* ---- ABI 2: streams, events, asynchronous copies, pinned memory, ops by name ---------
   * (lib/device/cuda_device.cc). Streams and events are cudaStream_t / cudaEvent_t passed
   * as void*. Asynchronous calls enqueue and return; their errors may surface at a later
   * synchronize. destroy/free(NULL) does nothing. */

  /* A stream that does not synchronize with the legacy default stream
   * (cudaStreamNonBlocking). */
  kx_cuda_status (*stream_create)(void** stream);
  kx_cuda_status (*stream_destroy)(void* stream);
  /* An event without timing (cudaEventDisableTiming): the cheapest kind to record. */
  kx_cuda_status (*event_create)(void** event);
  kx_cuda_status (*event_destroy)(void* event);
  kx_cuda_status (*event_record)(void* event, void* stream);
  /* *done = 1 when the event's latest record completed (or it was never recorded), else 0. */
  kx_cuda_status (*event_query)(void* event, int32_t* done);
  kx_cuda_status (*event_synchronize)(void* event);
  /* Work enqueued on `stream` later waits for the event's latest record. */
  kx_cuda_status (*stream_wait_event)(void* stream, void* event);
  kx_cuda_status (*stream_synchronize)(void* stream);
  /* Copies and memset on `stream`; host memory should be pinned (host_alloc_pinned) for the
   * copy to be asynchronous and to overlap with other streams' work. */
  kx_cuda_status (*memcpy_h2d_async)(void* dst_device, const void* src_host, uint64_t bytes,
                                     void* stream);
  kx_cuda_status (*memcpy_d2h_async)(void* dst_host, const void* src_device, uint64_t bytes,
                                     void* stream);
  kx_cuda_status (*memcpy_d2d_async)(void* dst_device, const void* src_device, uint64_t bytes,
                                     void* stream);
  kx_cuda_status (*memset_async)(void* dst_device, int32_t byte_value, uint64_t bytes,
                                 void* stream);
  /* Page-locked host memory (cudaHostAlloc / cudaFreeHost). */
  kx_cuda_status (*host_alloc_pinned)(uint64_t bytes, void** ptr);
  kx_cuda_status (*host_free_pinned)(void* ptr);
  /* Free and total memory of the current device (cudaMemGetInfo). */
  kx_cuda_status (*mem_get_info)(uint64_t* free_bytes, uint64_t* total_bytes);
  /* The launcher of the op called `name` (kernels/cuda/op_registry.h), or NULL: a
   *   kx_cuda_status (*)(const kx_cuda_<op>_args* args, void* stream)
   * declared in kernels/cuda/<op>.cuh. Never fails otherwise; no last_error. */
  void* (*find_op)(const char* name);

  /* ---- ABI 3: timed events (the split FFN's stall attribution, lib/engine/device_ffn.h) ---
   * An event that records when it completes (cudaEventCreateWithFlags(cudaEventDefault)):
   * costlier to record than event_create's, so only the few events that are timed use it. */
  kx_cuda_status (*timing_event_create)(void** event);
  /* *ms = milliseconds from `start`'s latest record to `end`'s (cudaEventElapsedTime; about
   * 0.5 us resolution; negative when `end` completed first). Both must be timing events that
   * were recorded and have completed; an error otherwise (cudaErrorNotReady when one is still
   * pending), which does not poison the device. */
  kx_cuda_status (*event_elapsed_ms)(void* start, void* end, float* ms);
} kx_cuda_api;

/* Returns the table, or NULL when the module is older than `abi_version`. The table is
 * static: valid while the module stays loaded. */
typedef const kx_cuda_api* (*kx_cuda_get_api_fn)(uint32_t abi_version);

#if defined(__GNUC__)
#define KX_CUDA_EXPORT __attribute__((visibility("default")))
#else
#define KX_CUDA_EXPORT
#endif

KX_CUDA_EXPORT const kx_cuda_api* kx_cuda_get_api(uint32_t abi_version);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // KAIROX_KERNELS_CUDA_CUDA_API_H_
