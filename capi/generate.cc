// C ABI: kx_session_generate — prompt, sampling loop, streamed text with
// whole UTF-8 characters, stop strings and the abort flag.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "base/timer.h"
#include "capi/internal.h"
#include "engine/stop_strings.h"
#include "model/tokenizer.h"

using kx::capi::Fail;
using kx::capi::Guard;
using kx::capi::NullArg;

namespace {

constexpr int32_t kDefaultMaxTokens = 256;
constexpr int32_t kNoToken = -1;

}  // namespace

extern "C" {

kx_status kx_generate_params_init(kx_generate_params* params, uint32_t struct_size) {
  if (params == nullptr) return NullArg(__func__, "params");
  if (auto st = kx::capi::CheckStructSize(__func__, "params", struct_size)) return st;
  kx_generate_params p{};
  p.struct_size = sizeof(p);
  p.max_tokens = kDefaultMaxTokens;
  params->struct_size = struct_size;
  kx::capi::WriteStruct(p, params);
  return KX_STATUS_OK;
}

kx_status kx_generate_result_init(kx_generate_result* result, uint32_t struct_size) {
  return kx::capi::InitOutputStruct(__func__, "result", result, struct_size);
}

kx_status kx_session_generate(kx_session* session, kx_sampler* sampler, const char* prompt,
                              const kx_generate_params* params, kx_generate_result* result) {
  if (session == nullptr) return NullArg(__func__, "session");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  kx_generate_params p{};
  if (auto st = kx::capi::ReadGenerateParams(__func__, params, &p)) return st;
  if (result != nullptr) {
    if (auto st = kx::capi::CheckStructSize(__func__, "result", result->struct_size)) return st;
  }
  return Guard(__func__, [&] {
    kx_generate_result r{};
    r.struct_size = sizeof(r);
    const kx_status st = kx::capi::Generate("kx_session_generate", session, sampler, prompt, p, &r);
    if (st == KX_STATUS_OK && result != nullptr) kx::capi::WriteStruct(r, result);
    return st;
  });
}

}  // extern "C"

namespace kx::capi {

kx_status ReadGenerateParams(const char* fn, const kx_generate_params* params,
                             kx_generate_params* dst) {
  kx_generate_params& p = *dst;
  p = kx_generate_params{};
  p.struct_size = sizeof(p);
  p.max_tokens = kDefaultMaxTokens;
  const std::string name = fn;
  if (params != nullptr) {
    if (auto st = CheckStructSize(fn, "params", params->struct_size)) return st;
    ReadStruct(params, p);
  }
  if (p.max_tokens < -1) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                name + ": max_tokens is " + std::to_string(p.max_tokens) + " (>= -1)");
  }
  if (p.stop_strings == nullptr && p.n_stop_strings > 0) return NullArg(fn, "stop_strings");
  for (uint32_t i = 0; i < p.n_stop_strings; ++i) {
    if (p.stop_strings[i] == nullptr || p.stop_strings[i][0] == '\0') {
      return Fail(KX_STATUS_INVALID_ARGUMENT,
                  name + ": stop string " + std::to_string(i) + " is NULL or empty");
    }
  }
  if (p.flags != 0) return Fail(KX_STATUS_INVALID_ARGUMENT, name + ": unknown flags");
  return KX_STATUS_OK;
}

