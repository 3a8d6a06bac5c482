// The C ABI's process-wide entry points: version, errors, logging. Every
// function checks its arguments, catches every exception and returns a
// status; nothing throws across this boundary (capi/internal.h: Guard).
#include <mutex>
#include <string>

#include "base/log.h"
#include "capi/internal.h"
#include "kairox/kairox.h"
#include "kairox/version.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace kx::capi {
namespace {

thread_local std::string t_last_error;

// What lib/base/log.cc prints, for when the stderr sink is restored.
constexpr const char* kStderrPattern = "[kairox %L] %v";

// Forwards each formatted log line to the user's callback.
class CallbackSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  CallbackSink(kx_log_callback fn, void* user_data) : fn_(fn), user_data_(user_data) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string text(msg.payload.data(), msg.payload.size());
    fn_(user_data_, ToKxLevel(msg.level), text.c_str());
  }
  void flush_() override {}

 private:
  static kx_log_level ToKxLevel(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace: return KX_LOG_TRACE;
      case spdlog::level::debug: return KX_LOG_DEBUG;
      case spdlog::level::info: return KX_LOG_INFO;
      case spdlog::level::warn: return KX_LOG_WARN;
      default: return KX_LOG_ERROR;
    }
  }
  kx_log_callback fn_;
  void* user_data_;
};

}  // namespace

kx_status Fail(kx_status status, const std::string& message) {
  try {
    t_last_error = message;
  } catch (...) {
    // Out of memory for the message itself: keep the status, lose the text.
  }
  return status;
}

kx_status FromAbsl(const absl::Status& status, const std::string& context, kx_status fallback) {
  kx_status code = fallback;
  switch (status.code()) {
    case absl::StatusCode::kOk: return KX_STATUS_OK;
    case absl::StatusCode::kInvalidArgument: code = KX_STATUS_INVALID_ARGUMENT; break;
    case absl::StatusCode::kNotFound: code = KX_STATUS_NOT_FOUND; break;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnavailable: code = KX_STATUS_IO_ERROR; break;
    case absl::StatusCode::kResourceExhausted: code = KX_STATUS_OUT_OF_MEMORY; break;
    case absl::StatusCode::kUnimplemented: code = KX_STATUS_UNSUPPORTED; break;
    case absl::StatusCode::kCancelled: code = KX_STATUS_CANCELLED; break;
    case absl::StatusCode::kFailedPrecondition: code = KX_STATUS_INVALID_STATE; break;
    default: break;
  }
  return Fail(code, context + ": " + std::string(status.message()));
}

kx_status CopyText(const char* fn, const std::string& text, char* dst, uint64_t capacity,
                   uint64_t* length) {
  *length = text.size();
  if (dst == nullptr && capacity == 0) return KX_STATUS_OK;  // a size query
  if (capacity < text.size() + 1) {
    return Fail(KX_STATUS_BUFFER_TOO_SMALL, std::string(fn) + ": the buffer holds " +
                                                std::to_string(capacity) + " bytes, " +
                                                std::to_string(text.size() + 1) + " needed");
  }
  std::memcpy(dst, text.data(), text.size());
  dst[text.size()] = '\0';
  return KX_STATUS_OK;
}

}  // namespace kx::capi

using kx::capi::Fail;
using kx::capi::Guard;

extern "C" {

uint32_t kx_version(void) {
  return (KAIROX_VERSION_MAJOR << 16) | (KAIROX_VERSION_MINOR << 8) | KAIROX_VERSION_PATCH;
}

const char* kx_version_string(void) { return KAIROX_VERSION_STRING; }

const char* kx_status_name(kx_status status) {
  switch (kx::capi::RawEnum(status)) {
    case KX_STATUS_OK: return "KX_STATUS_OK";
    case KX_STATUS_INVALID_ARGUMENT: return "KX_STATUS_INVALID_ARGUMENT";
    case KX_STATUS_NOT_FOUND: return "KX_STATUS_NOT_FOUND";
    case KX_STATUS_IO_ERROR: return "KX_STATUS_IO_ERROR";
    case KX_STATUS_INVALID_MODEL: return "KX_STATUS_INVALID_MODEL";
    case KX_STATUS_UNSUPPORTED: return "KX_STATUS_UNSUPPORTED";
    case KX_STATUS_UNIMPLEMENTED: return "KX_STATUS_UNIMPLEMENTED";
    case KX_STATUS_OUT_OF_MEMORY: return "KX_STATUS_OUT_OF_MEMORY";
    case KX_STATUS_BUFFER_TOO_SMALL: return "KX_STATUS_BUFFER_TOO_SMALL";
    case KX_STATUS_CONTEXT_FULL: return "KX_STATUS_CONTEXT_FULL";
    case KX_STATUS_CANCELLED: return "KX_STATUS_CANCELLED";
    case KX_STATUS_INVALID_STATE: return "KX_STATUS_INVALID_STATE";
    case KX_STATUS_INTERNAL: return "KX_STATUS_INTERNAL";
    case KX_STATUS_BUSY: return "KX_STATUS_BUSY";
  }
  return "KX_STATUS_UNKNOWN";
}

const char* kx_last_error(void) { return kx::capi::t_last_error.c_str(); }

kx_status kx_set_log_callback(kx_log_callback callback, void* user_data) {
  return Guard(__func__, [&] {
    if (callback == nullptr) {
      auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
      sink->set_pattern(kx::capi::kStderrPattern);
      kx::SetLogSink(std::move(sink));
    } else {
      kx::SetLogSink(std::make_shared<kx::capi::CallbackSink>(callback, user_data));
    }
    return KX_STATUS_OK;
  });
}

kx_status kx_set_log_level(kx_log_level level) {
  return Guard(__func__, [&] {
    spdlog::level::level_enum l;
    const auto raw = kx::capi::RawEnum(level);
    switch (raw) {
      case KX_LOG_TRACE: l = spdlog::level::trace; break;
      case KX_LOG_DEBUG: l = spdlog::level::debug; break;
      case KX_LOG_INFO: l = spdlog::level::info; break;
      case KX_LOG_WARN: l = spdlog::level::warn; break;
      case KX_LOG_ERROR: l = spdlog::level::err; break;
      case KX_LOG_OFF: l = spdlog::level::off; break;
      default:
        return Fail(KX_STATUS_INVALID_ARGUMENT,
                    "kx_set_log_level: unknown level " + std::to_string(raw));
    }
    kx::SetLogLevel(l);
    return KX_STATUS_OK;
  });
}

}  // extern "C"
