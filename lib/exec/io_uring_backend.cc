// The io_uring backend of the I/O executor. Submitters (under one mutex) queue reads, move
// the eligible ones into SQEs and call io_uring_submit once per batch; one completion thread
// sleeps in io_uring_wait_cqe (no SQPOLL, no busy loop), reaps CQEs in batches, resubmits
// short reads and EINTR/EAGAIN, refills the ring from the queues, and completes events
// outside the lock. Only that thread touches the CQ; the SQ is touched under the mutex.
// Builds without liburing get a stub that reports io_uring as unavailable.
#include <cerrno>
#include <cstring>

#include "exec/io_internal.h"

#if defined(KX_HAVE_URING)
#include <liburing.h>
#include <sched.h>
#include <sys/uio.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/timer.h"
#endif

namespace kx::io_internal {

#if defined(KX_HAVE_URING)
namespace {

// user_data of the NOP the destructor submits to wake the completion thread.
constexpr uint64_t kWakeTag = ~uint64_t{0};
// The kernel caps one registered buffer at 1 GiB.
constexpr uint64_t kMaxFixedBufferBytes = uint64_t{1} << 30;

class UringExecutor final : public IoExecutor {
 public:
  explicit UringExecutor(const IoOptions& o)
      : queue_depth_(o.queue_depth),
        queues_(o.max_queued,
                std::max(1, std::min(o.max_background_inflight, o.queue_depth - 1))),
        slots_(static_cast<size_t>(o.queue_depth)) {
    free_slots_.reserve(slots_.size());
    for (int i = o.queue_depth - 1; i >= 0; --i) free_slots_.push_back(i);
  }

  // Sets up the ring (one extra entry for the destructor's wake-up NOP) and the thread.
  absl::Status Start() {
    const int ret = io_uring_queue_init(static_cast<unsigned>(queue_depth_ + 1), &ring_, 0);
    if (ret < 0) {
      return absl::UnavailableError(absl::StrFormat(
          "io_uring_queue_init(%d) failed: %s", queue_depth_ + 1, std::strerror(-ret)));
    }
    ring_ready_ = true;
    thread_ = std::thread([this] { CompletionLoop(); });
    return absl::OkStatus();
  }

  ~UringExecutor() override {
    if (!ring_ready_) return;
    std::vector<IoOp> cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (IoPriority p : {IoPriority::kCritical, IoPriority::kBackground}) {
        while (!queues_.ring(p).empty()) cancelled.push_back(queues_.ring(p).Pop());
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      KX_CHECK_MSG(sqe != nullptr, "io_uring: no SQE for the shutdown NOP");
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kWakeTag);
      SubmitRingLocked();
    }
    space_cv_.notify_all();
    thread_.join();  // returns once every read in flight completed
    for (const IoOp& op : cancelled) {
      counters_.OpDone(op, /*ok=*/false, NowNs());
      op.read.event->CompleteOne(CancelledError(op));
    }
    io_uring_queue_exit(&ring_);
  }

  const char* backend_name() const override { return "io_uring"; }

  void Submit(IoPriority priority, const IoRead* reads, int n) override {
    int i = 0;
    while (i < n) {
      std::unique_lock<std::mutex> lock(mu_);
      IoOpRing& ring = queues_.ring(priority);
      space_cv_.wait(lock, [&] { return !ring.full() || stopping_; });
      if (stopping_) {  // submitting into a dying executor: cancel the rest
        lock.unlock();
        CancelReads(reads, i, n, priority, counters_);
        return;
      }
      for (; i < n && !ring.full(); ++i) {
        absl::Status aligned = CheckDirectAlignment(reads[i]);
        if (!aligned.ok()) {
          lock.unlock();  // the callback may Submit
          reads[i].event->CompleteOne(std::move(aligned));
          lock.lock();
          if (stopping_) break;
          continue;
        }
        ring.Push(IoOp{reads[i], 0, NowNs(), 0, priority});
      }
      DispatchLocked();
      SubmitRingLocked();
    }
  }

