// kairox — a header-only C++17 wrapper over the C ABI (kairox.h): RAII handles, std::string
// and std::vector in and out, and a kairox::Error exception for every non-OK status.
//
//   kairox::Model model("model.gguf");
//   kairox::SessionParams sp;  sp.n_ctx = 2048;
//   kairox::Session session(model, sp);
//   std::string prompt = model.ApplyChatTemplate({{"user", "Name three primes."}});
//   kairox::GenerateParams gp;  gp.max_tokens = 64;
//   session.Generate(prompt, gp, [](std::string_view piece) {
//     std::cout << piece << std::flush;
//     return true;  // go on
//   });
//
// Threading and lifetimes are those of the C ABI: a Model may be shared between threads and
// may be destroyed before its Sessions; a Session or Sampler is used by one thread at a time
// (a call on a Session while another runs on it, or from its own callbacks, throws Error with
// KX_STATUS_BUSY).
#ifndef KAIROX_KAIROX_HPP_
#define KAIROX_KAIROX_HPP_

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kairox/kairox.h"

namespace kairox {

// A failed kairox call: the status and kx_last_error()'s message.
class Error : public std::runtime_error {
 public:
  Error(kx_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  kx_status status() const noexcept { return status_; }

 private:
  kx_status status_;
};

namespace detail {
// `flag` when `on`, else 0 (the C flags are anonymous enum constants).
inline constexpr uint32_t Flag(bool on, uint32_t flag) { return on ? flag : 0u; }
inline void Check(kx_status status) {
  if (status != KX_STATUS_OK) throw Error(status, kx_last_error());
}
// Owns a C handle; move-only.
template <class T, void (*Free)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* p) : p_(p) {}
  Handle(Handle&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Free(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Free(p_); }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};
}  // namespace detail

inline std::string Version() { return kx_version_string(); }

struct ModelOptions {
  int32_t n_threads = 0;  // default threads of sessions (0: all cores)
  std::string device = "cpu";
  std::string sidecar_path;
  uint64_t ram_budget = 0;  // 0: no limit; else the default of sessions on this model
  uint64_t gpu_budget = 0;
  bool use_mmap = true;  // false: read the file into memory at load (kx_model_options_set_mmap)
  // Progress in [0, 1]; return false to cancel the load (Error with KX_STATUS_CANCELLED).
  std::function<bool(float)> progress;
};

struct ChatMessage {
  std::string role;
  std::string content;
};

class Model {
 public:
  explicit Model(const std::string& path, const ModelOptions& options = {}) {
    kx_model_options* raw = nullptr;
    detail::Check(kx_model_options_create(&raw));
    detail::Handle<kx_model_options, kx_model_options_free> opts(raw);
    detail::Check(kx_model_options_set_threads(raw, options.n_threads));
    detail::Check(kx_model_options_set_device(raw, options.device.c_str()));
    if (!options.sidecar_path.empty()) {
      detail::Check(kx_model_options_set_sidecar_path(raw, options.sidecar_path.c_str()));
    }
    detail::Check(kx_model_options_set_budget(raw, KX_TIER_RAM, options.ram_budget));
    detail::Check(kx_model_options_set_budget(raw, KX_TIER_GPU, options.gpu_budget));
    detail::Check(kx_model_options_set_mmap(raw, options.use_mmap ? 1 : 0));
    ProgressThunk thunk{&options.progress};
    if (options.progress) {
      detail::Check(kx_model_options_set_progress_callback(raw, &ProgressThunk::Call, &thunk));
    }
    kx_model* m = nullptr;
    detail::Check(kx_model_load(path.c_str(), raw, &m));
    model_ = Ptr(m);
  }

  const kx_model* get() const { return model_.get(); }

  kx_model_info Info() const {
    kx_model_info info;
    detail::Check(kx_model_info_init(&info, sizeof(info)));
    detail::Check(kx_model_get_info(model_.get(), &info));
    return info;
  }

