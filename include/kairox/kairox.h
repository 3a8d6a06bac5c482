/* kairox — the stable C ABI (C99; usable from C++, Python ctypes, anything with a C FFI).
 *
 *   kx_model* model = NULL;
 *   if (kx_model_load("model.gguf", NULL, &model) != KX_STATUS_OK) {
 *     fprintf(stderr, "%s\n", kx_last_error());
 *     return 1;
 *   }
 *   kx_session* session = NULL;
 *   kx_session_create(model, NULL, &session);
 *   kx_generate_params gp;
 *   kx_generate_params_init(&gp, sizeof gp);
 *   gp.max_tokens = 64;
 *   gp.on_token = print_piece;            // int32_t print_piece(void*, int32_t, const char*, uint64_t)
 *   kx_session_generate(session, NULL, "Once upon a time", &gp, NULL);
 *   kx_session_free(session);
 *   kx_model_free(model);
 *
 * Conventions (every function follows them):
 * - Fallible calls return kx_status (KX_STATUS_OK = 0) and write results through pointers.
 *   On failure kx_last_error() has a message naming the problem, outputs are left unwritten
 *   unless a declaration says otherwise (e.g. the size of a too-small buffer), and every
 *   handle passed in is still valid and in the state it was before the call.
 * - Nothing throws across this boundary; running out of memory is KX_STATUS_OUT_OF_MEMORY.
 * - Objects are created by kx_<object>_create/_load and destroyed by kx_<object>_free;
 *   kx_<object>_free(NULL) does nothing.
 * - Structs passed in or out start with `uint32_t struct_size`, set by the caller to
 *   sizeof(the struct it was compiled with) (the _init functions do it). Fields are only
 *   appended, so a program built against an older header keeps working: the library reads
 *   and writes only the first struct_size bytes.
 * - Strings are NUL-terminated UTF-8 unless a length is passed with them. Variable-size
 *   outputs use buffer negotiation: pass (NULL, 0) to get the required size with
 *   KX_STATUS_OK, or a buffer; a too-small buffer gives KX_STATUS_BUFFER_TOO_SMALL with the
 *   required size written and the buffer untouched.
 * - Threads: a kx_model is immutable and may be used from any number of threads at once.
 *   A kx_session or kx_sampler is used by one thread at a time (different sessions may run
 *   concurrently, each with its own worker threads). A session runs one call at a time: a
 *   call on a session while another call on it is running — from another thread, or from
 *   inside one of that session's own callbacks (progress, on_token) — returns
 *   KX_STATUS_BUSY at once and changes nothing; it neither waits nor corrupts the session.
 * - The ABI is append-only: values and functions are never renumbered or removed.
 *   kx_version() tells which library is loaded; declarations added after the first release
 *   (0.1.0) will say "added in <version>".
 */
#ifndef KAIROX_KAIROX_H_
#define KAIROX_KAIROX_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KX_API __declspec(dllexport)
#elif defined(__GNUC__)
#define KX_API __attribute__((visibility("default")))
#else
#define KX_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version, errors, logs */

/* The library's version as (major << 16) | (minor << 8) | patch. Thread-safe. */
KX_API uint32_t kx_version(void);

/* The version as "major.minor.patch"; a static string, never freed. Thread-safe. */
KX_API const char* kx_version_string(void);

typedef enum kx_status {
  KX_STATUS_OK = 0,
  KX_STATUS_INVALID_ARGUMENT = 1, /* a NULL pointer, an out-of-range value, ... */
  KX_STATUS_NOT_FOUND = 2,        /* a file that does not exist */
  KX_STATUS_IO_ERROR = 3,         /* a file that cannot be read */
  KX_STATUS_INVALID_MODEL = 4,    /* a corrupt, truncated or unsupported model file */
  KX_STATUS_UNSUPPORTED = 5,      /* a valid request this build cannot serve (a device) */
  KX_STATUS_UNIMPLEMENTED = 6,    /* an option accepted by the ABI but not implemented yet */
  KX_STATUS_OUT_OF_MEMORY = 7,
  KX_STATUS_BUFFER_TOO_SMALL = 8, /* the required size was written; retry with more room */
  KX_STATUS_CONTEXT_FULL = 9,     /* the tokens do not fit the session's context */
  KX_STATUS_CANCELLED = 10,       /* a callback asked to stop */
  KX_STATUS_INVALID_STATE = 11,   /* e.g. logits asked for before any evaluation */
  KX_STATUS_INTERNAL = 12,        /* a kairox bug; the message says where */
  KX_STATUS_BUSY = 13             /* the session is in use by another call (see Threads) */
} kx_status;