kx_status Generate(const char* fn, kx_session* s, kx_sampler* sampler, const char* prompt,
                   const kx_generate_params& p, kx_generate_result* out) {
  const std::string name = fn;
  const kx::Tokenizer& tok = s->model->tokenizer();
  kx_generate_result r{};
  r.struct_size = sizeof(r);

  // 1. The prompt, or the state to continue from.
  const bool has_prompt = prompt != nullptr && prompt[0] != '\0';
  if (has_prompt) {
    const std::vector<int32_t> ids = tok.Encode(prompt, /*add_special=*/s->tokens.empty(),
                                                /*parse_special=*/true);
    if (!ids.empty()) {
      const std::string previous_error = kx_last_error();
      const kx_status st = kx::capi::SessionEval(s, ids.data(), ids.size(), false,
                                                 kx::capi::EvalStop::kAbortable, p.abort_flag);
      if (st == KX_STATUS_CANCELLED) {
        // A normal stop, before any token (nothing streamed), not a failure: the last
        // error stays as it was.
        Fail(KX_STATUS_OK, previous_error);
        r.stop_reason = KX_STOP_ABORTED;
        *out = r;
        return KX_STATUS_OK;
      }
      if (st != KX_STATUS_OK) {
        return Fail(st, name + ": prompt: " + kx_last_error());
      }
      r.n_prompt = static_cast<int32_t>(ids.size());
    }
  } else if (s->tokens.empty()) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                name + ": no prompt and an empty session: nothing to continue");
  }
  if (s->n_logits == 0) {  // after a truncate: re-evaluate the last token for its logits
    const int32_t last = s->tokens.back();
    if (const kx_status st = kx::capi::RewindSession(s, s->tokens.size() - 1)) {
      return Fail(st, name + ": " + kx_last_error());
    }
    // Not abortable: a stop here would lose the token; the loop checks right after.
    if (auto st = kx::capi::SessionEval(s, &last, 1, false, kx::capi::EvalStop::kToCompletion)) {
      return Fail(st, name + ": " + kx_last_error());
    }
  }

  // 2. Sample, stream, evaluate.
  kx::Sampler& smp = sampler != nullptr ? sampler->sampler : s->default_sampler->sampler;
  std::vector<std::string> stops;
  for (uint32_t i = 0; i < p.n_stop_strings; ++i) stops.emplace_back(p.stop_strings[i]);
  kx::StopStringMatcher filter(std::move(stops));
  kx::Utf8Stream utf8;
  bool stop_string = false;
  bool callback_stop = false;
  auto emit = [&](int32_t token, const std::string& text) {
    if (p.on_token != nullptr && p.on_token(p.user_data, token, text.c_str(), text.size())) {
      callback_stop = true;
    }
  };
  r.stop_reason = KX_STOP_END_OF_GENERATION;
  for (;;) {
    // Each generated token is polled once, before it (progress 0 of its evaluation).
    if ((p.abort_flag != nullptr && *p.abort_flag != 0) ||
        (s->progress != nullptr && s->progress(s->progress_user_data, 0.0f) != 0)) {
      r.stop_reason = KX_STOP_ABORTED;
      break;
    }
    if (p.max_tokens >= 0 && r.n_tokens >= p.max_tokens) {
      r.stop_reason = KX_STOP_MAX_TOKENS;
      break;
    }
    if (s->engine->n_past() >= s->engine->n_ctx()) {
      r.stop_reason = KX_STOP_CONTEXT_FULL;
      break;
    }
    kx::Stopwatch sample_clock;
    const int32_t next = smp.Sample(s->engine->Logits(-1), s->tokens);
    s->counters.sample_ns += sample_clock.ElapsedNs();
    if (tok.IsEndOfGeneration(next)) {
      r.stop_reason = KX_STOP_END_OF_GENERATION;
      break;
    }
    const std::string text =
        filter.Push(utf8.Push(tok.TokenToPiece(next, /*render_special=*/false)));
    stop_string = filter.stopped();
    emit(next, text);
    // To completion: its text was streamed, so the token must be in the session.
    if (auto st = kx::capi::SessionEval(s, &next, 1, false, kx::capi::EvalStop::kToCompletion)) {
      return Fail(st, name + ": " + kx_last_error());
    }
    ++r.n_tokens;
    if (stop_string) {
      r.stop_reason = KX_STOP_STRING;
      break;
    }
    if (callback_stop) {
      r.stop_reason = KX_STOP_CALLBACK;
      break;
    }
  }
  // 3. Whatever was held back (an incomplete character, a partial stop string).
  if (!stop_string) {
    // Two statements: the operands of + are not sequenced, and Flush must
    // see what Push held back (it returns "" once a stop string matched).
    std::string tail = filter.Push(utf8.Flush());
    tail += filter.Flush();
    if (!tail.empty() && !callback_stop) emit(kNoToken, tail);
  }
  *out = r;
  return KX_STATUS_OK;
}

}  // namespace kx::capi
