// C ABI: model options, loading, model info, tokens and chat templates.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "capi/internal.h"
#include "device/open_device.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"

using kx::capi::Fail;
using kx::capi::Guard;
using kx::capi::NullArg;

namespace {

// Load stages reported to the progress callback (the loader has no finer hooks yet).
constexpr float kProgressOpening = 0.0f;
constexpr float kProgressBound = 0.5f;
constexpr float kProgressReady = 1.0f;

// Largest accepted thread count: beyond it a value is a bug, not a machine.
constexpr int32_t kMaxThreads = 4096;

// True (after recording the error) when the callback asks to cancel.
bool Cancelled(const kx_model_options& o, float progress, kx_status* status) {
  if (o.progress == nullptr || o.progress(o.progress_user_data, progress) == 0) return false;
  *status = Fail(KX_STATUS_CANCELLED, "kx_model_load: cancelled by the progress callback at " +
                                          std::to_string(progress));
  return true;
}

}  // namespace

extern "C" {

kx_status kx_model_options_create(kx_model_options** out) {
  if (out == nullptr) return NullArg(__func__, "out");
  return Guard(__func__, [&] {
    *out = new kx_model_options();
    return KX_STATUS_OK;
  });
}

void kx_model_options_free(kx_model_options* options) { delete options; }

kx_status kx_model_options_set_sidecar_path(kx_model_options* options, const char* path) {
  if (options == nullptr) return NullArg(__func__, "options");
  return Guard(__func__, [&] {
    options->sidecar_path = path ? path : "";
    return KX_STATUS_OK;
  });
}

kx_status kx_model_options_set_threads(kx_model_options* options, int32_t n_threads) {
  if (options == nullptr) return NullArg(__func__, "options");
  if (n_threads < 0 || n_threads > kMaxThreads) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_model_options_set_threads: n_threads " +
                                                std::to_string(n_threads) + " is not in [0, " +
                                                std::to_string(kMaxThreads) + "]");
  }
  options->n_threads = n_threads;
  return KX_STATUS_OK;
}

kx_status kx_model_options_set_device(kx_model_options* options, const char* device) {
  if (options == nullptr) return NullArg(__func__, "options");
  if (device == nullptr) return NullArg(__func__, "device");
  return Guard(__func__, [&] {
    if (absl::StatusOr<std::optional<kx::DeviceKind>> kind = kx::ParseDeviceKind(device);
        !kind.ok()) {
      return Fail(KX_STATUS_INVALID_ARGUMENT,
                  "kx_model_options_set_device: " + std::string(kind.status().message()));
    }
    options->device = device;
    return KX_STATUS_OK;
  });
}

kx_status kx_model_options_set_budget(kx_model_options* options, kx_tier tier, uint64_t bytes) {
  if (options == nullptr) return NullArg(__func__, "options");
  const auto raw = kx::capi::RawEnum(tier);
  switch (raw) {
    case KX_TIER_GPU: options->budget_gpu = bytes; return KX_STATUS_OK;
    case KX_TIER_RAM: options->budget_ram = bytes; return KX_STATUS_OK;
    default: break;
  }
  return Fail(KX_STATUS_INVALID_ARGUMENT,
              "kx_model_options_set_budget: unknown tier " + std::to_string(raw));
}

kx_status kx_model_options_set_mmap(kx_model_options* options, int32_t use_mmap) {
  if (options == nullptr) return NullArg(__func__, "options");
  options->use_mmap = use_mmap != 0;
  return KX_STATUS_OK;
}

kx_status kx_model_options_set_progress_callback(kx_model_options* options,
                                                 kx_progress_callback callback,
                                                 void* user_data) {
  if (options == nullptr) return NullArg(__func__, "options");
  options->progress = callback;
  options->progress_user_data = user_data;
  return KX_STATUS_OK;
}