/* A static name for a status ("KX_STATUS_OK", ...; "KX_STATUS_UNKNOWN" otherwise). */
KX_API const char* kx_status_name(kx_status status);

/* The message of the last failed call on this thread ("" if none failed yet). Thread-local;
 * valid until the next failing kx_ call on the same thread. Successful calls leave it. */
KX_API const char* kx_last_error(void);

typedef enum kx_log_level {
  KX_LOG_TRACE = 0,
  KX_LOG_DEBUG = 1,
  KX_LOG_INFO = 2,
  KX_LOG_WARN = 3,
  KX_LOG_ERROR = 4,
  KX_LOG_OFF = 6
} kx_log_level;

/* Receives each log line (without a trailing newline). Called on whichever thread logs,
 * possibly concurrently from several; must not call back into kairox. */
typedef void (*kx_log_callback)(void* user_data, kx_log_level level, const char* message);

/* Sends kairox's log lines to `callback` (NULL: back to stderr, the default). `user_data`
 * must stay valid until the callback is replaced. Process-wide; do not call it while
 * another thread is inside kairox. */
KX_API kx_status kx_set_log_callback(kx_log_callback callback, void* user_data);

/* Lines below `level` are dropped (default KX_LOG_WARN, or $KAIROX_LOG_LEVEL). Process-wide. */
KX_API kx_status kx_set_log_level(kx_log_level level);

/* ---------------------------------------------------------------- model */

typedef struct kx_model kx_model;
typedef struct kx_model_options kx_model_options;

/* Memory tiers for budgets. */
typedef enum kx_tier { KX_TIER_GPU = 0, KX_TIER_RAM = 1 } kx_tier;

/* Progress in [0, 1]; return 0 to continue, non-zero to cancel. Called on the thread doing
 * the work: by kx_model_load at stages (opening 0, weights bound 0.5, ready 1), and by a
 * session's evaluations (kx_session_set_progress_callback). */
typedef int32_t (*kx_progress_callback)(void* user_data, float progress);

/* Options for kx_model_load. Owned by the caller; not used after kx_model_load returns.
 * Defaults: no sidecar, threads 0 (all cores), device "auto", no budgets, mmap on. */
KX_API kx_status kx_model_options_create(kx_model_options** out);
KX_API void kx_model_options_free(kx_model_options* options);
/* The sparse-inference sidecar (predictors, neuron groups): the default of sessions on this
 * model whose params name none (kx_session_params.sidecar). NULL clears. */
KX_API kx_status kx_model_options_set_sidecar_path(kx_model_options* options, const char* path);
/* Default worker threads of sessions on this model (0: all cores the process may use). */
KX_API kx_status kx_model_options_set_threads(kx_model_options* options, int32_t n_threads);
/* The default device of sessions on this model whose params name none: "cpu", "cuda", "sim"
 * or "auto" (the default: cuda when a usable GPU is found, else cpu); anything else is
 * KX_STATUS_INVALID_ARGUMENT. Whether the device can be opened is checked by
 * kx_session_create (an explicit "cuda" without a GPU fails there). */
KX_API kx_status kx_model_options_set_device(kx_model_options* options, const char* device);
/* Bytes the model may use in `tier` (0: no limit). KX_TIER_RAM: the default RAM budget of
 * sessions on this model whose params name none (kx_session_params.ram_budget); a hard
 * limit (docs/tiers.md). KX_TIER_GPU: the default VRAM budget of sessions on this model whose
 * params name none (kx_session_params.vram_budget; docs/device.md). */
KX_API kx_status kx_model_options_set_budget(kx_model_options* options, kx_tier tier,
                                             uint64_t bytes);
