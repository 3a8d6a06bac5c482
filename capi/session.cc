// C ABI: sessions (one KV cache each), evaluation, logits, KV truncation and
// statistics.
#include <algorithm>
#include <string>
#include <vector>

#include "base/timer.h"
#include "capi/internal.h"
#include "model/tokenizer.h"

using kx::capi::Fail;
using kx::capi::Guard;
using kx::capi::NullArg;

namespace {

constexpr int32_t kMaxThreads = 4096;
constexpr double kNsPerSecond = 1e9;

double PerSecond(uint64_t count, int64_t ns) {
  return ns > 0 ? static_cast<double>(count) * kNsPerSecond / static_cast<double>(ns) : 0.0;
}

// What the engine's abort check (Engine::SetAbortCheck) polls during one evaluation.
struct AbortSources {
  const kx_session* session;
  const volatile int32_t* flag;  // may be null
};

// The progress callback first (it reports progress even when the flag already says stop).
bool PollAbort(void* ctx, float progress) {
  const auto* a = static_cast<const AbortSources*>(ctx);
  const kx_session* s = a->session;
  const bool callback_stop =
      s->progress != nullptr && s->progress(s->progress_user_data, progress) != 0;
  return callback_stop || (a->flag != nullptr && *a->flag != 0);
}

// Sets the engine's abort check for one evaluation and clears it on every way out.
class AbortScope {
 public:
  AbortScope(kx::Engine& engine, AbortSources* sources) : engine_(engine) {
    if (sources != nullptr) engine_.SetAbortCheck(&PollAbort, sources);
  }
  ~AbortScope() { engine_.SetAbortCheck(nullptr, nullptr); }
  AbortScope(const AbortScope&) = delete;
  AbortScope& operator=(const AbortScope&) = delete;

 private:
  kx::Engine& engine_;
};

}  // namespace

namespace kx::capi {

SessionUse::SessionUse(const kx_session* session, const char* fn) noexcept
    : session_(session), status_(KX_STATUS_OK) {
  uint32_t idle = 0;
  if (session->use_state.compare_exchange_strong(idle, kx_session::kInUse,
                                                 std::memory_order_acquire)) {
    return;
  }
  status_ = KX_STATUS_BUSY;
  try {
    Fail(KX_STATUS_BUSY, std::string(fn) +
                             ": the session is busy: another call on it is running (on another "
                             "thread, or this call comes from one of its own callbacks); a "
                             "session runs one call at a time");
  } catch (...) {
    // No memory for the message: the status says it.
  }
}

SessionUse::~SessionUse() {
  if (status_ != KX_STATUS_OK) return;
  const uint32_t previous = session_->use_state.exchange(0, std::memory_order_acq_rel);
  if (previous & kx_session::kFreePending) delete session_;
}

kx_status SessionEval(kx_session* s, const int32_t* tokens, size_t n, bool all_logits,
                      EvalStop stop, const volatile int32_t* abort_flag) {
  const int32_t n_vocab = s->engine->n_vocab();
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return Fail(KX_STATUS_INVALID_ARGUMENT, "token " + std::to_string(i) + " is " +
                                                  std::to_string(tokens[i]) + ", not in [0, " +
                                                  std::to_string(n_vocab) + ")");
    }
  }
  const int64_t n_past = s->engine->n_past();
  if (n_past + static_cast<int64_t>(n) > s->engine->n_ctx()) {
    return Fail(KX_STATUS_CONTEXT_FULL,
                std::to_string(n) + " tokens do not fit: " + std::to_string(n_past) + " of " +
                    std::to_string(s->engine->n_ctx()) + " context tokens are in use");
  }
  s->tokens.reserve(s->tokens.size() + n);  // the only allocation that could fail after Eval
  AbortSources sources{s, abort_flag};
  const bool abortable =
      stop == EvalStop::kAbortable && (s->progress != nullptr || abort_flag != nullptr);
  kx::Stopwatch clock;
  absl::Status st;
  {
    AbortScope scope(*s->engine, abortable ? &sources : nullptr);
    st = s->engine->Eval({tokens, n}, all_logits);
  }
  const int64_t ns = clock.ElapsedNs();
  if (!st.ok()) {  // the engine rolled back already; this also covers a throw inside it
    s->n_logits = 0;
    s->n_evaluated = 0;
    s->engine->TruncateKv(static_cast<int>(s->tokens.size()));
    // The rollback may have cleared a cache whose rings no longer reach back (Engine::Eval).
    s->tokens.resize(std::min(s->tokens.size(), static_cast<size_t>(s->engine->n_past())));
    // NaN/inf logits: the model's weights are damaged. DataLoss otherwise: a file the
    // session reads (the sidecar) changed or failed under it.
    return FromAbsl(st, "eval",
                    kx::IsNonFiniteLogits(st) ? KX_STATUS_INVALID_MODEL
                    : absl::IsDataLoss(st)    ? KX_STATUS_IO_ERROR
                                              : KX_STATUS_INTERNAL);
  }
  s->tokens.insert(s->tokens.end(), tokens, tokens + n);
  if (n > 0) {
    s->n_logits = all_logits ? static_cast<int32_t>(n) : 1;
    s->n_evaluated = static_cast<int32_t>(n);
  }
  s->counters.evals++;
  if (n > 1) {
    s->counters.prompt_tokens += n;
    s->counters.prompt_ns += ns;
  } else {
    s->counters.gen_tokens += n;
    s->counters.gen_ns += ns;
  }
  return KX_STATUS_OK;
}