  std::vector<int32_t> Tokenize(std::string_view text, bool add_special = true,
                                bool parse_special = true) const {
    const uint32_t flags = detail::Flag(add_special, KX_TOKENIZE_ADD_SPECIAL) |
                           detail::Flag(parse_special, KX_TOKENIZE_PARSE_SPECIAL);
    uint64_t n = 0;
    detail::Check(kx_tokenize(model_.get(), text.data(), text.size(), flags, nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    detail::Check(kx_tokenize(model_.get(), text.data(), text.size(), flags, ids.data(),
                              ids.size(), &n));
    return ids;
  }

  // Raw bytes (may end inside a UTF-8 character when the tokens do).
  std::string Detokenize(const std::vector<int32_t>& tokens, bool render_special = false) const {
    const uint32_t flags = detail::Flag(render_special, KX_DETOKENIZE_RENDER_SPECIAL);
    uint64_t len = 0;
    detail::Check(
        kx_detokenize(model_.get(), tokens.data(), tokens.size(), flags, nullptr, 0, &len));
    std::string text(len + 1, '\0');
    detail::Check(kx_detokenize(model_.get(), tokens.data(), tokens.size(), flags, text.data(),
                                text.size(), &len));
    text.resize(len);
    return text;
  }

  std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt = true,
                                bool default_system = true) const {
    std::vector<kx_chat_message> msgs;
    msgs.reserve(messages.size());
    for (const ChatMessage& m : messages) msgs.push_back({m.role.c_str(), m.content.c_str()});
    const uint32_t flags = detail::Flag(add_generation_prompt, KX_CHAT_ADD_GENERATION_PROMPT) |
                           detail::Flag(!default_system, KX_CHAT_NO_DEFAULT_SYSTEM);
    uint64_t len = 0;
    detail::Check(kx_model_apply_chat_template(model_.get(), msgs.data(), msgs.size(), flags,
                                               nullptr, 0, &len));
    std::string text(len + 1, '\0');
    detail::Check(kx_model_apply_chat_template(model_.get(), msgs.data(), msgs.size(), flags,
                                               text.data(), text.size(), &len));
    text.resize(len);
    return text;
  }

  bool IsEndOfGeneration(int32_t token) const {
    int32_t end = 0;
    detail::Check(kx_model_is_end_of_generation(model_.get(), token, &end));
    return end != 0;
  }

 private:
  struct ProgressThunk {
    const std::function<bool(float)>* fn;
    static int32_t Call(void* user_data, float progress) {
      try {
        return (*static_cast<ProgressThunk*>(user_data)->fn)(progress) ? 0 : 1;
      } catch (...) {
        return 1;  // never let an exception cross the C library; cancel instead
      }
    }
  };
  using Ptr = detail::Handle<kx_model, kx_model_free>;
  Ptr model_;
};

namespace detail {
// The library's sampler defaults (kx_sampler_params_init), so this wrapper has no copy of them.
inline kx_sampler_params DefaultSamplerParams() {
  kx_sampler_params p{};
  kx_sampler_params_init(&p, sizeof(p));
  return p;
}
}  // namespace detail

// Defaults: the library's, as kx_sampler_params documents them (kairox-cli and kairox-chat use
// the same ones).
struct SamplerParams {
  float temperature = detail::DefaultSamplerParams().temperature;  // <= 0: greedy
  int32_t top_k = detail::DefaultSamplerParams().top_k;            // <= 0: off
  float top_p = detail::DefaultSamplerParams().top_p;              // >= 1: off
  float min_p = detail::DefaultSamplerParams().min_p;              // <= 0: off
  float repeat_penalty = detail::DefaultSamplerParams().repeat_penalty;  // 1: off
  int32_t repeat_last_n = detail::DefaultSamplerParams().repeat_last_n;  // < 0: whole history
  uint64_t seed = detail::DefaultSamplerParams().seed;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p = {}) {
    kx_sampler_params sp;
    detail::Check(kx_sampler_params_init(&sp, sizeof(sp)));
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.repeat_penalty = p.repeat_penalty;
    sp.repeat_last_n = p.repeat_last_n;
    sp.seed = p.seed;
    kx_sampler* s = nullptr;
    detail::Check(kx_sampler_create(&sp, &s));
    sampler_ = Ptr(s);
  }
  static Sampler Greedy() { return Sampler(SamplerParams{0.0f}); }
  void Reset(uint64_t seed) { detail::Check(kx_sampler_reset(sampler_.get(), seed)); }
  // (token id, bias) pairs added to the logits first; -inf bans, +inf forces; {} clears
  // (kx_sampler_set_logit_bias).
  void SetLogitBias(const std::vector<std::pair<int32_t, float>>& bias) {
    std::vector<int32_t> ids;
    std::vector<float> values;
    for (const auto& [id, value] : bias) {
      ids.push_back(id);
      values.push_back(value);
    }
    detail::Check(kx_sampler_set_logit_bias(sampler_.get(), ids.data(), values.data(), ids.size()));
  }
  kx_sampler* get() const { return sampler_.get(); }

