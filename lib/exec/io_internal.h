// Internals shared by the I/O executor's backends (io_uring_backend.cc, io_pread_backend.cc):
// the two-priority queue and its dispatch rule, statistics counters, error messages.
// Not part of the public API; include exec/io_executor.h instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "exec/io_executor.h"

namespace kx::io_internal {

// Largest length handed to one read call (io_uring's len is 32-bit, pread caps near 2 GiB);
// longer reads continue like short reads. A multiple of kDirectIoAlign.
inline constexpr uint64_t kMaxReadChunk = uint64_t{1} << 30;

// A read and its progress.
struct IoOp {
  IoRead read;
  uint64_t done_bytes;
  int64_t enqueue_ns;
  int64_t dispatch_ns;
  IoPriority priority;
};

// Fixed-capacity FIFO of ops (allocated once: no allocation per read).
class IoOpRing {
 public:
  explicit IoOpRing(int capacity) : ops_(static_cast<size_t>(capacity)) {}
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == ops_.size(); }
  size_t size() const { return count_; }
  void Push(const IoOp& op) {
    ops_[(head_ + count_) % ops_.size()] = op;
    ++count_;
  }
  IoOp Pop() {
    IoOp op = ops_[head_];
    head_ = (head_ + 1) % ops_.size();
    --count_;
    return op;
  }

 private:
  std::vector<IoOp> ops_;
  size_t head_ = 0;
  size_t count_ = 0;
};

// The queued reads of both priorities and the rule that picks the next one to hand over.
// Not thread-safe: the backend holds its lock around every call.
class IoQueues {
 public:
  IoQueues(int capacity, int background_cap)
      : critical_(capacity), background_(capacity), background_cap_(background_cap) {}

  IoOpRing& ring(IoPriority p) { return p == IoPriority::kCritical ? critical_ : background_; }
  bool empty() const { return critical_.empty() && background_.empty(); }
  int background_inflight() const { return background_inflight_; }

  // True when TakeNext would return an op.
  bool HasEligible() const {
    return !critical_.empty() ||
           (!background_.empty() && background_inflight_ < background_cap_);
  }
  // Critical first; background only while no critical read is queued and fewer than
  // background_cap background reads are in flight. Counts the op as in flight.
  bool TakeNext(IoOp* op, int64_t now_ns);
  // An op handed over by TakeNext finished (successfully or not).
  void Finished(const IoOp& op) {
    if (op.priority == IoPriority::kBackground) --background_inflight_;
  }

 private:
  IoOpRing critical_;
  IoOpRing background_;
  int background_cap_;
  int background_inflight_ = 0;
};

// Lock-free statistics (relaxed atomics).
class IoStatsCounters {
 public:
  void OpDone(const IoOp& op, bool ok, int64_t now_ns);
  void Batch() { submit_batches_.fetch_add(1, std::memory_order_relaxed); }
  void Resubmit() { resubmits_.fetch_add(1, std::memory_order_relaxed); }
  IoStats Snapshot() const;

 private:
  struct PerPriority {
    std::atomic<uint64_t> ops{0}, bytes{0}, errors{0}, queued_ns{0}, inflight_ns{0};
  };
  PerPriority per_[2];
  std::atomic<uint64_t> submit_batches_{0};
  std::atomic<uint64_t> resubmits_{0};
};

// The error for a read that failed with errno `err` after `op.done_bytes` bytes: names the
// file (from /proc/self/fd), offset, length, and for EINVAL on an O_DIRECT fd the alignment.
absl::Status ReadError(const IoOp& op, int err);
// The error for a read that hit end of file after `op.done_bytes` bytes.
absl::Status EofError(const IoOp& op);
// Debug builds: InvalidArgument when `read.fd` is O_DIRECT and the read is misaligned.
// Release builds: OK without a system call.
absl::Status CheckDirectAlignment(const IoRead& read);
// Cancelled error for a read dropped by the destructor.
absl::Status CancelledError(const IoOp& op);
// Completes reads[from, n) as cancelled (a Submit into an executor that is shutting down).
void CancelReads(const IoRead* reads, int from, int n, IoPriority priority,
                 IoStatsCounters& counters);

// Backend factories. The io_uring one fails with Unavailable when io_uring cannot start
// (including builds without liburing).
absl::StatusOr<std::unique_ptr<IoExecutor>> CreateUringExecutor(const IoOptions& options);
std::unique_ptr<IoExecutor> CreatePreadExecutor(const IoOptions& options);

}  // namespace kx::io_internal