kx_status kx_model_load(const char* path, const kx_model_options* options, kx_model** out) {
  if (path == nullptr) return NullArg(__func__, "path");
  if (out == nullptr) return NullArg(__func__, "out");
  return Guard(__func__, [&] {
    auto m = std::make_unique<kx_model>();
    if (options != nullptr) m->options = *options;
    kx_status status = KX_STATUS_OK;
    if (Cancelled(m->options, kProgressOpening, &status)) return status;
    struct stat st {};
    if (::stat(path, &st) != 0) {
      return Fail(KX_STATUS_NOT_FOUND, "kx_model_load: no model file at '" + std::string(path) + "'");
    }
    kx::ModelOptions load_options;
    load_options.use_mmap = m->options.use_mmap;
    auto loaded = kx::Model::Load(path, load_options);
    if (!loaded.ok()) {
      const auto code = loaded.status().code();
      const kx_status fallback = code == absl::StatusCode::kResourceExhausted
                                     ? KX_STATUS_OUT_OF_MEMORY
                                     : KX_STATUS_INVALID_MODEL;
      const bool io = code == absl::StatusCode::kPermissionDenied ||
                      code == absl::StatusCode::kNotFound;
      return Fail(io ? KX_STATUS_IO_ERROR : fallback,
                  "kx_model_load: " + std::string(loaded.status().message()));
    }
    m->model = *std::move(loaded);
    if (Cancelled(m->options, kProgressBound, &status)) return status;
    auto tmpl = m->model->gguf().GetString("tokenizer.chat_template");
    if (tmpl.ok()) m->chat_template = std::string(*tmpl);
    // The file's template, or its architecture's (Gemma 3 files carry none).
    const kx::ChatTemplateKind kind = kx::ChatTemplateForGguf(m->model->gguf());
    m->chat_kind = kind;
    m->chat_template_kind = std::string(kx::ChatTemplateName(kind));
    m->default_system = kx::ExtractDefaultSystemPrompt(m->chat_template);
    if (Cancelled(m->options, kProgressReady, &status)) return status;
    *out = m.release();
    return KX_STATUS_OK;
  });
}

void kx_model_free(kx_model* model) { delete model; }

kx_status kx_model_info_init(kx_model_info* info, uint32_t struct_size) {
  return kx::capi::InitOutputStruct(__func__, "info", info, struct_size);
}

kx_status kx_model_get_info(const kx_model* model, kx_model_info* info) {
  if (model == nullptr) return NullArg(__func__, "model");
  if (info == nullptr) return NullArg(__func__, "info");
  if (auto st = kx::capi::CheckStructSize(__func__, "info", info->struct_size)) return st;
  return Guard(__func__, [&] {
    const kx::LlamaHParams& hp = model->model->hparams();
    const kx::Tokenizer& tok = model->model->tokenizer();
    kx_model_info r{};
    r.struct_size = sizeof(r);
    r.n_layer = hp.n_layer;
    r.n_embd = hp.n_embd;
    r.n_ff = hp.n_ff;
    r.n_head = hp.n_head;
    r.n_head_kv = hp.n_head_kv;
    r.n_vocab = tok.n_vocab();
    r.n_ctx_train = hp.n_ctx_train;
    r.bos_token = tok.bos_id();
    r.eos_token = tok.eos_id();
    r.eot_token = tok.eot_id();
    r.add_bos = tok.add_bos() ? 1 : 0;
    r.n_params = model->model->ParameterCount();
    r.weight_bytes_per_token = model->model->WeightBytesPerToken();
    r.arch = hp.arch.c_str();
    r.chat_template_kind = model->chat_template_kind.c_str();
    r.chat_template = model->chat_template.c_str();
    r.path = model->model->path().c_str();
    kx::capi::WriteStruct(r, info);
    return KX_STATUS_OK;
  });
}

kx_status kx_tokenize(const kx_model* model, const char* text, uint64_t text_len, uint32_t flags,
                      int32_t* tokens, uint64_t capacity, uint64_t* n_tokens) {
  if (model == nullptr) return NullArg(__func__, "model");
  if (text == nullptr && text_len > 0) return NullArg(__func__, "text");
  if (tokens == nullptr && capacity > 0) return NullArg(__func__, "tokens");
  if (n_tokens == nullptr) return NullArg(__func__, "n_tokens");
  if (flags & ~uint32_t{KX_TOKENIZE_ADD_SPECIAL | KX_TOKENIZE_PARSE_SPECIAL}) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_tokenize: unknown flags");
  }
  return Guard(__func__, [&] {
    const std::vector<int32_t> ids = model->model->tokenizer().Encode(
        std::string_view(text ? text : "", text_len), (flags & KX_TOKENIZE_ADD_SPECIAL) != 0,
        (flags & KX_TOKENIZE_PARSE_SPECIAL) != 0);
    *n_tokens = ids.size();
    if (tokens == nullptr && capacity == 0) return KX_STATUS_OK;
    if (capacity < ids.size()) {
      return Fail(KX_STATUS_BUFFER_TOO_SMALL, "kx_tokenize: the buffer holds " +
                                                  std::to_string(capacity) + " tokens, " +
                                                  std::to_string(ids.size()) + " needed");
    }
    std::copy(ids.begin(), ids.end(), tokens);
    return KX_STATUS_OK;
  });
}