 private:
  using Ptr = detail::Handle<kx_sampler, kx_sampler_free>;
  Ptr sampler_;
};

struct SessionParams {
  int32_t n_ctx = 0;      // 0: min(trained, 4096)
  int32_t n_batch = 0;    // 0: 64
  int32_t n_threads = 0;  // 0: the model's default
  uint64_t seed = detail::DefaultSamplerParams().seed;  // the default sampler's
  std::string sidecar;   // "": <model>.kairox.gguf beside the model, when it exists
  bool sparse = true;    // false: dense even with a sidecar
  float sparsity = 0;    // 0: the sidecar's own
  std::string ram_budget;  // "": the model's; "512M", "2G" or "50%" (docs/tiers.md)
  std::string policy;      // "": tam-adaptive
  bool prefetch = true;
  std::string device;       // "": the model's (auto); cpu, cuda, sim, auto (docs/device.md)
  std::string vram_budget;  // "": the model's (all of the device); "4G" or "50%"
  int32_t n_gpu_layers = -1;  // -1: every layer that fits; 0: none; N: at most N (-ngl)
  std::string vram_ffn;       // "": what the device has left; "2G", "30%" of the bundles, "0"
  std::string device_policy;  // "": tam-adaptive
};

struct GenerateParams {
  int32_t max_tokens = 256;  // -1: until end of generation or a full context
  std::vector<std::string> stop;
  const volatile int32_t* abort_flag = nullptr;
};

struct GenerateResult {
  std::string text;
  int32_t n_tokens = 0;
  int32_t n_prompt = 0;
  kx_stop_reason stop_reason = KX_STOP_END_OF_GENERATION;
};

struct ChatResult {
  std::string text;      // the assistant's message
  int32_t n_tokens = 0;  // generated
  int32_t n_prompt = 0;  // tokens of the rendered conversation
  int32_t n_reused = 0;  // of those, held by the session already (not evaluated again)
  kx_stop_reason stop_reason = KX_STOP_END_OF_GENERATION;
};

class Session {
 public:
  explicit Session(const Model& model, const SessionParams& p = {}) {
    kx_session_params sp;
    detail::Check(kx_session_params_init(&sp, sizeof(sp)));
    sp.n_ctx = p.n_ctx;
    sp.n_batch = p.n_batch;
    sp.n_threads = p.n_threads;
    sp.seed = p.seed;
    sp.sidecar = p.sidecar.c_str();
    sp.sparse = p.sparse ? KX_SPARSE_AUTO : KX_SPARSE_OFF;
    sp.sparsity = p.sparsity;
    sp.ram_budget = p.ram_budget.c_str();
    sp.policy = p.policy.c_str();
    sp.prefetch = p.prefetch ? KX_PREFETCH_ON : KX_PREFETCH_OFF;
    sp.device = p.device.c_str();
    sp.vram_budget = p.vram_budget.c_str();
    sp.vram_ffn = p.vram_ffn.c_str();
    sp.device_policy = p.device_policy.c_str();
    sp.n_gpu_layers = p.n_gpu_layers < 0    ? KX_GPU_LAYERS_AUTO
                      : p.n_gpu_layers == 0 ? KX_GPU_LAYERS_NONE
                                            : p.n_gpu_layers;
    kx_session* s = nullptr;
    detail::Check(kx_session_create(model.get(), &sp, &s));
    session_ = Ptr(s);
  }