kx_status RewindSession(kx_session* s, size_t n) {
  s->engine->TruncateKv(static_cast<int>(n));
  const size_t held = static_cast<size_t>(s->engine->n_past());
  if (held >= n) {
    s->tokens.resize(n);
    return KX_STATUS_OK;
  }
  // The rings no longer held what position n attends to: the cache was cleared.
  const std::vector<int32_t> again(s->tokens.begin() + static_cast<std::ptrdiff_t>(held),
                                   s->tokens.begin() + static_cast<std::ptrdiff_t>(n));
  s->tokens.resize(held);
  return SessionEval(s, again.data(), again.size(), false, EvalStop::kToCompletion);
}

}  // namespace kx::capi

extern "C" {

kx_status kx_session_params_init(kx_session_params* params, uint32_t struct_size) {
  if (params == nullptr) return NullArg(__func__, "params");
  if (auto st = kx::capi::CheckStructSize(__func__, "params", struct_size)) return st;
  kx_session_params p{};
  p.struct_size = sizeof(p);
  p.seed = kx::SamplerParams{}.seed;
  params->struct_size = struct_size;
  kx::capi::WriteStruct(p, params);
  return KX_STATUS_OK;
}

kx_status kx_session_create(const kx_model* model, const kx_session_params* params,
                            kx_session** out) {
  if (model == nullptr) return NullArg(__func__, "model");
  if (out == nullptr) return NullArg(__func__, "out");
  kx_session_params p{};
  p.struct_size = sizeof(p);
  p.seed = kx::SamplerParams{}.seed;
  if (params != nullptr) {
    if (auto st = kx::capi::CheckStructSize(__func__, "params", params->struct_size)) return st;
    kx::capi::ReadStruct(params, p);
  }
  if (p.sparse != KX_SPARSE_AUTO && p.sparse != KX_SPARSE_OFF) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_create: sparse must be KX_SPARSE_AUTO or KX_SPARSE_OFF, got " +
                    std::to_string(p.sparse));
  }
  if (p.prefetch != KX_PREFETCH_ON && p.prefetch != KX_PREFETCH_OFF) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_create: prefetch must be KX_PREFETCH_ON or KX_PREFETCH_OFF, got " +
                    std::to_string(p.prefetch));
  }
  if (p.n_gpu_layers < KX_GPU_LAYERS_NONE) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_create: n_gpu_layers must be KX_GPU_LAYERS_AUTO (0), a layer count or "
                "KX_GPU_LAYERS_NONE (-1), got " +
                    std::to_string(p.n_gpu_layers));
  }
  if (!(p.sparsity >= 0.0f && p.sparsity < 1.0f)) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_create: sparsity must be in [0, 1) (0: the sidecar's own)");
  }
  if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0 || p.n_threads > kMaxThreads) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_create: n_ctx " + std::to_string(p.n_ctx) + ", n_batch " +
                    std::to_string(p.n_batch) + ", n_threads " + std::to_string(p.n_threads) +
                    ": each must be >= 0 (threads <= " + std::to_string(kMaxThreads) + ")");
  }
  return Guard(__func__, [&] {
    kx::EngineOptions eo;
    eo.n_ctx = p.n_ctx;
    eo.n_batch = p.n_batch;
    eo.n_threads = p.n_threads > 0 ? p.n_threads : model->options.n_threads;
    eo.sidecar =
        p.sidecar != nullptr && p.sidecar[0] != '\0' ? p.sidecar : model->options.sidecar_path;
    eo.sparse = p.sparse == KX_SPARSE_AUTO;
    eo.sparsity = p.sparsity > 0.0f ? p.sparsity : -1.0f;
    if (p.ram_budget != nullptr && p.ram_budget[0] != '\0') {
      eo.ram_budget = p.ram_budget;
    } else if (model->options.budget_ram > 0) {
      eo.ram_budget = std::to_string(model->options.budget_ram);
    }
    if (p.policy != nullptr && p.policy[0] != '\0') eo.policy = p.policy;
    eo.prefetch = p.prefetch == KX_PREFETCH_ON;
    eo.device = p.device != nullptr && p.device[0] != '\0' ? p.device : model->options.device;
    if (p.vram_budget != nullptr && p.vram_budget[0] != '\0') {
      eo.vram_budget = p.vram_budget;
    } else if (model->options.budget_gpu > 0) {
      eo.vram_budget = std::to_string(model->options.budget_gpu);
    }
    if (p.vram_ffn != nullptr) eo.vram_ffn = p.vram_ffn;
    if (p.device_policy != nullptr && p.device_policy[0] != '\0') {
      eo.device_policy = p.device_policy;
    }
    eo.n_gpu_layers = p.n_gpu_layers == KX_GPU_LAYERS_AUTO   ? -1
                      : p.n_gpu_layers == KX_GPU_LAYERS_NONE ? 0
                                                             : p.n_gpu_layers;
    auto engine = kx::Engine::Create(model->model, eo);
    if (!engine.ok()) return kx::capi::FromAbsl(engine.status(), "kx_session_create");
    auto s = std::make_unique<kx_session>();
    s->model = model->model;
    s->engine = *std::move(engine);
    s->seed = p.seed;
    s->chat_kind = model->chat_kind;
    s->default_system = model->default_system;
    kx::SamplerParams sp;
    sp.seed = p.seed;
    s->default_sampler = std::make_unique<kx_sampler>(sp);
    *out = s.release();
    return KX_STATUS_OK;
  });
}

