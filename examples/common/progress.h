// A one-line progress bar on stderr for steps that take longer than a
// second, drawn only when stderr is a terminal (logs and pipes stay clean);
// and StageLines, one line per stage of a long job for when stderr is not a
// terminal (a log or CI then shows that the job is alive and where it is).
// Header-only, for the programs.
//
//   kx::cli::Progress bar("scoring chunks", n_chunks);
//   for (int i = 0; i < n_chunks; ++i) { ...; bar.Update(i + 1); }
//   bar.Finish();
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace kx::cli {

class Progress {
 public:
  Progress(std::string label, int64_t total)
      : label_(std::move(label)),
        total_(total > 0 ? total : 1),
        enabled_(isatty(STDERR_FILENO) != 0),
        start_(std::chrono::steady_clock::now()) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { Finish(); }

  // Redraws with `done` of `total` finished, once the step has run a second.
  void Update(int64_t done) {
    if (!enabled_) return;
    const double elapsed = Seconds();
    if (elapsed < kShowAfterSeconds) return;
    const double frac = static_cast<double>(done < total_ ? done : total_) / total_;
    const int filled = static_cast<int>(frac * kWidth + 0.5);
    const double eta = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
    std::fprintf(stderr, "\r%s [%s%s] %3d%% %.0fs left\033[K", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 static_cast<int>(frac * 100.0 + 0.5), eta);
    std::fflush(stderr);
    drawn_ = true;
  }

  // Clears the line if anything was drawn.
  void Finish() {
    if (drawn_) std::fputs("\r\033[K", stderr);
    drawn_ = false;
  }

 private:
  static constexpr double kShowAfterSeconds = 1.0;
  static constexpr int kWidth = 30;

  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  std::string label_;
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

// "<program>: <stage> ..." when a stage starts and "<program>: <stage> done in S s" when the next
// one starts or Finish is called.
class StageLines {
 public:
  explicit StageLines(std::string program) : program_(std::move(program)) {}
  StageLines(const StageLines&) = delete;
  StageLines& operator=(const StageLines&) = delete;
  ~StageLines() { Finish(); }

  // Reports progress in `stage`; a line is printed only when the stage changes.
  void Update(const std::string& stage) {
    if (stage == stage_) return;
    Finish();
    stage_ = stage;
    start_ = std::chrono::steady_clock::now();
    std::fprintf(stderr, "%s: %s ...\n", program_.c_str(), stage_.c_str());
    std::fflush(stderr);
  }

  // Closes the current stage, if any.
  void Finish() {
    if (stage_.empty()) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "%s: %s done in %.1f s\n", program_.c_str(), stage_.c_str(), s);
    std::fflush(stderr);
    stage_.clear();
  }

 private:
  std::string program_;
  std::string stage_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kx::cli