  // Called while the session evaluates tokens (Eval, Generate's prompt and tokens) with the
  // share done in [0, 1], before each batch and between layers; return false to stop: Eval
  // throws Error(KX_STATUS_CANCELLED) with the session as before it, Generate ends with
  // KX_STOP_ABORTED (kx_session_set_progress_callback). An exception from it stops, too.
  // Empty removes it. Called on the evaluating thread, never concurrently.
  void SetProgressCallback(std::function<bool(float)> fn) {
    if (!fn) {
      detail::Check(kx_session_set_progress_callback(session_.get(), nullptr, nullptr));
      progress_.reset();
      return;
    }
    auto holder = std::make_unique<std::function<bool(float)>>(std::move(fn));
    detail::Check(kx_session_set_progress_callback(session_.get(), &ProgressThunk, holder.get()));
    progress_ = std::move(holder);  // the old one is no longer referenced by the session
  }

  void Eval(const std::vector<int32_t>& tokens, bool all_logits = false) {
    detail::Check(kx_session_eval(session_.get(), tokens.data(), tokens.size(),
                                  detail::Flag(all_logits, KX_EVAL_ALL_LOGITS)));
  }
  // A copy of the logits of token `index` of the last evaluation (-1: the last).
  std::vector<float> Logits(int32_t index = -1) const {
    const float* p = nullptr;
    int32_t n = 0;
    detail::Check(kx_session_get_logits(session_.get(), index, &p, &n));
    return std::vector<float>(p, p + n);
  }
  int32_t Sample(Sampler& sampler) const {
    int32_t token = -1;
    detail::Check(kx_sampler_sample(sampler.get(), session_.get(), &token));
    return token;
  }
  int32_t NPast() const {
    int32_t n = 0;
    detail::Check(kx_session_get_n_past(session_.get(), &n));
    return n;
  }
  int32_t NCtx() const {
    int32_t n = 0;
    detail::Check(kx_session_get_n_ctx(session_.get(), &n));
    return n;
  }
  std::vector<int32_t> Tokens() const {
    uint64_t n = 0;
    detail::Check(kx_session_get_tokens(session_.get(), nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    detail::Check(kx_session_get_tokens(session_.get(), ids.data(), ids.size(), &n));
    return ids;
  }
  void Truncate(int32_t n_keep) { detail::Check(kx_session_truncate(session_.get(), n_keep)); }
  void Reset() { detail::Check(kx_session_reset(session_.get())); }
  kx_stats Stats() const {
    kx_stats st;
    detail::Check(kx_stats_init(&st, sizeof(st)));
    detail::Check(kx_session_get_stats(session_.get(), &st));
    return st;
  }
  void ResetStats() { detail::Check(kx_session_reset_stats(session_.get())); }

  // Generates after `prompt` ("" continues). `on_text` (may be empty) gets each piece of
  // whole UTF-8 characters; return false to stop. `sampler` null: the session's default.
  // An exception thrown by on_text stops generation and is rethrown here.
  GenerateResult Generate(const std::string& prompt, const GenerateParams& params = {},
                          const std::function<bool(std::string_view)>& on_text = {},
                          Sampler* sampler = nullptr) {
    std::vector<const char*> stops;
    kx_generate_params gp = CParams(params, &stops);
    GenerateResult out;
    Thunk thunk{&on_text, &out.text, nullptr};
    gp.on_token = &Thunk::Call;
    gp.user_data = &thunk;
    kx_generate_result r;
    detail::Check(kx_generate_result_init(&r, sizeof(r)));
    const kx_status st = kx_session_generate(session_.get(), sampler ? sampler->get() : nullptr,
                                             prompt.c_str(), &gp, &r);
    if (thunk.error) std::rethrow_exception(thunk.error);
    detail::Check(st);
    out.n_tokens = r.n_tokens;
    out.n_prompt = r.n_prompt;
    out.stop_reason = static_cast<kx_stop_reason>(r.stop_reason);
    return out;
  }

  // Answers the conversation `messages` (every turn so far, the previous answers included):
  // renders it with the model's chat template, evaluates only what the session does not hold
  // yet and generates the assistant's message (kx_session_chat). `on_text` as in Generate.
  //
  //   std::vector<kairox::ChatMessage> msgs = {{"user", "Name three primes."}};
  //   msgs.push_back({"assistant", session.Chat(msgs).text});
  //   msgs.push_back({"user", "And their sum?"});
  //   kairox::ChatResult r = session.Chat(msgs);  // r.n_reused: the first exchange's tokens
  ChatResult Chat(const std::vector<ChatMessage>& messages, const GenerateParams& params = {},
                  const std::function<bool(std::string_view)>& on_text = {},
                  Sampler* sampler = nullptr, bool default_system = true) {
    std::vector<kx_chat_message> msgs;
    msgs.reserve(messages.size());
    for (const ChatMessage& m : messages) msgs.push_back({m.role.c_str(), m.content.c_str()});
    std::vector<const char*> stops;
    kx_generate_params gp = CParams(params, &stops);
    ChatResult out;
    Thunk thunk{&on_text, &out.text, nullptr};
    gp.on_token = &Thunk::Call;
    gp.user_data = &thunk;
    kx_chat_result r;
    detail::Check(kx_chat_result_init(&r, sizeof(r)));
    const kx_status st =
        kx_session_chat(session_.get(), sampler ? sampler->get() : nullptr, msgs.data(),
                        msgs.size(), detail::Flag(!default_system, KX_CHAT_NO_DEFAULT_SYSTEM),
                        &gp, &r);
    if (thunk.error) std::rethrow_exception(thunk.error);
    detail::Check(st);
    out.n_tokens = r.n_tokens;
    out.n_prompt = r.n_prompt;
    out.n_reused = r.n_reused;
    out.stop_reason = static_cast<kx_stop_reason>(r.stop_reason);
    return out;
  }

  kx_session* get() const { return session_.get(); }

 private:
  // The C call's parameters for `params`; *stops holds the stop strings' pointers they use.
  static kx_generate_params CParams(const GenerateParams& params,
                                    std::vector<const char*>* stops) {
    for (const std::string& s : params.stop) stops->push_back(s.c_str());
    kx_generate_params gp;
    detail::Check(kx_generate_params_init(&gp, sizeof(gp)));
    gp.max_tokens = params.max_tokens;
    gp.stop_strings = stops->empty() ? nullptr : stops->data();
    gp.n_stop_strings = static_cast<uint32_t>(stops->size());
    gp.abort_flag = params.abort_flag;
    return gp;
  }

  struct Thunk {
    const std::function<bool(std::string_view)>* fn;
    std::string* text;
    std::exception_ptr error;
    static int32_t Call(void* user_data, int32_t, const char* text, uint64_t len) {
      auto* t = static_cast<Thunk*>(user_data);
      try {
        t->text->append(text, len);
        if (*t->fn && len > 0) return (*t->fn)(std::string_view(text, len)) ? 0 : 1;
        return 0;
      } catch (...) {
        t->error = std::current_exception();
        return 1;
      }
    }
  };
  static int32_t ProgressThunk(void* user_data, float progress) {
    try {
      return (*static_cast<std::function<bool(float)>*>(user_data))(progress) ? 0 : 1;
    } catch (...) {
      return 1;  // never let an exception cross the C library; stop instead
    }
  }
  using Ptr = detail::Handle<kx_session, kx_session_free>;
  // Declared before session_, so the session (which may call it) is freed first.
  std::unique_ptr<std::function<bool(float)>> progress_;
  Ptr session_;
};

}  // namespace kairox

#endif  // KAIROX_KAIROX_HPP_
