// The pread backend of the I/O executor: worker threads sleep on a condition variable, take
// the next read by the queue rule (critical first, background capped), pread() it to the end
// (continuing after short reads, EINTR and EAGAIN) and complete its event. The fallback when
// io_uring is unavailable, and the backend that makes ordering tests deterministic.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/timer.h"
#include "exec/io_internal.h"

namespace kx::io_internal {
namespace {

class PreadExecutor final : public IoExecutor {
 public:
  explicit PreadExecutor(const IoOptions& o)
      : queues_(o.max_queued, std::max(1, std::min(o.max_background_inflight,
                                                   o.pread_threads - 1))),
        debug_delay_us_(o.debug_delay_us) {
    workers_.reserve(static_cast<size_t>(o.pread_threads));
    for (int i = 0; i < o.pread_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  ~PreadExecutor() override {
    std::vector<IoOp> cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (IoPriority p : {IoPriority::kCritical, IoPriority::kBackground}) {
        while (!queues_.ring(p).empty()) cancelled.push_back(queues_.ring(p).Pop());
      }
    }
    work_cv_.notify_all();
    space_cv_.notify_all();
    for (std::thread& t : workers_) t.join();  // each finishes the read it holds
    for (const IoOp& op : cancelled) {
      counters_.OpDone(op, /*ok=*/false, NowNs());
      op.read.event->CompleteOne(CancelledError(op));
    }
  }

  const char* backend_name() const override { return "pread"; }

  void Submit(IoPriority priority, const IoRead* reads, int n) override {
    if (n <= 0) return;
    counters_.Batch();
    int i = 0;
    while (i < n) {
      std::unique_lock<std::mutex> lock(mu_);
      IoOpRing& ring = queues_.ring(priority);
      space_cv_.wait(lock, [&] { return !ring.full() || stopping_; });
      const int before = i;
      for (; i < n && !ring.full() && !stopping_; ++i) {
        absl::Status aligned = CheckDirectAlignment(reads[i]);
        if (!aligned.ok()) {
          lock.unlock();  // the callback may Submit
          reads[i].event->CompleteOne(std::move(aligned));
          lock.lock();
          continue;
        }
        ring.Push(IoOp{reads[i], 0, NowNs(), 0, priority});
      }
      const int pushed = i - before;
      if (stopping_) {  // submitting into a dying executor: cancel the rest
        lock.unlock();
        CancelReads(reads, i, n, priority, counters_);
        return;
      }
      lock.unlock();
      if (pushed > 1) work_cv_.notify_all();
      else work_cv_.notify_one();
    }
  }

  absl::Status RegisterBuffer(void* /*base*/, uint64_t /*bytes*/) override {
    return absl::OkStatus();
  }

  IoStats stats() const override { return counters_.Snapshot(); }

 private:
  void WorkerLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || queues_.HasEligible(); });
      if (stopping_) return;
      IoOp op;
      queues_.TakeNext(&op, NowNs());
      lock.unlock();
      space_cv_.notify_all();  // submitters of either priority may wait for room
      if (debug_delay_us_ > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(debug_delay_us_));
      }
      absl::Status status = ReadAll(&op);
      lock.lock();
      queues_.Finished(op);
      const bool more_background = op.priority == IoPriority::kBackground && queues_.HasEligible();
      lock.unlock();
      // A background slot freed: another worker may be waiting for it.
      if (more_background) work_cv_.notify_one();
      counters_.OpDone(op, status.ok(), NowNs());
      op.read.event->CompleteOne(std::move(status));
      lock.lock();
    }
  }

  // Reads op->read to the end; op->done_bytes counts progress.
  absl::Status ReadAll(IoOp* op) {
    const IoRead& r = op->read;
    while (op->done_bytes < r.length) {
      const uint64_t want = std::min(r.length - op->done_bytes, kMaxReadChunk);
      const ssize_t got = pread(r.fd, static_cast<char*>(r.dst) + op->done_bytes, want,
                                static_cast<off_t>(r.offset + op->done_bytes));
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) {
          counters_.Resubmit();
          continue;
        }
        return ReadError(*op, errno);
      }
      if (got == 0) return EofError(*op);
      op->done_bytes += static_cast<uint64_t>(got);
      if (op->done_bytes < r.length) counters_.Resubmit();
    }
    return absl::OkStatus();
  }

  std::mutex mu_;
  std::condition_variable work_cv_;   // workers: an op became eligible, or stopping
  std::condition_variable space_cv_;  // submitters: queue space freed, or stopping
  IoQueues queues_;
  bool stopping_ = false;
  IoStatsCounters counters_;
  std::vector<std::thread> workers_;
  const int debug_delay_us_;
};

}  // namespace

std::unique_ptr<IoExecutor> CreatePreadExecutor(const IoOptions& options) {
  return std::make_unique<PreadExecutor>(options);
}

}  // namespace kx::io_internal
