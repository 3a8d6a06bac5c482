// A hard limit on the memory the engine owns in one tier (host RAM today, a
// device's memory later), with named accounting you can assert on.
//
// Everything that allocates under a budget reserves first and allocates only
// after the reservation succeeded; a reservation that would cross the limit
// fails with a message naming what asked, how much, what is already held and
// the limit — and changes nothing. Release gives bytes back.
//
//   kx::MemoryBudget ram(512ull << 20);                 // 512 MiB; kUnlimited: account only
//   KX_RETURN_IF_ERROR(ram.Reserve("KV cache", kv_bytes));
//   ...
//   ram.Release("KV cache", kv_bytes);
//   KX_CHECK(ram.used() <= ram.limit());
//
// Thread-safe (reservations are rare: at load and when buffers change size).
#pragma once

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kx {

class MemoryBudget {
 public:
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

  explicit MemoryBudget(uint64_t limit = kUnlimited) : limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // ResourceExhausted when used() + bytes would exceed limit(); nothing changes then.
  absl::Status Reserve(std::string_view what, uint64_t bytes);
  // Returns bytes reserved under `what` (aborts if more than was reserved: a caller bug).
  void Release(std::string_view what, uint64_t bytes);

  // Lowers or raises the limit; FailedPrecondition if more than `limit` is held.
  absl::Status SetLimit(uint64_t limit);

  uint64_t limit() const;
  bool unlimited() const { return limit() == kUnlimited; }
  uint64_t used() const;
  uint64_t peak() const;
  // Bytes held under `what` (0 if none).
  uint64_t held(std::string_view what) const;
  // (what, bytes) in first-reservation order, entries with 0 bytes left out.
  std::vector<std::pair<std::string, uint64_t>> entries() const;
  // One line per entry and a total: "KV cache 1.2 MiB, scratch 300 KiB, ... = 5.0 MiB of 8 GiB".
  std::string Report() const;

 private:
  mutable std::mutex mu_;
  uint64_t limit_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
  std::vector<std::pair<std::string, uint64_t>> entries_;
};

}  // namespace kx
