#include "device/sim_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/size_parse.h"
#include "device/device.h"

namespace kx {
namespace {

uint64_t RoundUp(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

}  // namespace

absl::StatusOr<SimArena> SimArena::Reserve(uint64_t bytes) {
  if (bytes == 0 || bytes > (uint64_t{1} << 48)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim arena: cannot reserve ", bytes, " bytes of address space"));
  }
  const uint64_t size = RoundUp(bytes, kDeviceAlignment);
  // MAP_NORESERVE: the simulated VRAM costs host memory only where it is touched.
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sim arena: mmap of ", FormatBytes(size), " of address space failed (",
                     std::strerror(errno), "); ask for a smaller VRAM budget"));
  }
  SimArena arena;
  arena.base_ = static_cast<uint8_t*>(p);
  arena.size_ = size;
  arena.free_.emplace(0, size);
  return arena;
}

SimArena::SimArena(SimArena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      free_(std::move(other.free_)),
      live_(std::move(other.live_)) {}

SimArena& SimArena::operator=(SimArena&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, size_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    free_ = std::move(other.free_);
    live_ = std::move(other.live_);
  }
  return *this;
}

SimArena::~SimArena() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

void* SimArena::Alloc(uint64_t bytes) {
  const uint64_t rounded = RoundUp(bytes, kDeviceAlignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < rounded) continue;
    const uint64_t offset = it->first;
    const uint64_t left = it->second - rounded;
    free_.erase(it);
    if (left > 0) free_.emplace(offset + rounded, left);
    live_.emplace(offset, Block{bytes, rounded});
    std::memset(base_ + offset, kSimPoisonByte, rounded);
    return base_ + offset;
  }
  return nullptr;
}

uint64_t SimArena::Free(void* ptr) {
  KX_CHECK_MSG(Contains(ptr, 1), "SimArena::Free: not an arena pointer");
  const uint64_t offset = static_cast<uint64_t>(static_cast<uint8_t*>(ptr) - base_);
  auto live = live_.find(offset);
  KX_CHECK_MSG(live != live_.end(), "SimArena::Free: not the start of a live block");
  const Block block = live->second;
  live_.erase(live);
  std::memset(base_ + offset, kSimPoisonByte, block.rounded);
  // Coalesce with the free neighbours on both sides.
  uint64_t start = offset;
  uint64_t size = block.rounded;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
  return block.bytes;
}

bool SimArena::Contains(const void* ptr, uint64_t bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const auto b = reinterpret_cast<uintptr_t>(base_);
  return base_ != nullptr && p >= b && p - b <= size_ && bytes <= size_ - (p - b);
}

bool SimArena::Overlaps(const void* ptr, uint64_t bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const auto b = reinterpret_cast<uintptr_t>(base_);
  if (base_ == nullptr || bytes == 0) return false;
  return p < b + size_ && (p >= b || b - p < bytes);
}

bool SimArena::IsLive(const void* ptr, uint64_t bytes) const {
  if (!Contains(ptr, bytes)) return false;
  const uint64_t offset = static_cast<uint64_t>(static_cast<const uint8_t*>(ptr) - base_);
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  const uint64_t into = offset - it->first;
  return into <= it->second.bytes && bytes <= it->second.bytes - into;
}

}  // namespace kx
