// C ABI: kx_session_chat — a conversation rendered with the model's chat template and
// evaluated incrementally (only what the KV cache does not hold yet), then answered; and
// kx_sampler_set_logit_bias, which the OpenAI-style server's `logit_bias` needs.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "capi/internal.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

using kx::capi::Fail;
using kx::capi::Guard;
using kx::capi::NullArg;

extern "C" {

kx_status kx_chat_result_init(kx_chat_result* result, uint32_t struct_size) {
  return kx::capi::InitOutputStruct(__func__, "result", result, struct_size);
}

kx_status kx_session_chat(kx_session* session, kx_sampler* sampler, const kx_chat_message* messages,
                          uint64_t n_messages, uint32_t flags, const kx_generate_params* params,
                          kx_chat_result* result) {
  if (session == nullptr) return NullArg(__func__, "session");
  if (messages == nullptr) return NullArg(__func__, "messages");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (n_messages == 0) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_session_chat: no messages (n_messages is 0)");
  }
  for (uint64_t i = 0; i < n_messages; ++i) {
    if (messages[i].role == nullptr || messages[i].content == nullptr) {
      return Fail(KX_STATUS_INVALID_ARGUMENT,
                  "kx_session_chat: message " + std::to_string(i) + " has a NULL role or content");
    }
  }
  if (flags & ~uint32_t{KX_CHAT_ADD_GENERATION_PROMPT | KX_CHAT_NO_DEFAULT_SYSTEM}) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_session_chat: unknown flags");
  }
  kx_generate_params p{};
  if (auto st = kx::capi::ReadGenerateParams(__func__, params, &p)) return st;
  if (result != nullptr) {
    if (auto st = kx::capi::CheckStructSize(__func__, "result", result->struct_size)) return st;
  }
  return Guard(__func__, [&] {
    kx_session* s = session;
    std::vector<kx::ChatMessage> msgs;
    msgs.reserve(n_messages);
    for (uint64_t i = 0; i < n_messages; ++i) {
      msgs.push_back({messages[i].role, messages[i].content});
    }
    const std::string system =
        (flags & KX_CHAT_NO_DEFAULT_SYSTEM) ? std::string() : s->default_system;
    const std::string text =
        kx::ApplyChatTemplate(s->chat_kind, msgs, /*add_generation_prompt=*/true, system);
    // As kx_tokenize with ADD_SPECIAL | PARSE_SPECIAL (a template's own BOS text is not doubled).
    const std::vector<int32_t> ids =
        s->model->tokenizer().Encode(text, /*add_special=*/true, /*parse_special=*/true);
    const int32_t n_ctx = s->engine->n_ctx();
    if (ids.empty()) {
      return Fail(KX_STATUS_INVALID_ARGUMENT,
                  "kx_session_chat: the conversation renders to no tokens");
    }
    if (ids.size() > static_cast<size_t>(n_ctx)) {
      return Fail(KX_STATUS_CONTEXT_FULL,
                  "kx_session_chat: the conversation is " + std::to_string(ids.size()) +
                      " tokens with the template; the context holds " + std::to_string(n_ctx));
    }
    // The longest common prefix with what the KV cache holds, leaving one token to evaluate:
    // its logits are what the answer's first token is drawn from.
    size_t keep = 0;
    while (keep < s->tokens.size() && keep + 1 < ids.size() && s->tokens[keep] == ids[keep]) {
      ++keep;
    }
    s->engine->TruncateKv(static_cast<int>(keep));
    // Sliding-window rings that no longer reach back to `keep` clear the cache
    // (Engine::TruncateKv): the conversation is then evaluated from where the cache stands.
    keep = std::min(keep, static_cast<size_t>(s->engine->n_past()));
    s->tokens.resize(keep);
    s->n_logits = 0;
    s->n_evaluated = 0;

    kx_chat_result r{};
    r.struct_size = sizeof(r);
    r.n_prompt = static_cast<int32_t>(ids.size());
    r.n_reused = static_cast<int32_t>(keep);
    const std::string previous_error = kx_last_error();
    const kx_status st = kx::capi::SessionEval(s, ids.data() + keep, ids.size() - keep, false,
                                               kx::capi::EvalStop::kAbortable, p.abort_flag);
    if (st == KX_STATUS_CANCELLED) {
      // A normal stop before any token, as in kx_session_generate: not a failure.
      Fail(KX_STATUS_OK, previous_error);
      r.stop_reason = KX_STOP_ABORTED;
      if (result != nullptr) kx::capi::WriteStruct(r, result);
      return KX_STATUS_OK;
    }
    if (st != KX_STATUS_OK) return Fail(st, std::string("kx_session_chat: ") + kx_last_error());

    kx_generate_result g{};
    g.struct_size = sizeof(g);
    if (auto gst = kx::capi::Generate("kx_session_chat", s, sampler, nullptr, p, &g)) return gst;
    r.n_tokens = g.n_tokens;
    r.stop_reason = g.stop_reason;
    if (result != nullptr) kx::capi::WriteStruct(r, result);
    return KX_STATUS_OK;
  });
}

kx_status kx_sampler_set_logit_bias(kx_sampler* sampler, const int32_t* tokens, const float* biases,
                                    uint64_t n) {
  if (sampler == nullptr) return NullArg(__func__, "sampler");
  if (n > 0 && tokens == nullptr) return NullArg(__func__, "tokens");
  if (n > 0 && biases == nullptr) return NullArg(__func__, "biases");
  for (uint64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0) {
      return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_sampler_set_logit_bias: tokens[" +
                                                  std::to_string(i) + "] is " +
                                                  std::to_string(tokens[i]) + " (ids are >= 0)");
    }
    if (std::isnan(biases[i])) {
      return Fail(KX_STATUS_INVALID_ARGUMENT,
                  "kx_sampler_set_logit_bias: biases[" + std::to_string(i) + "] is NaN");
    }
  }
  return Guard(__func__, [&] {
    std::vector<kx::LogitBias> bias;
    bias.reserve(n);
    for (uint64_t i = 0; i < n; ++i) bias.push_back({tokens[i], biases[i]});
    sampler->sampler.SetLogitBias(std::move(bias));
    return KX_STATUS_OK;
  });
}

}  // extern "C"
