// kairox-server's sessions: N sessions (--parallel) over one loaded model, lent to one
// request at a time, with a bounded queue of requests waiting for one (--queue). A request
// that finds every session busy and the queue full is refused at once (HTTP 503), so a
// burst never piles up unbounded work or threads.
//
//   SlotPool pool(model, session_params, /*n_slots=*/2, /*max_queue=*/8);
//   std::optional<SlotPool::Lease> lease = pool.Acquire(prompt_ids);
//   if (!lease) return Reply503();
//   lease->session().Chat(messages, ...);   // returned to the pool when `lease` goes
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kairox/kairox.hpp"

namespace kx::server {

class SlotPool {
 public:
  SlotPool(const kairox::Model& model, const kairox::SessionParams& params, int n_slots,
           int max_queue);
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // A session lent to one request; returned to the pool when destroyed.
  class Lease {
   public:
    Lease(SlotPool* pool, int index) : pool_(pool), index_(index) {}
    Lease(Lease&& other) noexcept : pool_(other.pool_), index_(other.index_) {
      other.pool_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    kairox::Session& session() { return *pool_->sessions_[index_]; }
    int index() const { return index_; }

   private:
    SlotPool* pool_;
    int index_;
  };

  // A free session, preferring the one whose KV cache shares the longest prefix with
  // `prompt` (so a conversation's next turn usually finds its own cache). Waits while all are
  // busy, unless max_queue requests already wait: then nullopt at once. nullopt as well once
  // Shutdown was called.
  std::optional<Lease> Acquire(const std::vector<int32_t>& prompt);

  // Wakes and refuses every waiting request and every later one.
  void Shutdown();

  struct Counts {
    int slots = 0;
    int busy = 0;
    int queued = 0;
    uint64_t refused = 0;  // requests answered 503
  };
  Counts counts() const;

 private:
  void Release(int index);

  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<kairox::Session>> sessions_;
  std::vector<bool> busy_;
  std::vector<std::vector<int32_t>> held_;  // each session's tokens when it was returned
  int max_queue_;
  int queued_ = 0;
  uint64_t refused_ = 0;
  bool shutdown_ = false;
};

}  // namespace kx::server