void kx_session_free(kx_session* session) {
  if (session == nullptr) return;
  // Idle: claim it and free it now. In use (a call on another thread, or this is called
  // from one of the session's own callbacks): mark it, and the running call frees it when
  // it returns (kx::capi::SessionUse).
  uint32_t state = session->use_state.load(std::memory_order_acquire);
  for (;;) {
    if (state & kx_session::kFreePending) return;  // freed twice during one call
    const uint32_t next = state == 0 ? kx_session::kInUse : state | kx_session::kFreePending;
    if (session->use_state.compare_exchange_weak(state, next, std::memory_order_acq_rel)) break;
  }
  if (state == 0) delete session;
}

kx_status kx_session_set_progress_callback(kx_session* session, kx_progress_callback callback,
                                           void* user_data) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  session->progress = callback;
  session->progress_user_data = callback != nullptr ? user_data : nullptr;
  return KX_STATUS_OK;
}

kx_status kx_session_eval(kx_session* session, const int32_t* tokens, uint64_t n_tokens,
                          uint32_t flags) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (tokens == nullptr && n_tokens > 0) return NullArg(__func__, "tokens");
  if (n_tokens == 0) return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_session_eval: no tokens");
  if (flags & ~uint32_t{KX_EVAL_ALL_LOGITS}) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_session_eval: unknown flags");
  }
  return Guard(__func__, [&] {
    const kx_status st =
        kx::capi::SessionEval(session, tokens, n_tokens, (flags & KX_EVAL_ALL_LOGITS) != 0);
    if (st != KX_STATUS_OK) {
      return Fail(st, std::string("kx_session_eval: ") + kx_last_error());
    }
    return KX_STATUS_OK;
  });
}

kx_status kx_session_get_logits(const kx_session* session, int32_t index, const float** logits,
                                int32_t* n_vocab) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (logits == nullptr) return NullArg(__func__, "logits");
  if (n_vocab == nullptr) return NullArg(__func__, "n_vocab");
  if (session->n_logits == 0) {
    return Fail(KX_STATUS_INVALID_STATE,
                "kx_session_get_logits: no logits (nothing evaluated since the last "
                "truncate/reset)");
  }
  const int32_t n = session->n_evaluated;
  const bool all_kept = session->n_logits == n;  // KX_EVAL_ALL_LOGITS (or a single token)
  if (!all_kept && index != -1 && index != n - 1) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_get_logits: index " + std::to_string(index) +
                    ": the last evaluation (" + std::to_string(n) +
                    " tokens) kept only its last token's logits (index -1 or " +
                    std::to_string(n - 1) + "); evaluate with KX_EVAL_ALL_LOGITS for the others");
  }
  const int32_t i = index < 0 ? n + index : index;
  if (i < 0 || i >= n) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_session_get_logits: index " + std::to_string(index) +
                    " is out of range: the last evaluation had " + std::to_string(n) + " token(s)");
  }
  return Guard(__func__, [&] {
    // With only the last row kept the engine indexes it as -1.
    const std::span<const float> row = session->engine->Logits(all_kept ? i : -1);
    *logits = row.data();
    *n_vocab = static_cast<int32_t>(row.size());
    return KX_STATUS_OK;
  });
}