  absl::Status RegisterBuffer(void* base, uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fixed_base_ != nullptr) {
      return absl::FailedPreconditionError("io_uring: a fixed buffer is already registered");
    }
    if (base == nullptr || bytes == 0 || bytes > kMaxFixedBufferBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "io_uring: fixed buffer of %u bytes at %p (want 1 byte to 1 GiB)", bytes, base));
    }
    iovec iov{base, static_cast<size_t>(bytes)};
    const int ret = io_uring_register_buffers(&ring_, &iov, 1);
    if (ret < 0) {
      return absl::Status(
          absl::ErrnoToStatusCode(-ret),
          absl::StrFormat("io_uring_register_buffers(%u bytes) failed: %s (RLIMIT_MEMLOCK?)",
                          bytes, std::strerror(-ret)));
    }
    fixed_base_ = static_cast<char*>(base);
    fixed_bytes_ = bytes;
    return absl::OkStatus();
  }

  IoStats stats() const override { return counters_.Snapshot(); }

 private:
  // Moves eligible queued reads into free slots and SQEs.
  void DispatchLocked() {
    const size_t popped_before = popped_;
    IoOp op;
    while (!free_slots_.empty() && queues_.TakeNext(&op, NowNs())) {
      const int slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[static_cast<size_t>(slot)] = op;
      PrepReadLocked(slot);
      ++popped_;
    }
    if (popped_ != popped_before) space_cv_.notify_all();
  }

  // An SQE for the unread rest of slots_[slot] (at most kMaxReadChunk bytes).
  void PrepReadLocked(int slot) {
    const IoOp& op = slots_[static_cast<size_t>(slot)];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The SQ is empty outside the lock and has queue_depth + 1 entries.
    KX_CHECK_MSG(sqe != nullptr, "io_uring: SQ full");
    char* dst = static_cast<char*>(op.read.dst) + op.done_bytes;
    const uint64_t len = std::min(op.read.length - op.done_bytes, kMaxReadChunk);
    const uint64_t offset = op.read.offset + op.done_bytes;
    if (fixed_base_ != nullptr && dst >= fixed_base_ && len <= fixed_bytes_ &&
        static_cast<uint64_t>(dst - fixed_base_) <= fixed_bytes_ - len) {
      io_uring_prep_read_fixed(sqe, op.read.fd, dst, static_cast<unsigned>(len), offset, 0);
    } else {
      io_uring_prep_read(sqe, op.read.fd, dst, static_cast<unsigned>(len), offset);
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
  }

  // Hands every prepared SQE to the kernel: one io_uring_submit per batch (more only when
  // the kernel took part of it or was interrupted).
  void SubmitRingLocked() {
    while (io_uring_sq_ready(&ring_) > 0) {
      const int ret = io_uring_submit(&ring_);
      if (ret >= 0) {
        counters_.Batch();
        continue;
      }
      KX_CHECK_MSG(ret == -EINTR || ret == -EAGAIN || ret == -EBUSY,
                   "io_uring_submit failed with an unexpected error");
      sched_yield();  // transient kernel shortage: retry
    }
  }

  // One CQE for `slot` with result `res`. A finished read is appended to finished_ (its
  // event completes outside the lock); an unfinished one gets a new SQE.
  void HandleCqeLocked(int slot, int res) {
    IoOp& op = slots_[static_cast<size_t>(slot)];
    absl::Status status;
    if (res == -EINTR || res == -EAGAIN) {
      counters_.Resubmit();
      PrepReadLocked(slot);
      return;
    }
    if (res < 0) {
      status = ReadError(op, -res);
    } else if (res == 0 && op.done_bytes < op.read.length) {
      status = EofError(op);
    } else {
      op.done_bytes += static_cast<uint64_t>(res);
      if (op.done_bytes < op.read.length) {  // short read: ask for the rest
        counters_.Resubmit();
        PrepReadLocked(slot);
        return;
      }
    }
    finished_.push_back(op);
    finished_status_.push_back(std::move(status));
    queues_.Finished(op);
    free_slots_.push_back(slot);
  }

  void CompletionLoop() {
    // Capacity for one batch: each slot finishes at most once per batch.
    finished_.reserve(slots_.size());
    finished_status_.reserve(slots_.size());
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int ret = io_uring_wait_cqe(&ring_, &cqe);
      if (ret == -EINTR || ret == -EAGAIN) continue;
      KX_CHECK_MSG(ret == 0, "io_uring_wait_cqe failed");
      bool exit = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        unsigned head = 0;
        unsigned seen = 0;
        io_uring_for_each_cqe(&ring_, head, cqe) {
          ++seen;
          const uint64_t tag = io_uring_cqe_get_data64(cqe);
          if (tag != kWakeTag) HandleCqeLocked(static_cast<int>(tag), cqe->res);
        }
        io_uring_cq_advance(&ring_, seen);
        if (!stopping_) DispatchLocked();
        SubmitRingLocked();
        exit = stopping_ && free_slots_.size() == slots_.size();
      }
      const int64_t now = NowNs();
      for (size_t k = 0; k < finished_.size(); ++k) {
        counters_.OpDone(finished_[k], finished_status_[k].ok(), now);
        finished_[k].read.event->CompleteOne(std::move(finished_status_[k]));
      }
      finished_.clear();
      finished_status_.clear();
      if (exit) return;
    }
  }

  const int queue_depth_;
  io_uring ring_{};
  bool ring_ready_ = false;
  std::thread thread_;

  std::mutex mu_;  // guards everything below except the completion thread's finished_*
  std::condition_variable space_cv_;  // submitters: queue space freed, or stopping
  IoQueues queues_;
  std::vector<IoOp> slots_;      // reads in flight, by slot (the SQE's user_data)
  std::vector<int> free_slots_;  // a stack
  size_t popped_ = 0;
  bool stopping_ = false;
  char* fixed_base_ = nullptr;
  uint64_t fixed_bytes_ = 0;

  std::vector<IoOp> finished_;                  // completion thread only
  std::vector<absl::Status> finished_status_;  // completion thread only
  IoStatsCounters counters_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoExecutor>> CreateUringExecutor(const IoOptions& options) {
  auto executor = std::make_unique<UringExecutor>(options);
  const absl::Status started = executor->Start();
  if (!started.ok()) return started;
  return std::unique_ptr<IoExecutor>(std::move(executor));
}

#else  // !KX_HAVE_URING

absl::StatusOr<std::unique_ptr<IoExecutor>> CreateUringExecutor(const IoOptions& /*options*/) {
  return absl::UnavailableError("io_uring: kairox was built without liburing");
}

#endif

}  // namespace kx::io_internal
