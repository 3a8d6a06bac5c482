// kairox-server's session pool (see slots.h).
#include "server/slots.h"

#include <algorithm>

namespace kx::server {

SlotPool::SlotPool(const kairox::Model& model, const kairox::SessionParams& params, int n_slots,
                   int max_queue)
    : max_queue_(max_queue) {
  for (int i = 0; i < n_slots; ++i) {
    sessions_.push_back(std::make_unique<kairox::Session>(model, params));
  }
  busy_.assign(n_slots, false);
  held_.resize(n_slots);
}

SlotPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Release(index_);
}

std::optional<SlotPool::Lease> SlotPool::Acquire(const std::vector<int32_t>& prompt) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto any_free = [&] { return std::find(busy_.begin(), busy_.end(), false) != busy_.end(); };
  if (shutdown_) return std::nullopt;
  if (!any_free()) {
    if (queued_ >= max_queue_) {
      ++refused_;
      return std::nullopt;
    }
    ++queued_;
    freed_.wait(lock, [&] { return shutdown_ || any_free(); });
    --queued_;
    if (shutdown_) return std::nullopt;
  }
  // The free session sharing the longest prefix with the prompt (the first one on a tie).
  int best = -1;
  size_t best_common = 0;
  for (int i = 0; i < static_cast<int>(sessions_.size()); ++i) {
    if (busy_[i]) continue;
    const std::vector<int32_t>& held = held_[i];
    const size_t n = std::min(held.size(), prompt.size());
    const size_t common =
        std::mismatch(held.begin(), held.begin() + n, prompt.begin()).first - held.begin();
    if (best < 0 || common > best_common) {
      best = i;
      best_common = common;
    }
  }
  busy_[best] = true;
  return Lease(this, best);
}

void SlotPool::Release(int index) {
  // Read outside the lock: the session is still this request's until busy_ is cleared.
  std::vector<int32_t> held;
  try {
    held = sessions_[index]->Tokens();
  } catch (...) {
    held.clear();  // only costs the next request its prefix reuse
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held_[index] = std::move(held);
    busy_[index] = false;
  }
  freed_.notify_one();
}

void SlotPool::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  freed_.notify_all();
}

SlotPool::Counts SlotPool::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counts c;
  c.slots = static_cast<int>(sessions_.size());
  c.busy = static_cast<int>(std::count(busy_.begin(), busy_.end(), true));
  c.queued = queued_;
  c.refused = refused_;
  return c;
}

}  // namespace kx::server
