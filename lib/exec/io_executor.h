// The I/O executor: streams byte ranges of files (FFN weight bundles from the sidecar) into
// RAM, asynchronously, with two priorities. Backends: io_uring (one completion thread
// blocking in io_uring_wait_cqe; no SQPOLL, no polling) or a pool of pread worker threads.
//
// Usage:
//   bool direct = false;
//   KX_ASSIGN_OR_RETURN(int fd, kx::OpenForDirectRead(path, &direct));
//   KX_ASSIGN_OR_RETURN(auto io, kx::IoExecutor::Create(kx::IoOptions{}));
//   kx::IoEvent done;
//   kx::IoRead reads[2] = {{fd, 0, 24576, slot0, &done}, {fd, 1 << 20, 24576, slot1, &done}};
//   done.Add(2);                                   // before submitting
//   io->Submit(kx::IoPriority::kCritical, reads, 2);
//   done.Wait();                                   // or done.SetCallback(fn, ctx) beforehand
//   KX_RETURN_IF_ERROR(done.status());
//
// Priorities: critical reads (needed by the layer about to run) go to the kernel before any
// queued background read (prefetch/reload); at most max_background_inflight background
// reads are in flight at once, so a critical read never waits behind a background backlog.
//
// O_DIRECT: offset, length and dst must be multiples of kDirectIoAlign (the caller's job).
// Debug builds check it before submitting; in any build the kernel's EINVAL comes back
// through the event as an error naming the misalignment.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kx {

// Alignment O_DIRECT needs for file offset, length and destination address.
inline constexpr uint64_t kDirectIoAlign = 4096;

// Environment variable: KAIROX_IO=pread makes IoBackend::kAuto use the pread backend.
inline constexpr char kIoBackendEnv[] = "KAIROX_IO";

// Completion of one or more reads. Add(n) before submitting n reads that name this event;
// each read counts down once; when the count reaches zero the callback (if any) runs on the
// completion thread, then done() turns true and Wait() returns. Not movable (reads point to
// it). No allocation per read (only an error message allocates). Thread-safe, except that
// Add/Reset/SetCallback must not race with the count reaching zero: add all of a group's
// reads before submitting any of them.
class IoEvent {
 public:
  IoEvent() = default;
  IoEvent(const IoEvent&) = delete;
  IoEvent& operator=(const IoEvent&) = delete;

  // Expects n more reads (n > 0).
  void Add(int64_t n);
  // True when every added read finished and the callback returned. A fresh event is done.
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  // Blocks (futex sleep, no spinning) until done().
  void Wait();
  // The first error among the finished reads (OK if none, or none finished yet).
  absl::Status status() const;
  // Back to a fresh event: count zero, status OK. The callback is kept. No reads in flight.
  void Reset();
  // `fn(ctx)` runs exactly once each time the count reaches zero, on the thread completing
  // the last read: the executor's completion thread, a pread worker, the submitting thread
  // (a read rejected at submit) or the executor's destructor (a read cancelled there). It
  // must not block for long nor destroy the executor. nullptr clears it.
  void SetCallback(void (*fn)(void* ctx), void* ctx);

  // Executors only: one read finished with `status` (OK or the error). Takes the status so
  // that an error's shared representation is handed over, not shared across threads.
  void CompleteOne(absl::Status status);

 private:
  // Futex word values: done, pending, pending with a sleeping waiter.
  static constexpr uint32_t kDone = 0;
  static constexpr uint32_t kPending = 1;
  static constexpr uint32_t kPendingWaiters = 2;

  std::atomic<int64_t> pending_{0};
  std::atomic<uint32_t> state_{kDone};
  std::atomic<bool> failed_{false};
  mutable std::mutex error_mu_;  // guards error_ (taken on the error path and in status())
  absl::Status error_;
  void (*callback_)(void*) = nullptr;
  void* callback_ctx_ = nullptr;
};