kx_status kx_detokenize(const kx_model* model, const int32_t* tokens, uint64_t n_tokens,
                        uint32_t flags, char* text, uint64_t capacity, uint64_t* length) {
  if (model == nullptr) return NullArg(__func__, "model");
  if (tokens == nullptr && n_tokens > 0) return NullArg(__func__, "tokens");
  if (text == nullptr && capacity > 0) return NullArg(__func__, "text");
  if (length == nullptr) return NullArg(__func__, "length");
  if (flags & ~uint32_t{KX_DETOKENIZE_RENDER_SPECIAL}) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_detokenize: unknown flags");
  }
  return Guard(__func__, [&] {
    const kx::Tokenizer& tok = model->model->tokenizer();
    std::string out;
    for (uint64_t i = 0; i < n_tokens; ++i) {
      if (tokens[i] < 0 || tokens[i] >= tok.n_vocab()) {
        return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_detokenize: token " + std::to_string(i) +
                                                    " is " + std::to_string(tokens[i]) +
                                                    ", not in [0, " +
                                                    std::to_string(tok.n_vocab()) + ")");
      }
      out += tok.TokenToPiece(tokens[i], (flags & KX_DETOKENIZE_RENDER_SPECIAL) != 0);
    }
    return kx::capi::CopyText("kx_detokenize", out, text, capacity, length);
  });
}

kx_status kx_model_is_end_of_generation(const kx_model* model, int32_t token, int32_t* is_end) {
  if (model == nullptr) return NullArg(__func__, "model");
  if (is_end == nullptr) return NullArg(__func__, "is_end");
  *is_end = model->model->tokenizer().IsEndOfGeneration(token) ? 1 : 0;
  return KX_STATUS_OK;
}

kx_status kx_model_apply_chat_template(const kx_model* model, const kx_chat_message* messages,
                                       uint64_t n_messages, uint32_t flags, char* text,
                                       uint64_t capacity, uint64_t* length) {
  if (model == nullptr) return NullArg(__func__, "model");
  if (messages == nullptr && n_messages > 0) return NullArg(__func__, "messages");
  if (text == nullptr && capacity > 0) return NullArg(__func__, "text");
  if (length == nullptr) return NullArg(__func__, "length");
  if (flags & ~uint32_t{KX_CHAT_ADD_GENERATION_PROMPT | KX_CHAT_NO_DEFAULT_SYSTEM}) {
    return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_model_apply_chat_template: unknown flags");
  }
  for (uint64_t i = 0; i < n_messages; ++i) {
    if (messages[i].role == nullptr || messages[i].content == nullptr) {
      return Fail(KX_STATUS_INVALID_ARGUMENT, "kx_model_apply_chat_template: message " +
                                                  std::to_string(i) +
                                                  " has a NULL role or content");
    }
  }
  return Guard(__func__, [&] {
    std::vector<kx::ChatMessage> msgs;
    msgs.reserve(n_messages);
    for (uint64_t i = 0; i < n_messages; ++i) {
      msgs.push_back({messages[i].role, messages[i].content});
    }
    const std::string system =
        (flags & KX_CHAT_NO_DEFAULT_SYSTEM) ? std::string() : model->default_system;
    const std::string prompt = kx::ApplyChatTemplate(
        model->chat_kind, msgs,
        (flags & KX_CHAT_ADD_GENERATION_PROMPT) != 0, system);
    return kx::capi::CopyText("kx_model_apply_chat_template", prompt, text, capacity, length);
  });
}

}  // extern "C"