/* Non-zero: map the file (the default: pages load on demand, shared with the page cache). Zero:
 * read the whole file into memory owned by the model at load time (slower to load, no file
 * access afterwards). Logits are identical either way. */
KX_API kx_status kx_model_options_set_mmap(kx_model_options* options, int32_t use_mmap);
/* NULL clears. `user_data` must be valid during kx_model_load. */
KX_API kx_status kx_model_options_set_progress_callback(kx_model_options* options,
                                                        kx_progress_callback callback,
                                                        void* user_data);

/* Maps, validates and prepares the GGUF model at `path`; `options` may be NULL (defaults).
 * On success *out owns the model (free with kx_model_free). Fails with NOT_FOUND, IO_ERROR,
 * INVALID_MODEL (corrupt or unsupported file: the message names the key or tensor),
 * UNIMPLEMENTED, CANCELLED (by the progress callback) or OUT_OF_MEMORY; *out is untouched. */
KX_API kx_status kx_model_load(const char* path, const kx_model_options* options,
                               kx_model** out);

/* Releases the caller's reference. Sessions created on the model keep the weights alive,
 * so a model may be freed before its sessions. kx_model_free(NULL) does nothing. */
KX_API void kx_model_free(kx_model* model);

/* Filled by kx_model_get_info. */
typedef struct kx_model_info {
  uint32_t struct_size;
  int32_t n_layer;
  int32_t n_embd;
  int32_t n_ff;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t n_vocab;
  int32_t n_ctx_train;
  int32_t bos_token; /* -1: none */
  int32_t eos_token; /* -1: none */
  int32_t eot_token; /* -1: none */
  int32_t add_bos;   /* 1 when tokenizing with KX_TOKENIZE_ADD_SPECIAL prepends BOS */
  uint64_t n_params;
  uint64_t weight_bytes_per_token; /* bytes of weights one decode step reads */
  /* The strings below are owned by the model, valid until kx_model_free. */
  const char* arch;               /* general.architecture, e.g. "llama" */
  /* The chat format kairox recognised and formats natively (kx_model_apply_chat_template):
   * "chatml", "llama2", "llama3", "mistral", "gemma", or "generic" ("role: content" lines,
   * for a template kairox does not know). */
  const char* chat_template_kind;
  const char* chat_template;      /* the model's Jinja source ("" when it has none) */
  const char* path;
} kx_model_info;

/* Zeroes `info` and sets its struct_size (pass sizeof *info), ready for kx_model_get_info. */
KX_API kx_status kx_model_info_init(kx_model_info* info, uint32_t struct_size);

/* Fills `info` (info->struct_size set by the caller, e.g. by kx_model_info_init).
 * Thread-safe. */
KX_API kx_status kx_model_get_info(const kx_model* model, kx_model_info* info);

/* ---------------------------------------------------------------- tokens and text */

enum {
  KX_TOKENIZE_ADD_SPECIAL = 1,   /* BOS/EOS as the model asks */
  KX_TOKENIZE_PARSE_SPECIAL = 2, /* "<|im_start|>" in the text becomes that control token */
  KX_DETOKENIZE_RENDER_SPECIAL = 1 /* control tokens give their text (else nothing) */
};

/* Text (text_len bytes; any bytes accepted) → token ids. Buffer negotiation: *n_tokens is
 * always set to the number of ids; `tokens` may be NULL when capacity is 0. Thread-safe. */
KX_API kx_status kx_tokenize(const kx_model* model, const char* text, uint64_t text_len,
                             uint32_t flags, int32_t* tokens, uint64_t capacity,
                             uint64_t* n_tokens);

/* Token ids → bytes, NUL-terminated. *length is set to the byte count without the NUL, so
 * `capacity` must be at least *length + 1. The bytes may end inside a UTF-8 character when
 * the ids do. An id outside [0, n_vocab) is INVALID_ARGUMENT. Thread-safe. */
KX_API kx_status kx_detokenize(const kx_model* model, const int32_t* tokens, uint64_t n_tokens,
                               uint32_t flags, char* text, uint64_t capacity, uint64_t* length);

/* Non-zero when `token` ends a generation (EOS, EOT, <|im_end|>, ...). Thread-safe. */
KX_API kx_status kx_model_is_end_of_generation(const kx_model* model, int32_t token,
                                               int32_t* is_end);