// One read: `length` bytes of `fd` at `offset` into `dst`; counts down `event` (not null)
// once when all bytes arrived or it failed. fd, dst and event must stay valid until then.
struct IoRead {
  int fd;
  uint64_t offset;
  uint64_t length;
  void* dst;
  IoEvent* event;
};

enum class IoBackend { kAuto, kUring, kPread };
enum class IoPriority { kCritical, kBackground };

struct IoOptions {
  // kAuto: io_uring, or pread threads when io_uring is unavailable (not built, seccomp, old
  // kernel) or KAIROX_IO=pread. kUring fails Create() when io_uring is unavailable.
  IoBackend backend = IoBackend::kAuto;
  // io_uring: reads in flight in the kernel at once (the ring's size).
  int queue_depth = 64;
  // Background reads in flight at once (clamped so that one slot stays free for critical
  // reads: at most queue_depth - 1, or pread_threads - 1, and at least 1).
  int max_background_inflight = 8;
  // pread backend: worker threads (each has one read in flight).
  int pread_threads = 4;
  // Reads queued (not yet in flight) per priority; Submit blocks while its queue is full.
  int max_queued = 4096;
  // Tests only (pread backend): each read starts this many microseconds after a worker takes
  // it, so that a consumer that forgets to wait for its event reliably sees stale bytes (the
  // tier's negative control). 0 in every real configuration.
  int debug_delay_us = 0;
};

// Per-priority counters of finished reads. Times in nanoseconds, summed over reads.
struct IoPriorityStats {
  uint64_t ops = 0;
  uint64_t bytes = 0;          // bytes read by successful reads
  uint64_t errors = 0;         // reads that finished with an error (cancelled included)
  uint64_t queued_ns = 0;      // Submit → handed to the kernel / a worker
  uint64_t inflight_ns = 0;    // handed over → finished
};

struct IoStats {
  IoPriorityStats critical;
  IoPriorityStats background;
  uint64_t submit_batches = 0;  // io_uring_submit calls (pread: Submit calls)
  uint64_t resubmits = 0;       // continuations after short reads, EINTR or EAGAIN
};

class IoExecutor {
 public:
  // Starts the backend and its threads. Errors: InvalidArgument (bad options), Unavailable
  // (kUring asked for and io_uring cannot start, with the kernel's reason).
  static absl::StatusOr<std::unique_ptr<IoExecutor>> Create(const IoOptions& options);

  // Cancels queued reads (their events get a Cancelled error; callbacks run on this thread),
  // waits for reads in flight (the kernel writes into their dst), joins the threads. No
  // callback runs after the destructor returns.
  virtual ~IoExecutor() = default;

  // "io_uring" or "pread".
  virtual const char* backend_name() const = 0;

  // Queues `n` reads (their events already Add()ed) and hands as many as the priority rule
  // allows to the kernel in one batch. Never waits for I/O; blocks only while the queue for
  // `priority` is full (IoOptions::max_queued). Thread-safe. May be called from a callback
  // unless that could fill the queue (which would deadlock the completion thread).
  virtual void Submit(IoPriority priority, const IoRead* reads, int n) = 0;

  // io_uring: registers one fixed buffer region (at most 1 GiB; once per executor); reads
  // whose dst lies inside it use read_fixed. Needs RLIMIT_MEMLOCK room for unprivileged
  // users. pread backend: no-op returning OK.
  virtual absl::Status RegisterBuffer(void* base, uint64_t bytes) = 0;

  // Counters so far (relaxed atomics; a snapshot, not a consistent cut).
  virtual IoStats stats() const = 0;
};

// Opens `path` read-only with O_DIRECT (page cache bypassed), or plainly when the filesystem
// refuses O_DIRECT (tmpfs). *direct (not null) says which. The caller closes the fd.
absl::StatusOr<int> OpenForDirectRead(const std::string& path, bool* direct);

}  // namespace kx
