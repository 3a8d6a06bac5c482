#include "base/log.h"

#include <cstdlib>
#include <mutex>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace kx {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger() {
  auto logger = std::make_shared<spdlog::logger>(
      "kairox", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[kairox %L] %v");
  spdlog::level::level_enum level = spdlog::level::warn;
  if (const char* env = std::getenv("KAIROX_LOG_LEVEL")) level = spdlog::level::from_str(env);
  logger->set_level(level);
  return logger;
}

std::shared_ptr<spdlog::logger>& LoggerPtr() {
  static std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return logger;
}

std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

spdlog::logger& Log() { return *LoggerPtr(); }

void SetLogSink(std::shared_ptr<spdlog::sinks::sink> sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  auto& sinks = LoggerPtr()->sinks();
  sinks.clear();
  sinks.push_back(std::move(sink));
}

void SetLogLevel(spdlog::level::level_enum level) { LoggerPtr()->set_level(level); }

}  // namespace kx