typedef struct kx_chat_message {
  const char* role; /* "system", "user", "assistant" */
  const char* content;
} kx_chat_message;

enum {
  KX_CHAT_ADD_GENERATION_PROMPT = 1, /* end with the opening of an assistant turn */
  KX_CHAT_NO_DEFAULT_SYSTEM = 2      /* do not insert the template's built-in system prompt */
};

/* Formats a conversation with the model's chat template (recognised natively, see
 * kx_model_info.chat_template_kind) into prompt text, NUL-terminated, with the same buffer
 * negotiation as kx_detokenize. Tokenize the result with KX_TOKENIZE_PARSE_SPECIAL.
 * Thread-safe. */
KX_API kx_status kx_model_apply_chat_template(const kx_model* model,
                                              const kx_chat_message* messages,
                                              uint64_t n_messages, uint32_t flags, char* text,
                                              uint64_t capacity, uint64_t* length);

/* ---------------------------------------------------------------- sessions */

typedef struct kx_session kx_session;

typedef struct kx_session_params {
  uint32_t struct_size;
  int32_t n_ctx;     /* context in tokens; 0: min(trained context, 4096) */
  int32_t n_batch;   /* tokens per prefill batch; 0: 64 */
  int32_t n_threads; /* 0: the model options' threads (0 there: all cores) */
  uint64_t seed;     /* seed of the session's default sampler (generate with sampler NULL) */
  /* Activation sparsity (a sidecar built by kairox-prepare). */
  const char* sidecar; /* NULL or "": <model>.kairox.gguf beside the model, when it exists.
                        * Copied; need not outlive the call. */
  int32_t sparse;      /* KX_SPARSE_AUTO (0, default): use the sidecar; KX_SPARSE_OFF: dense */
  float sparsity;      /* 0: the sidecar's own sparsity; else one of its calibrated levels */
  /* Memory tiers. With a sidecar and a RAM budget, FFN bundles are read from the sidecar
   * file into the session's own slots and its predictors are copied at creation: a sidecar
   * truncated or rewritten during the session then fails evaluations with IO_ERROR (sticky).
   * Without a budget the sidecar is memory-mapped, like the model file: truncating a mapped
   * file while a session reads it raises SIGBUS, which ends the process (docs/tiers.md;
   * replace files by rename). */
  const char* ram_budget; /* NULL or "": the model options' KX_TIER_RAM budget (0: none);
                           * else "512M", "2G" (the whole session) or "50%" (resident bundles
                           * as a share of the sidecar's). Copied. */
  const char* policy;     /* NULL or "": "tam-adaptive"; static, lru, lfu, topk, tam, tam-t, ... */
  int32_t prefetch;       /* KX_PREFETCH_ON (0, default) or KX_PREFETCH_OFF */
  /* The device (docs/device.md): the non-FFN part of the first layers and the LM head run
   * there, the FFN on the CPU. Callers compiled against a smaller struct get the defaults. */
  const char* device;      /* NULL or "": the model options' device ("auto" unless set):
                            * "cpu", "cuda", "sim" (a simulated GPU, for tests) or "auto"
                            * (cuda when a usable GPU is found, else cpu). Copied. */
  const char* vram_budget; /* NULL or "": the model options' KX_TIER_GPU budget (0 there: all
                            * of the device); else "4G" or "50%" of the device. Copied. */
  int32_t n_gpu_layers;    /* KX_GPU_LAYERS_AUTO (0, default): every layer that fits;
                            * N > 0: at most N; KX_GPU_LAYERS_NONE: nothing on the device */
  /* The split FFN (docs/device.md): with a sidecar and a device, the predicted FFN groups the
   * device holds are computed there, the rest on the CPU; which groups it holds changes
   * online. Callers compiled against a smaller struct get the defaults. */
  const char* vram_ffn;      /* NULL or "": the VRAM the attention layers and the head leave;
                              * "2G", or "30%" of the sidecar's bundles; "0": CPU only. Copied. */
  const char* device_policy; /* NULL or "": "tam-adaptive"; static, lru, lfu, topk, tam, ... Copied. */
} kx_session_params;

