// The sim device's memory: one range of address space reserved up front (mmap, no swap
// reservation, so a 24 GiB simulated GPU costs only what is touched), carved into
// kDeviceAlignment-aligned blocks by first fit with coalescing. Poison is 0xFF bytes: fresh
// blocks are poisoned when handed out and freed blocks when returned, so no byte of a
// previous owner is ever visible. Not thread-safe: SimDevice serialises calls.
//
//   KX_ASSIGN_OR_RETURN(kx::SimArena arena, kx::SimArena::Reserve(1ull << 30));
//   void* p = arena.Alloc(4096);          // null: no block large enough
//   bool ok = arena.IsLive(p, 4096);      // true
//   arena.Free(p);                        // poisons, then returns the block
#pragma once

#include <cstdint>
#include <map>

#include "base/status.h"

namespace kx {

inline constexpr uint8_t kSimPoisonByte = 0xFF;

class SimArena {
 public:
  // ResourceExhausted when the address space is refused (strict overcommit, ulimit -v).
  static absl::StatusOr<SimArena> Reserve(uint64_t bytes);
  SimArena() = default;
  SimArena(SimArena&& other) noexcept;
  SimArena& operator=(SimArena&& other) noexcept;
  SimArena(const SimArena&) = delete;
  SimArena& operator=(const SimArena&) = delete;
  ~SimArena();

  // A poisoned block of at least `bytes`, or null when no free block is large enough.
  void* Alloc(uint64_t bytes);
  // Poisons and returns the block that starts at `ptr` (which Alloc returned); returns its
  // requested size. Aborts for a pointer that is not a live block's start (a caller bug).
  uint64_t Free(void* ptr);

  // Whether [ptr, ptr + bytes) lies inside one live block (its requested bytes).
  bool IsLive(const void* ptr, uint64_t bytes) const;
  // Whether [ptr, ptr + bytes) lies inside the reserved range (live or not).
  bool Contains(const void* ptr, uint64_t bytes) const;
  // Whether [ptr, ptr + bytes) overlaps the reserved range at all.
  bool Overlaps(const void* ptr, uint64_t bytes) const;

  uint64_t reserved_bytes() const { return size_; }
  uint64_t live_blocks() const { return live_.size(); }

 private:
  struct Block {
    uint64_t bytes;    // requested
    uint64_t rounded;  // taken from the free list
  };
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, disjoint, coalesced
  std::map<uint64_t, Block> live_;     // offset -> block
};

}  // namespace kx
