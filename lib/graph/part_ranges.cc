#include "graph/part_ranges.h"

#include <limits>

#include "base/check.h"

namespace kx::graph {

void PartRanges::Init(int n_parts) {
  n_parts_ = n_parts < 1 ? 1 : n_parts;
  ranges_ = std::make_unique<Range[]>(static_cast<size_t>(n_parts_));
}

void PartRanges::Arm(int64_t n_units) {
  KX_CHECK(n_units >= 0 && n_units <= std::numeric_limits<int32_t>::max());
  for (int i = 0; i < n_parts_; ++i) {
    const auto begin = static_cast<uint32_t>(n_units * i / n_parts_);
    const auto end = static_cast<uint32_t>(n_units * (i + 1) / n_parts_);
    ranges_[i].bounds.store(Pack(begin, end), std::memory_order_relaxed);
  }
}

bool PartRanges::Take(int part, int64_t* unit) { return TakeOwn(part, unit) || Steal(part, unit); }

bool PartRanges::TakeOwn(int part, int64_t* unit) {
  std::atomic<uint64_t>& bounds = ranges_[part].bounds;
  uint64_t b = bounds.load(std::memory_order_relaxed);
  while (Next(b) < End(b)) {
    if (bounds.compare_exchange_weak(b, Pack(Next(b) + 1, End(b)), std::memory_order_relaxed)) {
      *unit = Next(b);
      return true;
    }
  }
  return false;
}

bool PartRanges::Steal(int part, int64_t* unit) {
  while (true) {
    // The victim: the range with the most units left (ties: the first), which spreads thieves
    // over the ranges and takes from the owner that is furthest behind.
    int victim = -1;
    uint64_t vb = 0;
    uint32_t most = 0;
    for (int i = 0; i < n_parts_; ++i) {
      if (i == part) continue;
      const uint64_t b = ranges_[i].bounds.load(std::memory_order_relaxed);
      if (Next(b) < End(b) && End(b) - Next(b) > most) {
        most = End(b) - Next(b);
        victim = i;
        vb = b;
      }
    }
    if (victim < 0) return false;
    std::atomic<uint64_t>& bounds = ranges_[victim].bounds;
    while (Next(vb) < End(vb)) {
      if (bounds.compare_exchange_weak(vb, Pack(Next(vb), End(vb) - 1),
                                       std::memory_order_relaxed)) {
        *unit = End(vb) - 1;
        ranges_[part].stolen.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    }
    // The victim emptied meanwhile: look again.
  }
}

int64_t PartRanges::stolen() const {
  int64_t n = 0;
  for (int i = 0; i < n_parts_; ++i) n += ranges_[i].stolen.load(std::memory_order_relaxed);
  return n;
}

}  // namespace kx::graph