enum { KX_GPU_LAYERS_AUTO = 0, KX_GPU_LAYERS_NONE = -1 };

enum { KX_PREFETCH_ON = 0, KX_PREFETCH_OFF = 1 };

enum { KX_SPARSE_AUTO = 0, KX_SPARSE_OFF = 1 };

/* Fills the defaults and sets struct_size (pass sizeof *params). */
KX_API kx_status kx_session_params_init(kx_session_params* params, uint32_t struct_size);

/* A sequence (KV cache, token history, statistics) on `model`; `params` may be NULL. The
 * session holds a reference to the model's weights. Free with kx_session_free. */
KX_API kx_status kx_session_create(const kx_model* model, const kx_session_params* params,
                                   kx_session** out);
/* Frees the session. Called while a call on the session is running (from one of its own
 * callbacks, or another thread), the session is freed when that call returns; the handle
 * must not be used again either way. kx_session_free(NULL) does nothing. */
KX_API void kx_session_free(kx_session* session);

/* Called on the evaluating thread while the session evaluates tokens — kx_session_eval, and
 * kx_session_generate's prompt and generated tokens — with the share of the call's tokens
 * done, in [0, 1]: before each batch (kx_session_params.n_batch tokens) and between the
 * model's layers, so a long prompt can be stopped within one layer's work. (A generated
 * token, a single-token kx_session_eval and every token under a RAM budget with a sidecar
 * are polled once, before each.)
 * Return non-zero to stop: kx_session_eval then fails with CANCELLED, kx_session_generate
 * stops with KX_STOP_ABORTED. Calls on this session from inside it return KX_STATUS_BUSY
 * (kx_session_free is deferred until the evaluating call returns). NULL
 * removes it; `user_data` must stay valid while it is set. */
KX_API kx_status kx_session_set_progress_callback(kx_session* session,
                                                  kx_progress_callback callback,
                                                  void* user_data);

enum { KX_EVAL_ALL_LOGITS = 1 /* keep logits of every token, not only the last */ };

/* Appends `tokens` after the session's n_past tokens and evaluates them. Fails, changing
 * nothing, with CONTEXT_FULL when they do not fit or INVALID_ARGUMENT for an id out of
 * range. CANCELLED when the progress callback stopped it: the KV cache and token history
 * are as before the call, but the logits are gone (as after kx_session_truncate). Likewise
 * INVALID_MODEL when the model's logits came out NaN or inf (damaged weights; the message
 * names the token position) and IO_ERROR when the sidecar was written to since the model was
 * loaded, or a read of it failed (docs/validation.md). A call
 * with more than one token counts as prompt processing in the statistics.
 * Example: stopping a long prompt from another thread or a signal handler:
 *
 *   static volatile sig_atomic_t stop = 0;   // set to 1 elsewhere
 *   static int32_t check_stop(void* ud, float progress) { (void)ud; (void)progress; return stop; }
 *   kx_session_set_progress_callback(session, check_stop, NULL);
 *   if (kx_session_eval(session, ids, n, 0) == KX_STATUS_CANCELLED) { ... as before the call ... }
 */
KX_API kx_status kx_session_eval(kx_session* session, const int32_t* tokens,
                                 uint64_t n_tokens, uint32_t flags);

/* Logits (n_vocab floats) of token `index` of the last evaluation of n tokens: -1 or n - 1
 * is its last token; with KX_EVAL_ALL_LOGITS any of 0 .. n - 1 (or -n .. -1, counted from
 * the end). Without that flag only the last token's logits were kept: any other index is
 * INVALID_ARGUMENT. *logits points into the session, valid until the next call that changes
 * it (eval, generate, truncate, reset, free). INVALID_STATE when there are none (nothing
 * evaluated since the last truncate/reset, or the last evaluation failed). */
KX_API kx_status kx_session_get_logits(const kx_session* session, int32_t index,
                                       const float** logits, int32_t* n_vocab);

/* Tokens in the KV cache (n_past) and its capacity (n_ctx). */
KX_API kx_status kx_session_get_n_past(const kx_session* session, int32_t* n_past);
KX_API kx_status kx_session_get_n_ctx(const kx_session* session, int32_t* n_ctx);

