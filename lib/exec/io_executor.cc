// IoEvent, the shared queue rule, statistics, error messages, IoExecutor::Create and
// OpenForDirectRead. The backends are io_uring_backend.cc and io_pread_backend.cc.
#include "exec/io_executor.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/timer.h"
#include "exec/io_internal.h"

namespace kx {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex word must be a plain 32-bit integer");

uint32_t* FutexWord(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  // Returns on wake, EAGAIN (value changed) or EINTR; the caller re-checks.
  syscall(SYS_futex, FutexWord(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

// Wakes sleepers on `word`. Touches no memory in user space, so it is safe after the
// event's owner may have destroyed it (the kernel only hashes the address).
void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, FutexWord(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

std::string FdPath(int fd) {
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  char target[PATH_MAX];
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return absl::StrCat("fd ", fd);
  return std::string(target, static_cast<size_t>(n));
}

std::string Describe(const io_internal::IoOp& op) {
  return absl::StrFormat("%s offset %u length %u (%u bytes read)", FdPath(op.read.fd),
                         op.read.offset, op.read.length, op.done_bytes);
}

bool IsDirect(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags != -1 && (flags & O_DIRECT) != 0;
}

bool Misaligned(const IoRead& r) {
  return ((r.offset | r.length | reinterpret_cast<uintptr_t>(r.dst)) & (kDirectIoAlign - 1)) !=
         0;
}

std::string AlignmentNote(const IoRead& r) {
  return absl::StrFormat(
      "O_DIRECT needs offset, length and dst aligned to %u bytes (offset %u, length %u, "
      "dst %p)",
      kDirectIoAlign, r.offset, r.length, r.dst);
}

}  // namespace

// ---- IoEvent ----

void IoEvent::Add(int64_t n) {
  if (n <= 0) return;
  if (pending_.fetch_add(n, std::memory_order_acq_rel) == 0) {
    state_.store(kPending, std::memory_order_release);
  }
}

void IoEvent::Wait() {
  uint32_t s = state_.load(std::memory_order_acquire);
  while (s != kDone) {
    if (s == kPending &&
        !state_.compare_exchange_weak(s, kPendingWaiters, std::memory_order_acq_rel)) {
      continue;  // s reloaded: done, or someone else marked waiters
    }
    FutexWait(&state_, kPendingWaiters);
    s = state_.load(std::memory_order_acquire);
  }
}

absl::Status IoEvent::status() const {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(error_mu_);
  return error_;
}

void IoEvent::Reset() {
  pending_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    error_ = absl::OkStatus();
  }
  failed_.store(false, std::memory_order_relaxed);
  state_.store(kDone, std::memory_order_release);
}

void IoEvent::SetCallback(void (*fn)(void* ctx), void* ctx) {
  callback_ = fn;
  callback_ctx_ = ctx;
}

void IoEvent::CompleteOne(absl::Status status) {
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_.ok()) error_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last read. Run the callback before publishing done: a waiter that sees done may
  // destroy the event, so after the exchange below only the address is used.
  if (callback_ != nullptr) callback_(callback_ctx_);
  if (state_.exchange(kDone, std::memory_order_acq_rel) == kPendingWaiters) {
    FutexWakeAll(&state_);
  }
}

// ---- shared internals ----

namespace io_internal {

bool IoQueues::TakeNext(IoOp* op, int64_t now_ns) {
  if (!critical_.empty()) {
    *op = critical_.Pop();
  } else if (!background_.empty() && background_inflight_ < background_cap_) {
    *op = background_.Pop();
    ++background_inflight_;
  } else {
    return false;
  }
  op->dispatch_ns = now_ns;
  return true;
}

void IoStatsCounters::OpDone(const IoOp& op, bool ok, int64_t now_ns) {
  PerPriority& p = per_[op.priority == IoPriority::kCritical ? 0 : 1];
  constexpr auto kRelaxed = std::memory_order_relaxed;
  p.ops.fetch_add(1, kRelaxed);
  if (ok) p.bytes.fetch_add(op.read.length, kRelaxed);
  else p.errors.fetch_add(1, kRelaxed);
  // A cancelled op never dispatched has dispatch_ns == 0: all its time was queued.
  const int64_t dispatched = op.dispatch_ns != 0 ? op.dispatch_ns : now_ns;
  p.queued_ns.fetch_add(static_cast<uint64_t>(dispatched - op.enqueue_ns), kRelaxed);
  p.inflight_ns.fetch_add(static_cast<uint64_t>(now_ns - dispatched), kRelaxed);
}

IoStats IoStatsCounters::Snapshot() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  auto copy = [&](const PerPriority& p) {
    IoPriorityStats s;
    s.ops = p.ops.load(kRelaxed);
    s.bytes = p.bytes.load(kRelaxed);
    s.errors = p.errors.load(kRelaxed);
    s.queued_ns = p.queued_ns.load(kRelaxed);
    s.inflight_ns = p.inflight_ns.load(kRelaxed);
    return s;
  };
  IoStats s;
  s.critical = copy(per_[0]);
  s.background = copy(per_[1]);
  s.submit_batches = submit_batches_.load(kRelaxed);
  s.resubmits = resubmits_.load(kRelaxed);
  return s;
}

absl::Status ReadError(const IoOp& op, int err) {
  std::string msg = absl::StrCat("read failed: ", Describe(op), ": ", std::strerror(err));
  if (err == EINVAL && Misaligned(op.read) && IsDirect(op.read.fd)) {
    absl::StrAppend(&msg, "; ", AlignmentNote(op.read));
  }
  // The code from errno, the reason once (ErrnoToStatus would append strerror a second time).
  return absl::Status(absl::ErrnoToStatusCode(err), msg);
}

absl::Status EofError(const IoOp& op) {
  struct stat st {};
  const long long size = fstat(op.read.fd, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
  return absl::OutOfRangeError(absl::StrFormat(
      "short read at end of file: %s; the file has %d bytes", Describe(op), size));
}

absl::Status CheckDirectAlignment(const IoRead& read) {
#ifndef NDEBUG
  if (Misaligned(read) && IsDirect(read.fd)) {
    return absl::InvalidArgumentError(
        absl::StrCat("misaligned read of ", FdPath(read.fd), ": ", AlignmentNote(read)));
  }
#else
  (void)read;
#endif
  return absl::OkStatus();
}

absl::Status CancelledError(const IoOp& op) {
  return absl::CancelledError(
      absl::StrCat("read cancelled by the I/O executor's shutdown: ", Describe(op)));
}

void CancelReads(const IoRead* reads, int from, int n, IoPriority priority,
                 IoStatsCounters& counters) {
  for (int i = from; i < n; ++i) {
    const IoOp op{reads[i], 0, NowNs(), 0, priority};
    counters.OpDone(op, false, NowNs());
    reads[i].event->CompleteOne(CancelledError(op));
  }
}

}  // namespace io_internal

// ---- IoExecutor::Create ----

absl::StatusOr<std::unique_ptr<IoExecutor>> IoExecutor::Create(const IoOptions& options) {
  if (options.queue_depth < 1 || options.max_background_inflight < 1 ||
      options.pread_threads < 1 || options.max_queued < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "IoOptions: queue_depth (%d), max_background_inflight (%d), pread_threads (%d) and "
        "max_queued (%d) must be at least 1",
        options.queue_depth, options.max_background_inflight, options.pread_threads,
        options.max_queued));
  }
  IoBackend backend = options.backend;
  std::string reason;
  if (backend == IoBackend::kAuto) {
    const char* env = std::getenv(kIoBackendEnv);
    if (env != nullptr && std::strcmp(env, "pread") == 0) {
      backend = IoBackend::kPread;
      reason = absl::StrCat(kIoBackendEnv, "=pread");
    }
  }
  if (backend != IoBackend::kPread) {
    absl::StatusOr<std::unique_ptr<IoExecutor>> uring = io_internal::CreateUringExecutor(options);
    if (uring.ok() || backend == IoBackend::kUring) return uring;
    reason = std::string(uring.status().message());
  }
  if (options.backend == IoBackend::kAuto) {
    static std::once_flag logged;
    std::call_once(logged, [&] {
      Log().info("I/O executor: pread threads instead of io_uring ({})", reason);
    });
  }
  return io_internal::CreatePreadExecutor(options);
}

absl::StatusOr<int> OpenForDirectRead(const std::string& path, bool* direct) {
  // O_NONBLOCK so a FIFO in place of the file fails below instead of blocking the open.
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK);
  *direct = fd >= 0;
  if (fd < 0 && errno == EINVAL) {  // the filesystem has no O_DIRECT (tmpfs)
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  }
  if (fd < 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  return fd;
}

}  // namespace kx
