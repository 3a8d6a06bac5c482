// A bounded multi-producer multi-consumer queue of 64-bit values, lock-free:
// the ready list of TaskGraph (ready task parts).
//
// The design is Dmitry Vyukov's bounded MPMC ring: every cell carries a
// sequence number that says whose turn it is (a producer at position p waits
// for seq == p, a consumer for seq == p + 1), so producers and consumers only
// contend on their own position counter with one CAS each and never take a
// lock. Capacity is fixed at Init (a power of two); nothing allocates after.
//
// Usage:
//   ReadyQueue q;
//   q.Init(1024);               // once, not thread-safe
//   q.TryPush(v);               // any thread; false when full
//   uint64_t v; q.TryPop(&v);   // any thread; false when empty
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace kx::graph {

class ReadyQueue {
 public:
  ReadyQueue() = default;
  ReadyQueue(const ReadyQueue&) = delete;
  ReadyQueue& operator=(const ReadyQueue&) = delete;

  // Allocates room for at least min_capacity values (rounded up to a power
  // of two, at least 2) and empties the queue. Not thread-safe.
  void Init(int64_t min_capacity) {
    capacity_ = 2;
    while (capacity_ < min_capacity) capacity_ *= 2;
    cells_ = std::make_unique<Cell[]>(static_cast<size_t>(capacity_));
    Clear();
  }

  // Empties the queue without allocating. Not thread-safe: no push or pop
  // may run at the same time.
  void Clear() {
    for (int64_t i = 0; i < capacity_; ++i) {
      cells_[i].seq.store(static_cast<uint64_t>(i), std::memory_order_relaxed);
    }
    enqueue_pos_.store(0, std::memory_order_relaxed);
    dequeue_pos_.store(0, std::memory_order_relaxed);
  }

  int64_t capacity() const { return capacity_; }

  // Appends v; false when the queue is full.
  bool TryPush(uint64_t v) {
    const uint64_t mask = static_cast<uint64_t>(capacity_ - 1);
    uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
    Cell* cell;
    while (true) {
      cell = &cells_[pos & mask];
      const uint64_t seq = cell->seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - pos);
      if (diff == 0) {
        // Our turn at this cell: claim the position.
        if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // the cell still holds a value from one lap ago: full
      } else {
        pos = enqueue_pos_.load(std::memory_order_relaxed);  // another producer won
      }
    }
    cell->value = v;
    cell->seq.store(pos + 1, std::memory_order_release);  // publish to the consumer of pos
    return true;
  }

  // Removes the oldest value into *v; false when the queue is empty.
  bool TryPop(uint64_t* v) {
    const uint64_t mask = static_cast<uint64_t>(capacity_ - 1);
    uint64_t pos = dequeue_pos_.load(std::memory_order_relaxed);
    Cell* cell;
    while (true) {
      cell = &cells_[pos & mask];
      const uint64_t seq = cell->seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - (pos + 1));
      if (diff == 0) {
        if (dequeue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // no producer has published this position yet: empty
      } else {
        pos = dequeue_pos_.load(std::memory_order_relaxed);  // another consumer won
      }
    }
    *v = cell->value;
    // Hand the cell to the producer one lap ahead.
    cell->seq.store(pos + static_cast<uint64_t>(capacity_), std::memory_order_release);
    return true;
  }

  // A racy emptiness hint for spinning waiters (exact when no one pushes or pops).
  bool LooksEmpty() const {
    return enqueue_pos_.load(std::memory_order_relaxed) ==
           dequeue_pos_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr int kCacheLine = 64;
  struct Cell {
    std::atomic<uint64_t> seq{0};
    uint64_t value = 0;
  };

  std::unique_ptr<Cell[]> cells_;
  int64_t capacity_ = 0;
  // Producers and consumers on separate cache lines so they do not false-share.
  alignas(kCacheLine) std::atomic<uint64_t> enqueue_pos_{0};
  alignas(kCacheLine) std::atomic<uint64_t> dequeue_pos_{0};
};

}  // namespace kx::graph
