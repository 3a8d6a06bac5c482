// Logging through spdlog. Everything kairox logs goes to one logger named
// "kairox" whose sinks the embedding application may replace (the C ABI will
// expose a callback sink). Default: stderr, level from KAIROX_LOG_LEVEL
// (trace|debug|info|warn|error|off), "warn" if unset.
#pragma once

#include <memory>

#include "spdlog/spdlog.h"

namespace kx {

// The library's logger; created on first use.
spdlog::logger& Log();

// Replaces the logger's sinks with `sink` (not null). Thread-safe w.r.t. other
// calls of SetLogSink, not w.r.t. concurrent logging.
void SetLogSink(std::shared_ptr<spdlog::sinks::sink> sink);

void SetLogLevel(spdlog::level::level_enum level);

}  // namespace kx
