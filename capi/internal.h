// Shared by the C ABI's implementation files: the handle structs behind the
// opaque types, the thread-local error, and the try/catch wall every entry
// point goes through.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "kairox/kairox.h"
#include "model/chat_template.h"
#include "model/model.h"

struct kx_model_options {
  std::string sidecar_path;
  int32_t n_threads = 0;
  std::string device = "auto";
  uint64_t budget_gpu = 0;
  uint64_t budget_ram = 0;
  bool use_mmap = true;  // false: read the file into memory
  kx_progress_callback progress = nullptr;
  void* progress_user_data = nullptr;
};

struct kx_model {
  std::shared_ptr<const kx::Model> model;
  kx_model_options options;        // as loaded (threads are the sessions' default)
  std::string chat_template;       // Jinja source, "" when absent
  std::string chat_template_kind;  // ChatTemplateName(chat_kind): "chatml", "gemma", "generic"
  kx::ChatTemplateKind chat_kind = kx::ChatTemplateKind::kGeneric;
  std::string default_system;  // the template's built-in system prompt
};

struct kx_sampler {
  explicit kx_sampler(const kx::SamplerParams& p) : sampler(p) {}
  kx::Sampler sampler;
};

// Statistics kept by a session (kx_stats is built from them on request).
struct SessionCounters {
  uint64_t prompt_tokens = 0, gen_tokens = 0, evals = 0;
  int64_t prompt_ns = 0, gen_ns = 0, sample_ns = 0;
};

struct kx_session {
  std::shared_ptr<const kx::Model> model;
  std::unique_ptr<kx::Engine> engine;
  std::vector<int32_t> tokens;  // what the KV cache holds, in order
  int32_t n_logits = 0;         // logits rows of the last eval (0: none valid)
  int32_t n_evaluated = 0;      // tokens of the last eval (n_logits of them kept: 1 or all)
  kx_progress_callback progress = nullptr;  // kx_session_set_progress_callback
  void* progress_user_data = nullptr;
  uint64_t seed = 0;
  std::unique_ptr<kx_sampler> default_sampler;
  mutable SessionCounters counters;  // sampling from a const session counts too
  // The model's chat format (kx_session_chat renders with it), copied from the kx_model.
  kx::ChatTemplateKind chat_kind = kx::ChatTemplateKind::kGeneric;
  std::string default_system;
  // kx::capi::SessionUse: kInUse while an entry point runs on the session; kFreePending
  // once kx_session_free was called meanwhile (the running call frees it on its way out).
  mutable std::atomic<uint32_t> use_state{0};
  static constexpr uint32_t kInUse = 1, kFreePending = 2;
};

namespace kx::capi {

// Records `message` as this thread's last error and returns `status`.
kx_status Fail(kx_status status, const std::string& message);
// Maps an absl::Status to a kx_status (`fallback` for codes with no closer match).
kx_status FromAbsl(const absl::Status& status, const std::string& context,
                   kx_status fallback = KX_STATUS_INTERNAL);

// Runs `body` (returning kx_status) behind the exception wall: std::bad_alloc and
// std::length_error become OUT_OF_MEMORY, anything else INTERNAL; the message
// names the entry point `fn`.
template <class Body>
kx_status Guard(const char* fn, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(KX_STATUS_OUT_OF_MEMORY, std::string(fn) + ": out of memory");
  } catch (const std::length_error& e) {
    return Fail(KX_STATUS_OUT_OF_MEMORY, std::string(fn) + ": size too large (" + e.what() + ")");
  } catch (const std::exception& e) {
    try {
      return Fail(KX_STATUS_INTERNAL, std::string(fn) + ": internal error: " + e.what());
    } catch (...) {
      return KX_STATUS_INTERNAL;
    }
  } catch (...) {
    return Fail(KX_STATUS_INTERNAL, std::string(fn) + ": internal error (unknown exception)");
  }
}

// Argument-check helper: returns INVALID_ARGUMENT naming the function and argument.
inline kx_status NullArg(const char* fn, const char* arg) {
  return Fail(KX_STATUS_INVALID_ARGUMENT, std::string(fn) + ": " + arg + " is NULL");
}

// The integer a caller passed as an enum. C callers may pass any int; reading
// an out-of-range value through the C++ enum type would be undefined, so the
// bytes are copied instead.
template <class E>
std::underlying_type_t<E> RawEnum(const E& e) {
  std::underlying_type_t<E> raw;
  std::memcpy(&raw, &e, sizeof raw);
  return raw;
}

