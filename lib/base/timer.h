// Monotonic wall-clock timing for statistics and benchmarks.
#pragma once

#include <chrono>
#include <cstdint>

namespace kx {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(NowNs()) {}
  void Reset() { start_ = NowNs(); }
  int64_t ElapsedNs() const { return NowNs() - start_; }
  double ElapsedSeconds() const { return static_cast<double>(ElapsedNs()) * 1e-9; }

 private:
  int64_t start_;
};

}  // namespace kx