/* The n_past token ids in the KV cache, with buffer negotiation (*n_tokens always set). */
KX_API kx_status kx_session_get_tokens(const kx_session* session, int32_t* tokens,
                                       uint64_t capacity, uint64_t* n_tokens);

/* Keeps the first n_keep tokens (0 <= n_keep <= n_past) and drops the rest. Logits are gone
 * until the next evaluation (generate re-evaluates the last token when it needs them). */
KX_API kx_status kx_session_truncate(kx_session* session, int32_t n_keep);

/* Clears the KV cache and history (truncate to 0) and re-seeds the default sampler.
 * Statistics are kept (kx_session_reset_stats clears them). */
KX_API kx_status kx_session_reset(kx_session* session);

/* ---------------------------------------------------------------- sampling */

typedef struct kx_sampler kx_sampler;

/* The chain runs in this order: repetition penalty → (temperature <= 0: argmax, done) →
 * top-k → min-p → top-p → temperature → seeded draw. Same seed + inputs → same tokens on
 * every platform. The defaults below (kx_sampler_params_init) are the library's one set:
 * kairox.hpp's SamplerParams, kairox-cli and kairox-chat take theirs from it. Only the seed
 * differs there: the programs draw a random one unless given -s N. */
typedef struct kx_sampler_params {
  uint32_t struct_size;
  float temperature;    /* default 0.8; <= 0: greedy */
  int32_t top_k;        /* default 40; <= 0: off */
  float top_p;          /* default 0.95; >= 1: off */
  float min_p;          /* default 0.05; <= 0: off */
  float repeat_penalty; /* default 1 (off) */
  int32_t repeat_last_n; /* default 64; 0: off; < 0: whole history */
  uint32_t reserved;    /* 0 */
  uint64_t seed;        /* default 0xC0FFEE */
} kx_sampler_params;

KX_API kx_status kx_sampler_params_init(kx_sampler_params* params, uint32_t struct_size);

/* A sampler; `params` may be NULL (defaults). Independent of any model or session. */
KX_API kx_status kx_sampler_create(const kx_sampler_params* params, kx_sampler** out);
KX_API void kx_sampler_free(kx_sampler* sampler);
/* Restarts the random sequence from `seed`. */
KX_API kx_status kx_sampler_reset(kx_sampler* sampler, uint64_t seed);

/* Draws from `logits` (n_vocab floats) with `history` (may be NULL when n_history is 0)
 * for the repetition penalty. */
KX_API kx_status kx_sampler_sample_logits(kx_sampler* sampler, const float* logits,
                                          int32_t n_vocab, const int32_t* history,
                                          uint64_t n_history, int32_t* token);

/* Draws from the session's last logits with its token history. INVALID_STATE without logits. */
KX_API kx_status kx_sampler_sample(kx_sampler* sampler, const kx_session* session,
                                   int32_t* token);

/* ---------------------------------------------------------------- generation */

/* Called once per generated token, on the generating thread, with the text that token
 * completed: whole UTF-8 characters only (possibly "" while a character or a possible stop
 * string is held back); `text` is NUL-terminated and valid during the call. A final call
 * with token = -1 delivers held-back text, if any. Return 0 to go on, non-zero to stop. */
typedef int32_t (*kx_token_callback)(void* user_data, int32_t token, const char* text,
                                     uint64_t text_len);

typedef struct kx_generate_params {
  uint32_t struct_size;
  int32_t max_tokens;              /* default 256; -1: until end of generation or context */
  const char** stop_strings;       /* may be NULL; generation stops at the first one */
  uint32_t n_stop_strings;
  uint32_t flags;                  /* 0 (reserved) */
  /* Polled before each generated token and, while the prompt is evaluated, with the
   * session's progress callback (between batches and layers); set it non-zero (from any
   * thread or a signal handler) to stop. May be NULL. */
  const volatile int32_t* abort_flag;
  kx_token_callback on_token; /* may be NULL */
  void* user_data;
} kx_generate_params;

KX_API kx_status kx_generate_params_init(kx_generate_params* params, uint32_t struct_size);