// Sizes outside this range in struct_size are taken as an uninitialised struct.
inline constexpr uint32_t kMinStructSize = 8;
inline constexpr uint32_t kMaxStructSize = 4096;

inline kx_status CheckStructSize(const char* fn, const char* arg, uint32_t size) {
  if (size < kMinStructSize || size > kMaxStructSize) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, std::string(fn) + ": " + arg + "->struct_size is " +
                                                std::to_string(size) +
                                                " (set it to sizeof the struct)");
  }
  return KX_STATUS_OK;
}

// Reads a caller's struct of `src->struct_size` bytes over the defaults in `dst`.
template <class T>
void ReadStruct(const T* src, T& dst) {
  const size_t n = src->struct_size < sizeof(T) ? src->struct_size : sizeof(T);
  std::memcpy(static_cast<void*>(&dst), src, n);
  dst.struct_size = sizeof(T);
}

// Writes `src` into the caller's struct, at most dst->struct_size bytes.
template <class T>
void WriteStruct(const T& src, T* dst) {
  const uint32_t size = dst->struct_size;
  const size_t n = size < sizeof(T) ? size : sizeof(T);
  std::memcpy(static_cast<void*>(dst), &src, n);
  dst->struct_size = size;
}

// Buffer negotiation for byte outputs (NUL-terminated).
kx_status CopyText(const char* fn, const std::string& text, char* dst, uint64_t capacity,
                   uint64_t* length);

// The _init of an output struct: zeroes the caller's first struct_size bytes of `dst`
// (named `arg` in messages) and sets its struct_size.
template <class T>
kx_status InitOutputStruct(const char* fn, const char* arg, T* dst, uint32_t struct_size) {
  if (dst == nullptr) return NullArg(fn, arg);
  if (auto st = CheckStructSize(fn, arg, struct_size)) return st;
  T zero{};
  zero.struct_size = sizeof(T);
  dst->struct_size = struct_size;
  WriteStruct(zero, dst);
  return KX_STATUS_OK;
}

// Held by every entry point that takes a session, for the whole call: a second call on the
// same session while one runs (from another thread, or from inside one of the session's own
// callbacks) gets KX_STATUS_BUSY instead of sharing its state. Check status() first.
class SessionUse {
 public:
  SessionUse(const kx_session* session, const char* fn) noexcept;
  // Releases the session, and frees it when kx_session_free was called during the call.
  ~SessionUse();
  SessionUse(const SessionUse&) = delete;
  SessionUse& operator=(const SessionUse&) = delete;
  kx_status status() const { return status_; }

 private:
  const kx_session* session_;
  kx_status status_;
};

// Whether an evaluation may be stopped: kAbortable polls the session's progress callback
// (and an abort flag, when given) before each batch and between layers, and a stopped
// evaluation is CANCELLED with the session as before it; kToCompletion is for a token whose
// text was already streamed to the caller (it must end up in the session).
enum class EvalStop { kAbortable, kToCompletion };

// Evaluates tokens on the session, keeping history, logits state and counters in step.
kx_status SessionEval(kx_session* s, const int32_t* tokens, size_t n, bool all_logits,
                      EvalStop stop = EvalStop::kAbortable,
                      const volatile int32_t* abort_flag = nullptr);

// Keeps the session's first n tokens (n ≤ its history). Where the engine's sliding-window
// rings no longer hold what position n attends to, it clears the KV cache
// (Engine::TruncateKv) and the kept tokens are evaluated again, to completion.
kx_status RewindSession(kx_session* s, size_t n);

// kx_generate_params as the caller passed them (NULL: the defaults), checked: max_tokens,
// stop strings, flags. Messages start with `fn`.
kx_status ReadGenerateParams(const char* fn, const kx_generate_params* params,
                             kx_generate_params* dst);

// kx_session_generate's work, with the session already taken (SessionUse) and `p` checked:
// evaluates `prompt` (NULL or "": continue), samples and streams until a stop, and fills *out.
// Messages start with `fn`. Call it inside Guard.
kx_status Generate(const char* fn, kx_session* s, kx_sampler* sampler, const char* prompt,
                   const kx_generate_params& p, kx_generate_result* out);

}  // namespace kx::capi