kx_status kx_session_get_n_past(const kx_session* session, int32_t* n_past) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (n_past == nullptr) return NullArg(__func__, "n_past");
  *n_past = session->engine->n_past();
  return KX_STATUS_OK;
}

kx_status kx_session_get_n_ctx(const kx_session* session, int32_t* n_ctx) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (n_ctx == nullptr) return NullArg(__func__, "n_ctx");
  *n_ctx = session->engine->n_ctx();
  return KX_STATUS_OK;
}

kx_status kx_session_get_tokens(const kx_session* session, int32_t* tokens, uint64_t capacity,
                                uint64_t* n_tokens) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (tokens == nullptr && capacity > 0) return NullArg(__func__, "tokens");
  if (n_tokens == nullptr) return NullArg(__func__, "n_tokens");
  const std::vector<int32_t>& ids = session->tokens;
  *n_tokens = ids.size();
  if (tokens == nullptr && capacity == 0) return KX_STATUS_OK;
  if (capacity < ids.size()) {
    return Fail(KX_STATUS_BUFFER_TOO_SMALL, "kx_session_get_tokens: the buffer holds " +
                                                std::to_string(capacity) + " tokens, " +
                                                std::to_string(ids.size()) + " needed");
  }
  std::copy(ids.begin(), ids.end(), tokens);
  return KX_STATUS_OK;
}

kx_status kx_session_truncate(kx_session* session, int32_t n_keep) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  const int32_t n_past = session->engine->n_past();
  if (n_keep < 0 || n_keep > n_past) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_session_truncate: n_keep " +
                                                std::to_string(n_keep) + " is not in [0, " +
                                                std::to_string(n_past) + "]");
  }
  return Guard(__func__, [&] {
    if (const kx_status st = kx::capi::RewindSession(session, static_cast<size_t>(n_keep))) {
      return Fail(st, std::string("kx_session_truncate: ") + kx_last_error());
    }
    session->n_logits = 0;
    session->n_evaluated = 0;
    return KX_STATUS_OK;
  });
}

kx_status kx_session_reset(kx_session* session) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  return Guard(__func__, [&] {
    session->engine->TruncateKv(0);
    session->tokens.clear();
    session->n_logits = 0;
    session->n_evaluated = 0;
    session->default_sampler->sampler.Reset(session->seed);
    return KX_STATUS_OK;
  });
}

kx_status kx_stats_init(kx_stats* stats, uint32_t struct_size) {
  return kx::capi::InitOutputStruct(__func__, "stats", stats, struct_size);
}

kx_status kx_session_get_stats(const kx_session* session, kx_stats* stats) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (stats == nullptr) return NullArg(__func__, "stats");
  if (auto st = kx::capi::CheckStructSize(__func__, "stats", stats->struct_size)) return st;
  const SessionCounters& c = session->counters;
  kx_stats r{};
  r.struct_size = sizeof(r);
  r.n_threads = session->engine->n_threads();
  r.n_prompt_tokens = c.prompt_tokens;
  r.n_gen_tokens = c.gen_tokens;
  r.n_evals = c.evals;
  r.prompt_seconds = static_cast<double>(c.prompt_ns) / kNsPerSecond;
  r.gen_seconds = static_cast<double>(c.gen_ns) / kNsPerSecond;
  r.sample_seconds = static_cast<double>(c.sample_ns) / kNsPerSecond;
  r.prompt_tokens_per_second = PerSecond(c.prompt_tokens, c.prompt_ns);
  r.gen_tokens_per_second = PerSecond(c.gen_tokens, c.gen_ns);
  kx::capi::WriteStruct(r, stats);
  return KX_STATUS_OK;
}

kx_status kx_session_reset_stats(kx_session* session) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  session->counters = SessionCounters{};
  return KX_STATUS_OK;
}

}  // extern "C"