typedef enum kx_stop_reason {
  KX_STOP_END_OF_GENERATION = 0,
  KX_STOP_MAX_TOKENS = 1,
  KX_STOP_STRING = 2,
  KX_STOP_CONTEXT_FULL = 3,
  KX_STOP_ABORTED = 4,  /* the abort flag or the session's progress callback */
  KX_STOP_CALLBACK = 5  /* on_token returned non-zero */
} kx_stop_reason;

/* Filled by kx_session_generate. */
typedef struct kx_generate_result {
  uint32_t struct_size;
  int32_t n_tokens;    /* tokens generated (each was evaluated into the session) */
  int32_t n_prompt;    /* prompt tokens evaluated (0 when stopped while evaluating them) */
  int32_t stop_reason; /* a kx_stop_reason */
} kx_generate_result;

/* Zeroes `result` and sets its struct_size (pass sizeof *result). */
KX_API kx_status kx_generate_result_init(kx_generate_result* result, uint32_t struct_size);

/* Evaluates `prompt` (may be NULL or "": continue from the session's state; tokenized with
 * KX_TOKENIZE_PARSE_SPECIAL, plus ADD_SPECIAL when the session is empty), then samples with
 * `sampler` (NULL: the session's default sampler) until a stop. Every generated token is
 * evaluated into the session, so a later call continues the text; the end-of-generation
 * token is not. The streamed text excludes a matched stop string (its tokens are in the
 * session). A prompt that does not fit is CONTEXT_FULL with nothing changed; a full context
 * during generation is a normal stop. Stopped (abort flag or progress callback) while the
 * prompt is evaluated: KX_STATUS_OK with KX_STOP_ABORTED, n_prompt = 0, n_tokens = 0 and
 * the session as before the call except for its logits (as after kx_session_truncate).
 * `params` and `result` may be NULL.
 *
 * Multi-turn chat: kx_session_chat (below) does this. By hand: keep the conversation
 * as kx_chat_message's and, for every turn, render
 * all of it with KX_CHAT_ADD_GENERATION_PROMPT, tokenize that with KX_TOKENIZE_ADD_SPECIAL |
 * KX_TOKENIZE_PARSE_SPECIAL, keep the part the session already holds (the longest common
 * prefix with kx_session_get_tokens, leaving at least one token to evaluate), evaluate the
 * rest and generate with no prompt; the streamed text is the assistant's message. The
 * template writes every end-of-turn marker itself (the end-of-generation token is not
 * evaluated into the session, and the next render supplies it), so nothing is appended by
 * hand, and each turn evaluates only its new tokens (all of them again when a client edits
 * the history):
 *
 *   msgs[n_msgs++] = (kx_chat_message){"user", question};
 *   kx_model_apply_chat_template(model, msgs, n_msgs, KX_CHAT_ADD_GENERATION_PROMPT,
 *                                text, sizeof text, &len);      // (size query first if needed)
 *   kx_tokenize(model, text, len, KX_TOKENIZE_ADD_SPECIAL | KX_TOKENIZE_PARSE_SPECIAL,
 *               ids, max_ids, &n_ids);
 *   kx_session_get_tokens(session, held, max_ids, &n_held);
 *   keep = 0;
 *   while (keep < n_held && keep + 1 < n_ids && held[keep] == ids[keep]) ++keep;
 *   kx_session_truncate(session, (int32_t)keep);
 *   kx_session_eval(session, ids + keep, n_ids - keep, 0);
 *   kx_session_generate(session, sampler, NULL, &gp, &result);  // on_token collects answer
 *   msgs[n_msgs++] = (kx_chat_message){"assistant", answer};
 */
KX_API kx_status kx_session_generate(kx_session* session, kx_sampler* sampler,
                                     const char* prompt, const kx_generate_params* params,
                                     kx_generate_result* result);

/* ---------------------------------------------------------------- chat (added after 0.1.0) */

/* Filled by kx_session_chat. */
typedef struct kx_chat_result {
  uint32_t struct_size;
  int32_t n_tokens;    /* answer tokens generated (each was evaluated into the session) */
  int32_t n_prompt;    /* tokens of the rendered conversation, generation prompt included */
  int32_t n_reused;    /* of those, already in the session's KV cache: not evaluated again */
  int32_t stop_reason; /* a kx_stop_reason */
} kx_chat_result;

