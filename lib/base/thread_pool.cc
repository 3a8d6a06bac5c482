#include "base/thread_pool.h"

#include <algorithm>

#include "base/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KX_CPU_RELAX() _mm_pause()
#else
#define KX_CPU_RELAX() std::this_thread::yield()
#endif

namespace kx {
namespace {
// How long an idle worker spins outside a hot section before sleeping: long
// enough to bridge the gap between two tokens of a running generation loop,
// short enough that an idle program sleeps.
constexpr int64_t kColdSpinNs = 2'000'000;
// Pauses before a spinning thread starts yielding its core: when more
// threads are runnable than there are cores (other programs, a loaded CI
// machine), the thread being waited for may be descheduled, and spinning on
// would only delay it.
constexpr int64_t kSpinNsBeforeYield = 20'000;

// One step of a wait loop: pause, and once the wait has lasted
// kSpinNsBeforeYield, yield the core instead. `spins` and `start_ns` belong
// to the caller's loop and start at 0.
inline void Backoff(uint32_t& spins, int64_t& start_ns) {
  if ((++spins & 63) != 0) {
    KX_CPU_RELAX();
    return;
  }
  const int64_t now = NowNs();
  if (start_ns == 0) start_ns = now;
  if (now - start_ns < kSpinNsBeforeYield) {
    KX_CPU_RELAX();
  } else {
    std::this_thread::yield();
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::BeginHot() { hot_.fetch_add(1, std::memory_order_relaxed); }
void ThreadPool::EndHot() { hot_.fetch_sub(1, std::memory_order_relaxed); }

void ThreadPool::Split(int64_t n, int ith, int nth, int64_t align, int64_t* begin,
                       int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / nth;
  const int64_t extra = units % nth;
  const int64_t b = ith * per + std::min<int64_t>(ith, extra);
  const int64_t e = b + per + (ith < extra ? 1 : 0);
  *begin = std::min(n, b * align);
  *end = std::min(n, e * align);
}

void ThreadPool::RunErased(JobFn fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  job_fn_ = fn;
  job_ctx_ = ctx;
  remaining_.store(n_threads_ - 1, std::memory_order_relaxed);
  // seq_cst pairs with the sleepers_ increment in WorkerLoop: either the
  // worker sees the new generation before sleeping or we see it sleeping.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(ctx, 0, n_threads_);
  uint32_t spins = 0;
  int64_t wait_start = 0;
  while (remaining_.load(std::memory_order_acquire) != 0) Backoff(spins, wait_start);
}

void ThreadPool::WorkerLoop(int ith) {
  uint64_t seen = 0;
  while (true) {
    int64_t spin_start = 0, hot_start = 0;
    uint32_t spins = 0, hot_spins = 0;
    uint64_t gen;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
      if (hot_.load(std::memory_order_relaxed) > 0) {
        Backoff(hot_spins, hot_start);
        continue;
      }
      KX_CPU_RELAX();
      if ((++spins & 1023) != 0) continue;
      if (spin_start == 0) spin_start = NowNs();
      if (NowNs() - spin_start < kColdSpinNs) continue;
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      generation_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      spin_start = 0;
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    job_fn_(job_ctx_, ith, n_threads_);
    remaining_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kx
