// C ABI: the sampler chain (kx::Sampler behind a handle).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/timer.h"
#include "capi/internal.h"

using kx::capi::Fail;
using kx::capi::Guard;
using kx::capi::NullArg;

namespace {

kx_sampler_params DefaultParams() {
  const kx::SamplerParams d;
  kx_sampler_params p{};
  p.struct_size = sizeof(p);
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.repeat_last_n = d.repeat_last_n;
  p.seed = d.seed;
  return p;
}

}  // namespace

extern "C" {

kx_status kx_sampler_params_init(kx_sampler_params* params, uint32_t struct_size) {
  if (params == nullptr) return NullArg(__func__, "params");
  if (auto st = kx::capi::CheckStructSize(__func__, "params", struct_size)) return st;
  params->struct_size = struct_size;
  kx::capi::WriteStruct(DefaultParams(), params);
  return KX_STATUS_OK;
}

kx_status kx_sampler_create(const kx_sampler_params* params, kx_sampler** out) {
  if (out == nullptr) return NullArg(__func__, "out");
  kx_sampler_params p = DefaultParams();
  if (params != nullptr) {
    if (auto st = kx::capi::CheckStructSize(__func__, "params", params->struct_size)) return st;
    kx::capi::ReadStruct(params, p);
  }
  return Guard(__func__, [&] {
    kx::SamplerParams sp;
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.repeat_penalty = p.repeat_penalty;
    sp.repeat_last_n = p.repeat_last_n;
    sp.seed = p.seed;
    if (absl::Status st = kx::ValidateSamplerParams(sp); !st.ok()) {
      return Fail(KX_STATUS_INVALID_ARGUMENT, absl::StrCat("kx_sampler_create: ", st.message()));
    }
    *out = new kx_sampler(sp);
    return KX_STATUS_OK;
  });
}

void kx_sampler_free(kx_sampler* sampler) { delete sampler; }

kx_status kx_sampler_reset(kx_sampler* sampler, uint64_t seed) {
  if (sampler == nullptr) return NullArg(__func__, "sampler");
  sampler->sampler.Reset(seed);
  return KX_STATUS_OK;
}

kx_status kx_sampler_sample_logits(kx_sampler* sampler, const float* logits, int32_t n_vocab,
                                   const int32_t* history, uint64_t n_history, int32_t* token) {
  if (sampler == nullptr) return NullArg(__func__, "sampler");
  if (logits == nullptr) return NullArg(__func__, "logits");
  if (history == nullptr && n_history > 0) return NullArg(__func__, "history");
  if (token == nullptr) return NullArg(__func__, "token");
  if (n_vocab <= 0) {
    return Fail(KX_STATUS_INVALID_ARGUMENT,
                "kx_sampler_sample_logits: n_vocab is " + std::to_string(n_vocab));
  }
  return Guard(__func__, [&] {
    *token = sampler->sampler.Sample({logits, static_cast<size_t>(n_vocab)},
                                     {history, static_cast<size_t>(n_history)});
    return KX_STATUS_OK;
  });
}

kx_status kx_sampler_sample(kx_sampler* sampler, const kx_session* session, int32_t* token) {
  if (sampler == nullptr) return NullArg(__func__, "sampler");
  if (session == nullptr) return NullArg(__func__, "session");
  if (token == nullptr) return NullArg(__func__, "token");
  kx::capi::SessionUse use(session, __func__);
  if (use.status() != KX_STATUS_OK) return use.status();
  if (session->n_logits == 0) {
    return Fail(KX_STATUS_INVALID_STATE,
                "kx_sampler_sample: the session has no logits (evaluate something first)");
  }
  return Guard(__func__, [&] {
    kx::Stopwatch clock;
    *token = sampler->sampler.Sample(session->engine->Logits(-1), session->tokens);
    session->counters.sample_ns += clock.ElapsedNs();
    return KX_STATUS_OK;
  });
}

}  // extern "C"
