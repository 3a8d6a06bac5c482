// A persistent pool of worker threads for data-parallel ops inside a token.
//
// Run(fn) calls fn(thread_index, n_threads) on every thread — the calling
// thread is index 0 and works too — and returns when all have finished.
// While the pool is "hot" (between BeginHot() and EndHot(), i.e. inside a
// token or a batch), idle workers spin so the next Run starts within a
// cache-line round trip; outside, they spin briefly and then sleep on a
// futex, so an idle program burns no core.
//
// Usage:
//   kx::ThreadPool pool(2);
//   kx::ThreadPool::HotScope hot(pool);
//   pool.Run([&](int ith, int nth) { /* rows [ith*n/nth, (ith+1)*n/nth) */ });
// Run is not reentrant and is called from one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace kx {

class ThreadPool {
 public:
  // n_threads counts the caller; values < 1 mean 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  template <typename Fn>
  void Run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    RunErased(
        [](void* ctx, int ith, int nth) { (*static_cast<F*>(ctx))(ith, nth); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  void BeginHot();
  void EndHot();

  class HotScope {
   public:
    explicit HotScope(ThreadPool& pool) : pool_(pool) { pool_.BeginHot(); }
    ~HotScope() { pool_.EndHot(); }
    HotScope(const HotScope&) = delete;
    HotScope& operator=(const HotScope&) = delete;

   private:
    ThreadPool& pool_;
  };

  // The split of [0, n) that thread ith of nth handles, in multiples of `align`.
  static void Split(int64_t n, int ith, int nth, int64_t align, int64_t* begin, int64_t* end);

 private:
  using JobFn = void (*)(void* ctx, int ith, int nth);
  void RunErased(JobFn fn, void* ctx);
  void WorkerLoop(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  // Bumped once per Run; workers wait for it to change.
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> remaining_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<int> hot_{0};
  std::atomic<bool> stop_{false};
  JobFn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
};

}  // namespace kx