/* Zeroes `result` and sets its struct_size (pass sizeof *result). */
KX_API kx_status kx_chat_result_init(kx_chat_result* result, uint32_t struct_size);

/* Answers a conversation: renders `messages` with the model's chat template and the opening
 * of an assistant turn (kx_model_apply_chat_template with KX_CHAT_ADD_GENERATION_PROMPT;
 * `flags` may add KX_CHAT_NO_DEFAULT_SYSTEM), tokenizes it, keeps the longest prefix of it
 * the session already holds (at least one token is evaluated, for fresh logits), drops the
 * rest of the session, evaluates the new suffix and generates as kx_session_generate with no
 * prompt: the streamed text (params->on_token) is the assistant's message. Pass the whole
 * conversation every turn, the previous answers included: the template writes every
 * end-of-turn marker (the end-of-generation token is not evaluated into the session, the next
 * render supplies it), so a follow-up evaluates only its new tokens, and a history edited by
 * the caller is re-evaluated from the first token that differs. Any session works: one that
 * holds another conversation is re-evaluated from where the two differ.
 * Fails with INVALID_ARGUMENT (no messages, a NULL role or content, unknown flags, bad
 * params) and CONTEXT_FULL when the rendered conversation is longer than the context; the
 * session is then unchanged. Stopped (abort flag, progress callback) while the suffix is
 * evaluated: KX_STATUS_OK with KX_STOP_ABORTED and n_tokens 0; the session then holds the
 * reused prefix. `params` and `result` may be NULL.
 *
 *   kx_chat_message msgs[8] = {{"user", "Name three primes."}};
 *   uint64_t n = 1;
 *   kx_chat_result r;
 *   kx_chat_result_init(&r, sizeof r);
 *   kx_session_chat(session, sampler, msgs, n, 0, &gp, &r);   // gp.on_token collects `answer`
 *   msgs[n++] = (kx_chat_message){"assistant", answer};
 *   msgs[n++] = (kx_chat_message){"user", "And their sum?"};
 *   kx_session_chat(session, sampler, msgs, n, 0, &gp, &r);   // r.n_reused: the first turn
 */
KX_API kx_status kx_session_chat(kx_session* session, kx_sampler* sampler,
                                 const kx_chat_message* messages, uint64_t n_messages,
                                 uint32_t flags, const kx_generate_params* params,
                                 kx_chat_result* result);

/* Replaces the sampler's logit biases (added after 0.1.0): bias[i] is added to the logit of
 * tokens[i] before anything else in the chain; -INFINITY bans the token, +INFINITY forces it
 * (a ban wins over a force). n = 0 clears them; the random sequence is not restarted. Ids at
 * or above the vocabulary size of the logits sampled later are ignored. INVALID_ARGUMENT for
 * a negative id or a NaN bias (nothing changed). */
KX_API kx_status kx_sampler_set_logit_bias(kx_sampler* sampler, const int32_t* tokens,
                                           const float* biases, uint64_t n);

/* ---------------------------------------------------------------- statistics */

/* Counters since the session was created or kx_session_reset_stats, filled by
 * kx_session_get_stats. Grows by appending (bytes per memory tier, reloads and stalls will
 * come with tiering). */
typedef struct kx_stats {
  uint32_t struct_size;
  int32_t n_threads;
  uint64_t n_prompt_tokens;        /* tokens evaluated in batches of more than one */
  uint64_t n_gen_tokens;           /* tokens evaluated one at a time */
  uint64_t n_evals;                /* evaluation calls */
  double prompt_seconds;
  double gen_seconds;              /* evaluating one token at a time */
  double sample_seconds;
  double prompt_tokens_per_second; /* 0 when nothing was processed */
  double gen_tokens_per_second;
} kx_stats;

/* Zeroes `stats` and sets its struct_size (pass sizeof *stats). */
KX_API kx_status kx_stats_init(kx_stats* stats, uint32_t struct_size);

/* Fills `stats` (stats->struct_size set by the caller, e.g. by kx_stats_init). */
KX_API kx_status kx_session_get_stats(const kx_session* session, kx_stats* stats);
KX_API kx_status kx_session_reset_stats(kx_session* session);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KAIROX_H_ */
