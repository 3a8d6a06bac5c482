#include "engine/device_watch.h"

namespace kx {

DeviceWatch::DeviceWatch(Device& device) : device_(device), thread_([this] { Loop(); }) {}

DeviceWatch::~DeviceWatch() {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queued_cv_.notify_one();
  thread_.join();
}

void DeviceWatch::Watch(std::initializer_list<Pair> pairs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (head_ == queue_.size()) {  // drained: reuse the storage from the start
      queue_.clear();
      head_ = 0;
    }
    queue_.insert(queue_.end(), pairs.begin(), pairs.end());
  }
  queued_cv_.notify_one();
}

void DeviceWatch::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  drained_cv_.wait(lock, [&] { return head_ == queue_.size() && !busy_; });
}

absl::Status DeviceWatch::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void DeviceWatch::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    queued_cv_.wait(lock, [&] { return stop_ || head_ < queue_.size(); });
    if (head_ == queue_.size()) return;  // stop_ with nothing queued
    const Pair p = queue_[head_++];
    busy_ = true;
    const bool early = debug_signal_early_;
    lock.unlock();
    absl::Status st = early ? absl::OkStatus() : device_.EventSynchronize(*p.event);
    p.g->Signal(p.node);
    lock.lock();
    busy_ = false;
    if (!st.ok() && status_.ok()) status_ = st;
    if (head_ == queue_.size()) drained_cv_.notify_all();
  }
}

}  // namespace kx
