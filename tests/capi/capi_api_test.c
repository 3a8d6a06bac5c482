/* The C ABI used from C (compiled as C99 with -pedantic -Werror): loading with options,
 * info, tokens, chat templates, sessions, logits, KV truncation, sampling, generation with
 * streaming, stop strings, abort and callbacks, statistics, evaluations stopped between
 * layers, multi-turn chat, the output structs' _init.
 *
 *   capi_api_test MODEL.gguf tiny|default
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "capi_test.h"

#define MAX_TOKENS 512
#define TEXT_CAP 8192

/* ---- callbacks */

static int g_log_lines = 0;
static void CountLog(void* user_data, kx_log_level level, const char* message) {
  (void)user_data;
  (void)level;
  if (message != NULL) ++g_log_lines;
}

typedef struct {
  float values[16];
  int n;
  float cancel_at; /* cancel when progress reaches this (> 1: never) */
} Progress;

static int32_t OnProgress(void* user_data, float progress) {
  Progress* p = (Progress*)user_data;
  if (p->n < 16) p->values[p->n++] = progress;
  return progress >= p->cancel_at ? 1 : 0;
}

typedef struct {
  int32_t tokens[MAX_TOKENS];
  int n_tokens;
  char text[TEXT_CAP];
  size_t text_len;
  int n_calls;
  int final_calls;        /* calls with token -1 */
  int stop_after;         /* return non-zero after this many tokens (0: never) */
  int abort_after;        /* set *abort after this many tokens (0: never) */
  volatile int32_t* abort;
  int bad_utf8;           /* a piece that was not whole UTF-8 characters */
} Collect;

/* True when s[0..n) is whole, valid UTF-8 characters. */
static int WholeUtf8(const char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    size_t k;
    if (len == 0 || i + len > n) return 0;
    for (k = 1; k < len; ++k) {
      if ((((unsigned char)s[i + k]) & 0xC0) != 0x80) return 0;
    }
    i += len;
  }
  return 1;
}

static int32_t OnToken(void* user_data, int32_t token, const char* text, uint64_t text_len) {
  Collect* c = (Collect*)user_data;
  ++c->n_calls;
  if (text == NULL || strlen(text) != text_len || !WholeUtf8(text, (size_t)text_len)) {
    c->bad_utf8 = 1;
  }
  if (token < 0) {
    ++c->final_calls;
  } else if (c->n_tokens < MAX_TOKENS) {
    c->tokens[c->n_tokens++] = token;
  }
  if (c->text_len + text_len < TEXT_CAP) {
    memcpy(c->text + c->text_len, text, (size_t)text_len);
    c->text_len += (size_t)text_len;
    c->text[c->text_len] = '\0';
  }
  if (c->abort_after > 0 && c->n_tokens == c->abort_after) *c->abort = 1;
  return c->stop_after > 0 && c->n_tokens >= c->stop_after ? 1 : 0;
}

/* A session progress callback that records its calls and stops at a given one. */
typedef struct {
  int calls;
  int stop_at;                  /* stop on this call (1-based; 0: never) */
  volatile int32_t* flag;       /* non-NULL: stop by setting *flag (returning 0) instead */
  float progress[1024];
} Poll;

static int32_t OnEvalProgress(void* user_data, float progress) {
  Poll* p = (Poll*)user_data;
  if (p->calls < 1024) p->progress[p->calls] = progress;
  ++p->calls;
  if (p->stop_at > 0 && p->calls == p->stop_at) {
    if (p->flag == NULL) return 1;
    *p->flag = 1;
  }
  return 0;
}

static kx_sampler* Greedy(void) {
  kx_sampler_params sp;
  kx_sampler* s = NULL;
  OK(kx_sampler_params_init(&sp, sizeof sp));
  sp.temperature = 0.0f;
  OK(kx_sampler_create(&sp, &s));
  return s;
}

static kx_session* NewSession(const kx_model* model, int32_t n_ctx) {
  kx_session_params p;
  kx_session* s = NULL;
  OK(kx_session_params_init(&p, sizeof p));
  p.n_ctx = n_ctx;
  p.n_threads = 2;
  OK(kx_session_create(model, &p, &s));
  return s;
}

static void Generate(kx_session* s, kx_sampler* smp, const char* prompt, int32_t max_tokens,
                     const char** stops, uint32_t n_stops, Collect* c, kx_generate_result* r) {
  kx_generate_params gp;
  OK(kx_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = max_tokens;
  gp.stop_strings = stops;
  gp.n_stop_strings = n_stops;
  gp.on_token = OnToken;
  gp.user_data = c;
  gp.abort_flag = c->abort;
  r->struct_size = sizeof *r;
  OK(kx_session_generate(s, smp, prompt, &gp, r));
}

/* ---- the tests */

static void TestVersion(void) {
  char expect[32];
  const uint32_t v = kx_version();
  snprintf(expect, sizeof expect, "%u.%u.%u", (unsigned)(v >> 16), (unsigned)((v >> 8) & 0xFF),
           (unsigned)(v & 0xFF));
  CHECK(strcmp(expect, kx_version_string()) == 0);
  CHECK(strcmp(kx_status_name(KX_STATUS_CONTEXT_FULL), "KX_STATUS_CONTEXT_FULL") == 0);
  CHECK(strcmp(kx_status_name((kx_status)999), "KX_STATUS_UNKNOWN") == 0);
}

static kx_model* TestLoad(const char* path) {
  kx_model_options* opts = NULL;
  kx_model* model = NULL;
  Progress prog;
  memset(&prog, 0, sizeof prog);
  OK(kx_model_options_create(&opts));
  OK(kx_model_options_set_threads(opts, 2));
  OK(kx_model_options_set_device(opts, "cpu"));
  OK(kx_model_options_set_sidecar_path(opts, "/nonexistent/sidecar"));
  OK(kx_model_options_set_budget(opts, KX_TIER_RAM, (uint64_t)1 << 30));
  OK(kx_model_options_set_mmap(opts, 1));
  /* Cancelled at the middle stage: no model comes out. */
  prog.cancel_at = 0.5f;
  OK(kx_model_options_set_progress_callback(opts, OnProgress, &prog));
  model = (kx_model*)&prog; /* poison: must stay untouched on failure */
  EXPECT_STATUS(KX_STATUS_CANCELLED, "cancelled", kx_model_load(path, opts, &model));
  CHECK(model == (kx_model*)&prog);
  CHECK(prog.n == 2 && prog.values[0] == 0.0f && prog.values[1] == 0.5f);
  /* Then a full load: 0, 0.5, 1 in order. */
  prog.n = 0;
  prog.cancel_at = 2.0f;
  model = NULL;
  OK(kx_model_load(path, opts, &model));
  CHECK(model != NULL);
  CHECK(prog.n == 3 && prog.values[0] == 0.0f && prog.values[2] == 1.0f);
  {
    /* The options' sidecar is the sessions' default: a missing one is an error there. */
    kx_session_params p;
    kx_session* s = NULL;
    OK(kx_session_params_init(&p, sizeof p));
    p.n_ctx = 64;
    EXPECT_STATUS(KX_STATUS_NOT_FOUND, "/nonexistent/sidecar", kx_session_create(model, &p, &s));
    CHECK(s == NULL);
    kx_model_free(model);
  }
  /* The sessions of the tests below run without a sidecar. */
  OK(kx_model_options_set_sidecar_path(opts, NULL));
  OK(kx_model_options_set_progress_callback(opts, NULL, NULL));
  model = NULL;
  OK(kx_model_load(path, opts, &model));
  kx_model_options_free(opts);
  return model;
}

static void TestInfo(const kx_model* model, int is_default) {
  kx_model_info info;
  kx_model_info partial;
  memset(&info, 0xA5, sizeof info);
  info.struct_size = sizeof info;
  OK(kx_model_get_info(model, &info));
  CHECK(info.struct_size == sizeof info);
  CHECK(strcmp(info.arch, "llama") == 0);
  CHECK(info.n_layer > 0 && info.n_embd > 0 && info.n_vocab > 0 && info.n_ctx_train > 0);
  CHECK(info.n_params > 0 && info.weight_bytes_per_token > 0);
  CHECK(info.chat_template != NULL && info.path != NULL);
  if (is_default) {
    CHECK(info.n_layer == 30 && info.n_embd == 576 && info.n_ff == 1536);
    CHECK(info.n_head == 9 && info.n_head_kv == 3 && info.n_vocab == 49152);
    CHECK(strcmp(info.chat_template_kind, "chatml") == 0);
    CHECK(strstr(info.chat_template, "im_start") != NULL);
  } else {
    CHECK(info.n_vocab == 256 && info.bos_token == 1 && info.eos_token == 2);
    CHECK(strcmp(info.chat_template_kind, "generic") == 0);
  }
  /* An older caller's smaller struct: nothing past its struct_size is written. */
  memset(&partial, 0x5A, sizeof partial);
  partial.struct_size = (uint32_t)offsetof(kx_model_info, n_ff);
  OK(kx_model_get_info(model, &partial));
  CHECK(partial.n_embd == info.n_embd);
  CHECK(partial.n_ff == (int32_t)0x5A5A5A5A);
  CHECK(partial.struct_size == offsetof(kx_model_info, n_ff));
  /* Every value chat_template_kind may take is one the header lists. */
  CHECK(strstr("|chatml|llama2|llama3|mistral|gemma|generic|", info.chat_template_kind) != NULL);
}

/* The output structs' _init: struct_size set, the rest zeroed, nothing past struct_size. */
static void TestOutputInit(const kx_model* model) {
  kx_model_info info;
  kx_stats st;
  kx_generate_result r;
  memset(&info, 0xA5, sizeof info);
  OK(kx_model_info_init(&info, sizeof info));
  CHECK(info.struct_size == sizeof info && info.n_layer == 0 && info.arch == NULL &&
        info.path == NULL);
  OK(kx_model_get_info(model, &info));
  CHECK(info.n_layer > 0);
  memset(&st, 0x5A, sizeof st);
  OK(kx_stats_init(&st, (uint32_t)offsetof(kx_stats, n_gen_tokens)));
  CHECK(st.struct_size == offsetof(kx_stats, n_gen_tokens));
  CHECK(st.n_threads == 0 && st.n_prompt_tokens == 0);
  CHECK(st.n_evals == 0x5A5A5A5A5A5A5A5AULL); /* past struct_size: untouched */
  memset(&r, 0x5A, sizeof r);
  OK(kx_generate_result_init(&r, sizeof r));
  CHECK(r.struct_size == sizeof r && r.n_tokens == 0 && r.n_prompt == 0 &&
        r.stop_reason == 0);
}

static void TestTokens(const kx_model* model) {
  const char* text = "Hello, world! Ünïcödé 123";
  int32_t tokens[64];
  char out[256];
  uint64_t n = 0, n2 = 0, len = 0;
  int i;
  OK(kx_tokenize(model, text, strlen(text), 0, NULL, 0, &n)); /* size query */
  CHECK(n > 0 && n < 64);
  for (i = 0; i < 64; ++i) tokens[i] = -7;
  EXPECT_STATUS(KX_STATUS_BUFFER_TOO_SMALL, "kx_tokenize",
                kx_tokenize(model, text, strlen(text), 0, tokens, n - 1, &n2));
  CHECK(n2 == n && tokens[0] == -7); /* required size out, buffer untouched */
  OK(kx_tokenize(model, text, strlen(text), 0, tokens, 64, &n2));
  CHECK(n2 == n && tokens[n] == -7);
  OK(kx_detokenize(model, tokens, n, 0, NULL, 0, &len));
  CHECK(len == strlen(text));
  memset(out, '#', sizeof out);
  EXPECT_STATUS(KX_STATUS_BUFFER_TOO_SMALL, "kx_detokenize",
                kx_detokenize(model, tokens, n, 0, out, len, &len)); /* no room for the NUL */
  CHECK(out[0] == '#');
  OK(kx_detokenize(model, tokens, n, 0, out, sizeof out, &len));
  CHECK(strcmp(out, text) == 0 && out[len + 1] == '#');
  tokens[0] = 1 << 30;
  EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "kx_detokenize",
                kx_detokenize(model, tokens, 1, 0, out, sizeof out, &len));
}

static void TestChatTemplate(const kx_model* model, int is_default) {
  kx_chat_message msgs[2];
  char buf[4096];
  uint64_t len = 0;
  msgs[0].role = "user";
  msgs[0].content = "Hi there";
  msgs[1].role = "assistant";
  msgs[1].content = "Hello!";
  OK(kx_model_apply_chat_template(model, msgs, 2, KX_CHAT_ADD_GENERATION_PROMPT, NULL, 0, &len));
  CHECK(len > 0 && len < sizeof buf);
  OK(kx_model_apply_chat_template(model, msgs, 2, KX_CHAT_ADD_GENERATION_PROMPT, buf, sizeof buf,
                                  &len));
  CHECK(strlen(buf) == len);
  CHECK(strstr(buf, "Hi there") != NULL && strstr(buf, "Hello!") != NULL);
  if (is_default) {
    CHECK(strstr(buf, "<|im_start|>system\n") == buf); /* the template's default system */
    CHECK(strstr(buf, "<|im_start|>user\nHi there<|im_end|>\n") != NULL);
    CHECK(strcmp(buf + len - strlen("<|im_start|>assistant\n"), "<|im_start|>assistant\n") == 0);
    OK(kx_model_apply_chat_template(model, msgs, 1, KX_CHAT_NO_DEFAULT_SYSTEM, buf, sizeof buf,
                                    &len));
    CHECK(strcmp(buf, "<|im_start|>user\nHi there<|im_end|>\n") == 0);
  }
}

static void TestEvalLogitsTruncate(const kx_model* model) {
  kx_session* s = NewSession(model, 64);
  const char* text = "The quick brown fox";
  int32_t tokens[64], extra[3] = {5, 6, 7}, got[64];
  const float* logits = NULL;
  float first[256]; /* a prefix of the logits, enough to compare */
  int32_t n_vocab = 0, n_past = -1, n_ctx = 0;
  uint64_t n = 0, n_got = 0;
  int i, same = 1;
  OK(kx_tokenize(model, text, strlen(text), KX_TOKENIZE_ADD_SPECIAL, tokens, 64, &n));
  EXPECT_STATUS(KX_STATUS_INVALID_STATE, "kx_session_get_logits",
                kx_session_get_logits(s, -1, &logits, &n_vocab));
  /* One token at a time, so the re-evaluation below runs the same kernels. */
  for (i = 0; i < (int)n; ++i) OK(kx_session_eval(s, &tokens[i], 1, 0));
  OK(kx_session_get_logits(s, -1, &logits, &n_vocab));
  CHECK(n_vocab > 0);
  for (i = 0; i < 256 && i < n_vocab; ++i) {
    first[i] = logits[i];
    CHECK(isfinite(logits[i]));
  }
  OK(kx_session_eval(s, extra, 3, KX_EVAL_ALL_LOGITS));
  OK(kx_session_get_logits(s, 2, &logits, &n_vocab));
  OK(kx_session_get_logits(s, 0, &logits, &n_vocab));
  EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "kx_session_get_logits",
                kx_session_get_logits(s, 3, &logits, &n_vocab));
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == (int32_t)n + 3);
  OK(kx_session_get_n_ctx(s, &n_ctx));
  CHECK(n_ctx == 64);
  OK(kx_session_get_tokens(s, got, 64, &n_got));
  CHECK(n_got == n + 3 && got[0] == tokens[0] && got[n + 2] == 7);
  /* Drop the extra tokens and the last prompt token, re-evaluate it: same logits. */
  OK(kx_session_truncate(s, (int32_t)n - 1));
  EXPECT_STATUS(KX_STATUS_INVALID_STATE, "kx_session_get_logits",
                kx_session_get_logits(s, -1, &logits, &n_vocab));
  EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "kx_session_truncate", kx_session_truncate(s, 1000));
  OK(kx_session_eval(s, &tokens[n - 1], 1, 0));
  OK(kx_session_get_logits(s, -1, &logits, &n_vocab));
  for (i = 0; i < 256 && i < n_vocab; ++i) same &= logits[i] == first[i];
  CHECK(same);
  /* A batch that would overflow the context changes nothing. */
  {
    int32_t many[64];
    for (i = 0; i < 64; ++i) many[i] = 3 + i;
    EXPECT_STATUS(KX_STATUS_CONTEXT_FULL, "kx_session_eval", kx_session_eval(s, many, 64, 0));
    OK(kx_session_get_n_past(s, &n_past));
    CHECK(n_past == (int32_t)n);
  }
  OK(kx_session_reset(s));
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == 0);
  /* Without KX_EVAL_ALL_LOGITS only the last row exists: -1 or n - 1, nothing else. */
  {
    const float* last = NULL;
    OK(kx_session_eval(s, extra, 3, 0));
    OK(kx_session_get_logits(s, -1, &last, &n_vocab));
    OK(kx_session_get_logits(s, 2, &logits, &n_vocab));
    CHECK(logits == last);
    EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "KX_EVAL_ALL_LOGITS",
                  kx_session_get_logits(s, 0, &logits, &n_vocab));
    EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "kx_session_get_logits",
                  kx_session_get_logits(s, 1, &logits, &n_vocab));
    EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "kx_session_get_logits",
                  kx_session_get_logits(s, -2, &logits, &n_vocab));
    /* A single token's row is both its first and its last. */
    OK(kx_session_eval(s, extra, 1, 0));
    OK(kx_session_get_logits(s, 0, &logits, &n_vocab));
  }
  kx_session_free(s);
}

/* Stopping evaluations: the progress callback is polled before each batch and between
 * layers; a stop leaves the session as it was (logits aside), and the same evaluation then
 * gives the same logits as one never stopped. Counted polls, no timing. */
static void TestAbortEval(const kx_model* model) {
  enum { kBatch = 8, kPrefix = 3, kPrompt = 20, kBatches = 3 /* 8 + 8 + 4 */ };
  kx_session_params p;
  kx_session* s = NULL;
  kx_model_info info;
  kx_generate_params gp;
  kx_generate_result r;
  kx_stats st;
  Poll* poll = (Poll*)calloc(1, sizeof(Poll));
  Collect* c = (Collect*)calloc(1, sizeof(Collect));
  int32_t prompt[kPrompt], got[64], n_past = 0, n_vocab = 0;
  float ref[256];
  const float* logits = NULL;
  volatile int32_t flag = 0;
  uint64_t n_got = 0, evals = 0;
  int i, n_layer, same = 1, increasing = 1;
  char saved_error[256];
  OK(kx_model_info_init(&info, sizeof info));
  OK(kx_model_get_info(model, &info));
  n_layer = info.n_layer;
  for (i = 0; i < kPrompt; ++i) prompt[i] = 3 + (i * 7) % (info.n_vocab - 3);
  OK(kx_session_params_init(&p, sizeof p));
  p.n_ctx = 128;
  p.n_batch = kBatch;
  p.n_threads = 2;
  OK(kx_session_create(model, &p, &s));
  OK(kx_session_eval(s, prompt, kPrefix, 0));

  /* Never stopped: one poll per layer of every batch, progress from 0 up, below 1. */
  OK(kx_session_set_progress_callback(s, OnEvalProgress, poll));
  OK(kx_session_eval(s, prompt, kPrompt, 0));
  CHECK(poll->calls == kBatches * n_layer);
  CHECK(poll->progress[0] == 0.0f);
  CHECK(fabsf(poll->progress[n_layer] - (float)kBatch / kPrompt) < 1e-6f); /* batch 2 starts */
  for (i = 1; i < poll->calls && i < 1024; ++i) {
    increasing &= poll->progress[i] > poll->progress[i - 1];
  }
  CHECK(increasing && poll->progress[poll->calls - 1] < 1.0f);
  OK(kx_session_get_logits(s, -1, &logits, &n_vocab));
  for (i = 0; i < 256 && i < n_vocab; ++i) ref[i] = logits[i];
  OK(kx_session_truncate(s, kPrefix));

  st.struct_size = sizeof st;
  OK(kx_session_get_stats(s, &st));
  evals = st.n_evals;
  /* Stopped between two layers of the second batch: CANCELLED at once (no poll after the
   * stop), the session as before the call, no logits. */
  memset(poll, 0, sizeof *poll);
  poll->stop_at = n_layer + 2;
  EXPECT_STATUS(KX_STATUS_CANCELLED, "kx_session_eval", kx_session_eval(s, prompt, kPrompt, 0));
  CHECK(poll->calls == n_layer + 2);
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == kPrefix);
  OK(kx_session_get_tokens(s, got, 64, &n_got));
  CHECK(n_got == kPrefix && memcmp(got, prompt, kPrefix * sizeof(int32_t)) == 0);
  EXPECT_STATUS(KX_STATUS_INVALID_STATE, "kx_session_get_logits",
                kx_session_get_logits(s, -1, &logits, &n_vocab));
  /* Stopped at the first poll: nothing evaluated. */
  memset(poll, 0, sizeof *poll);
  poll->stop_at = 1;
  EXPECT_STATUS(KX_STATUS_CANCELLED, "kx_session_eval", kx_session_eval(s, prompt, kPrompt, 0));
  CHECK(poll->calls == 1);
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == kPrefix);
  OK(kx_session_get_stats(s, &st));
  CHECK(st.n_evals == evals); /* stopped evaluations are not counted */
  /* The same evaluation, not stopped: the logits of the one never stopped, bit for bit. */
  memset(poll, 0, sizeof *poll);
  OK(kx_session_eval(s, prompt, kPrompt, 0));
  OK(kx_session_get_logits(s, -1, &logits, &n_vocab));
  for (i = 0; i < 256 && i < n_vocab; ++i) same &= logits[i] == ref[i];
  CHECK(same);
  OK(kx_session_truncate(s, kPrefix));

  /* kx_session_generate stopped by the callback while its prompt is evaluated: a normal
   * stop (KX_STOP_ABORTED), nothing streamed, the prompt not in the session, and the last
   * error left as it was. */
  EXPECT_STATUS(KX_STATUS_INVALID_ARGUMENT, "kx_session_truncate", kx_session_truncate(s, 999));
  snprintf(saved_error, sizeof saved_error, "%s", kx_last_error());
  OK(kx_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 4;
  gp.on_token = OnToken;
  gp.user_data = c;
  OK(kx_generate_result_init(&r, sizeof r));
  memset(poll, 0, sizeof *poll);
  poll->stop_at = n_layer + 1; /* the second batch's first poll */
  OK(kx_session_generate(s, NULL, "a prompt of more than eight tokens, by any count", &gp, &r));
  CHECK(r.stop_reason == KX_STOP_ABORTED && r.n_prompt == 0 && r.n_tokens == 0);
  CHECK(poll->calls == n_layer + 1 && c->n_calls == 0);
  CHECK(strcmp(kx_last_error(), saved_error) == 0);
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == kPrefix);
  /* The generate abort flag, set (as a signal handler would) between two layers of the
   * prompt, stops it at that poll; set before the call, it stops it before any work. */
  memset(poll, 0, sizeof *poll);
  poll->stop_at = 2;
  poll->flag = &flag;
  gp.abort_flag = &flag;
  OK(kx_session_generate(s, NULL, "a prompt of more than eight tokens, by any count", &gp, &r));
  CHECK(r.stop_reason == KX_STOP_ABORTED && r.n_prompt == 0 && poll->calls == 2);
  OK(kx_session_set_progress_callback(s, NULL, NULL));
  OK(kx_session_generate(s, NULL, "xyz", &gp, &r)); /* flag still set */
  CHECK(r.stop_reason == KX_STOP_ABORTED && r.n_prompt == 0 && c->n_calls == 0);
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == kPrefix);
  /* Not stopped: the prompt, then tokens (the callback polled once before each). */
  flag = 0;
  memset(poll, 0, sizeof *poll);
  OK(kx_session_set_progress_callback(s, OnEvalProgress, poll));
  OK(kx_session_generate(s, NULL, "xyz", &gp, &r));
  CHECK(r.n_prompt > 0 && r.n_tokens > 0 && poll->calls > r.n_tokens);
  /* A callback stop before a generated token: KX_STOP_ABORTED, the tokens so far kept. */
  memset(poll, 0, sizeof *poll);
  memset(c, 0, sizeof *c);
  poll->stop_at = 3; /* the prompt's polls are over (single token: 1), then tokens 1 and 2 */
  OK(kx_session_generate(s, NULL, "x", &gp, &r));
  CHECK(r.stop_reason == KX_STOP_ABORTED && r.n_prompt == 1 && r.n_tokens == 1);
  kx_session_free(s);
  free(poll);
  free(c);
}

/* Multi-turn chat as kairox.h documents it: re-render the conversation each turn, keep the
 * prefix the session holds, evaluate the rest, generate with no prompt. */
static void TestMultiTurn(const kx_model* model, int is_default) {
  kx_session* s = NewSession(model, 256);
  kx_sampler* greedy = Greedy();
  kx_chat_message msgs[4];
  kx_generate_params gp;
  kx_generate_result r;
  Collect* c = (Collect*)calloc(1, sizeof(Collect));
  char* text = (char*)malloc(TEXT_CAP);
  char answer[TEXT_CAP];
  int32_t* ids = (int32_t*)malloc(MAX_TOKENS * sizeof(int32_t));
  int32_t* held = (int32_t*)malloc(MAX_TOKENS * sizeof(int32_t));
  uint64_t len = 0, n_ids = 0, n_held = 0, keep = 0, n_first = 0;
  int32_t n_past = 0;
  int turn;
  const char* questions[2] = {"Hi there", "And then?"};
  size_t n_msgs = 0;
  OK(kx_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 6;
  gp.on_token = OnToken;
  gp.user_data = c;
  for (turn = 0; turn < 2; ++turn) {
    msgs[n_msgs].role = "user";
    msgs[n_msgs].content = questions[turn];
    ++n_msgs;
    OK(kx_model_apply_chat_template(model, msgs, n_msgs, KX_CHAT_ADD_GENERATION_PROMPT, text,
                                    TEXT_CAP, &len));
    OK(kx_tokenize(model, text, len, KX_TOKENIZE_ADD_SPECIAL | KX_TOKENIZE_PARSE_SPECIAL, ids,
                   MAX_TOKENS, &n_ids));
    OK(kx_session_get_tokens(s, held, MAX_TOKENS, &n_held));
    keep = 0;
    while (keep < n_held && keep + 1 < n_ids && held[keep] == ids[keep]) ++keep;
    if (turn == 0) {
      CHECK(keep == 0);
      n_first = n_ids;
    } else {
      CHECK(keep >= n_first); /* the first turn's prompt was not evaluated again */
      if (is_default) {       /* the template closed the answer itself */
        char closed[TEXT_CAP + 64];
        snprintf(closed, sizeof closed, "%s<|im_end|>\n<|im_start|>user\nAnd then?", answer);
        CHECK(strstr(text, closed) != NULL);
      }
    }
    OK(kx_session_truncate(s, (int32_t)keep));
    OK(kx_session_eval(s, ids + keep, n_ids - keep, 0));
    OK(kx_session_get_n_past(s, &n_past));
    CHECK((uint64_t)n_past == n_ids);
    memset(c, 0, sizeof *c);
    r.struct_size = sizeof r;
    OK(kx_session_generate(s, greedy, NULL, &gp, &r));
    CHECK(r.n_prompt == 0 && r.n_tokens > 0);
    snprintf(answer, sizeof answer, "%s", c->text);
    msgs[n_msgs].role = "assistant";
    msgs[n_msgs].content = answer;
    ++n_msgs;
  }
  kx_sampler_free(greedy);
  kx_session_free(s);
  free(c);
  free(text);
  free(ids);
  free(held);
}

static void TestSampler(const kx_model* model) {
  kx_session* s = NewSession(model, 64);
  kx_sampler* greedy = Greedy();
  kx_sampler *a = NULL, *b = NULL;
  kx_sampler_params sp;
  const float* logits = NULL;
  int32_t n_vocab = 0, tok = -1, best = 0, ta[8], tb[8];
  int32_t prompt[2] = {1, 40};
  int i, same = 1;
  OK(kx_session_eval(s, prompt, 2, 0));
  OK(kx_session_get_logits(s, -1, &logits, &n_vocab));
  for (i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  OK(kx_sampler_sample(greedy, s, &tok));
  CHECK(tok == best);
  OK(kx_sampler_params_init(&sp, sizeof sp));
  CHECK(sp.temperature > 0.0f && sp.top_k == 40);
  sp.temperature = 1.5f;
  sp.top_k = 0;
  sp.min_p = 0.0f;
  sp.seed = 7;
  OK(kx_sampler_create(&sp, &a));
  OK(kx_sampler_create(&sp, &b));
  for (i = 0; i < 8; ++i) {
    OK(kx_sampler_sample_logits(a, logits, n_vocab, prompt, 2, &ta[i]));
    OK(kx_sampler_sample_logits(b, logits, n_vocab, NULL, 0, &tb[i]));
    same &= ta[i] == tb[i];
    CHECK(ta[i] >= 0 && ta[i] < n_vocab);
  }
  CHECK(same); /* same seed, same draws (no repetition penalty configured) */
  OK(kx_sampler_reset(b, 7));
  OK(kx_sampler_sample_logits(b, logits, n_vocab, NULL, 0, &tok));
  CHECK(tok == ta[0]);
  kx_sampler_free(a);
  kx_sampler_free(b);
  kx_sampler_free(greedy);
  kx_session_free(s);
}

static void TestGenerate(const kx_model* model, int is_default) {
  const char* prompt = is_default ? "The capital of France is" : "abc";
  kx_session* s = NewSession(model, 256);
  kx_sampler* greedy = Greedy();
  kx_generate_result r;
  Collect* base = (Collect*)calloc(1, sizeof(Collect));
  Collect* c = (Collect*)calloc(1, sizeof(Collect));
  volatile int32_t abort_flag = 0;
  int32_t n_past = 0, manual[MAX_TOKENS];
  int i, same = 1;
  char stop[64];
  const char* stops[1];
  kx_stats st;

  /* Baseline: greedy, 24 tokens. */
  base->abort = &abort_flag;
  Generate(s, greedy, prompt, 24, NULL, 0, base, &r);
  CHECK(r.n_tokens == base->n_tokens && r.n_prompt > 0);
  CHECK(r.stop_reason == KX_STOP_MAX_TOKENS || r.stop_reason == KX_STOP_END_OF_GENERATION);
  CHECK(base->n_tokens >= 12); /* the rest of the test needs some text */
  CHECK(!base->bad_utf8);
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == r.n_prompt + r.n_tokens);

  /* The same with the public step API: tokenize, eval, sample, eval. */
  {
    int32_t ids[64];
    uint64_t n = 0;
    OK(kx_session_reset(s));
    OK(kx_tokenize(model, prompt, strlen(prompt),
                   KX_TOKENIZE_ADD_SPECIAL | KX_TOKENIZE_PARSE_SPECIAL, ids, 64, &n));
    CHECK((int32_t)n == r.n_prompt);
    OK(kx_session_eval(s, ids, n, 0));
    for (i = 0; i < base->n_tokens; ++i) {
      OK(kx_sampler_sample(greedy, s, &manual[i]));
      same &= manual[i] == base->tokens[i];
      OK(kx_session_eval(s, &manual[i], 1, 0));
    }
    CHECK(same);
  }
  if (is_default) {
    char text[TEXT_CAP];
    uint64_t len = 0;
    OK(kx_detokenize(model, base->tokens, (uint64_t)base->n_tokens, 0, text, sizeof text, &len));
    CHECK(strcmp(text, base->text) == 0); /* streamed pieces add up to the text */
    CHECK(strstr(base->text, "Paris") != NULL);
  }

  /* Stop string: a piece from the middle of the baseline text. */
  {
    size_t off = base->text_len / 2, end;
    while (off < base->text_len && (((unsigned char)base->text[off]) & 0xC0) == 0x80) ++off;
    end = off + 1;
    while (end < base->text_len && (((unsigned char)base->text[end]) & 0xC0) == 0x80) ++end;
    CHECK(end <= base->text_len && end - off < sizeof stop);
    memcpy(stop, base->text + off, end - off);
    stop[end - off] = '\0';
    stops[0] = stop;
    OK(kx_session_reset(s));
    memset(c, 0, sizeof *c);
    Generate(s, greedy, prompt, 24, stops, 1, c, &r);
    CHECK(r.stop_reason == KX_STOP_STRING);
    CHECK(strncmp(c->text, base->text, c->text_len) == 0);
    CHECK(c->text_len == (size_t)(strstr(base->text, stop) - base->text));
    CHECK(strstr(c->text, stop) == NULL);
    CHECK(!c->bad_utf8);
  }

  /* Callback stop after 3 tokens; the abort flag after 5; a pre-set abort flag. */
  OK(kx_session_reset(s));
  memset(c, 0, sizeof *c);
  c->stop_after = 3;
  Generate(s, greedy, prompt, 24, NULL, 0, c, &r);
  CHECK(r.stop_reason == KX_STOP_CALLBACK && r.n_tokens == 3 && c->n_tokens == 3);
  /* Continue where it stopped: the same tokens as the baseline follow. */
  memset(c, 0, sizeof *c);
  abort_flag = 0;
  c->abort = &abort_flag;
  c->abort_after = 5;
  Generate(s, greedy, NULL, 24, NULL, 0, c, &r);
  CHECK(r.stop_reason == KX_STOP_ABORTED && r.n_tokens == 5 && r.n_prompt == 0);
  CHECK(memcmp(c->tokens, base->tokens + 3, 5 * sizeof(int32_t)) == 0);
  memset(c, 0, sizeof *c);
  c->abort = &abort_flag; /* still set */
  Generate(s, greedy, NULL, 24, NULL, 0, c, &r);
  CHECK(r.stop_reason == KX_STOP_ABORTED && r.n_tokens == 0);
  abort_flag = 0;

  /* Continue after a truncate: generate re-evaluates the last kept token. */
  OK(kx_session_get_n_past(s, &n_past));
  OK(kx_session_truncate(s, n_past - 2));
  memset(c, 0, sizeof *c);
  Generate(s, greedy, NULL, 2, NULL, 0, c, &r);
  CHECK(r.n_tokens == 2 && memcmp(c->tokens, base->tokens + 6, 2 * sizeof(int32_t)) == 0);

  /* A context that fills: a normal stop; a prompt that does not fit: an error. */
  {
    kx_session* small = NewSession(model, 12);
    memset(c, 0, sizeof *c);
    Generate(small, greedy, prompt, -1, NULL, 0, c, &r);
    OK(kx_session_get_n_past(small, &n_past));
    CHECK(r.stop_reason == KX_STOP_CONTEXT_FULL || r.stop_reason == KX_STOP_END_OF_GENERATION);
    if (r.stop_reason == KX_STOP_CONTEXT_FULL) CHECK(n_past == 12);
    OK(kx_session_reset(small));
    EXPECT_STATUS(KX_STATUS_CONTEXT_FULL, "kx_session_generate",
                  kx_session_generate(small, NULL,
                                      "a prompt far too long for a context of twelve tokens, "
                                      "by any tokenizer's count of words and bytes",
                                      NULL, NULL));
    OK(kx_session_get_n_past(small, &n_past));
    CHECK(n_past == 0);
    kx_session_free(small);
  }

  /* Statistics. */
  st.struct_size = sizeof st;
  OK(kx_session_get_stats(s, &st));
  CHECK(st.n_prompt_tokens > 0 && st.n_gen_tokens > 0 && st.n_evals > 0);
  CHECK(st.prompt_tokens_per_second > 0.0 && st.gen_tokens_per_second > 0.0);
  CHECK(st.n_threads == 2);
  OK(kx_session_reset_stats(s));
  OK(kx_session_get_stats(s, &st));
  CHECK(st.n_prompt_tokens == 0 && st.gen_tokens_per_second == 0.0);

  kx_sampler_free(greedy);
  kx_session_free(s);
  free(base);
  free(c);
}

static void TestSharingAndLogs(const char* path) {
  kx_model* model = NULL;
  kx_session *a = NULL, *b = NULL;
  int32_t n_past = 0;
  OK(kx_set_log_callback(CountLog, NULL));
  OK(kx_set_log_level(KX_LOG_INFO));
  OK(kx_model_load(path, NULL, &model));
  a = NewSession(model, 32);
  CHECK(g_log_lines > 0);
  OK(kx_set_log_level(KX_LOG_WARN));
  OK(kx_set_log_callback(NULL, NULL));
  b = NewSession(model, 32);
  /* The model may go before its sessions: they keep the weights alive. */
  kx_model_free(model);
  OK(kx_session_generate(a, NULL, "xyz", NULL, NULL));
  OK(kx_session_generate(b, NULL, "xyz", NULL, NULL));
  OK(kx_session_get_n_past(a, &n_past));
  CHECK(n_past > 3);
  kx_session_free(a);
  kx_session_free(b);
}

int main(int argc, char** argv) {
  kx_model* model;
  int is_default;
  if (argc != 3) {
    fprintf(stderr, "usage: capi_api_test MODEL.gguf tiny|default\n");
    return 2;
  }
  is_default = strcmp(argv[2], "default") == 0;
  {
    FILE* f = fopen(argv[1], "rb");
    if (f == NULL) {
      fprintf(stderr, "SKIPPED: no model at '%s' (run cmake/fetch_model.sh)\n", argv[1]);
      return KX_TEST_SKIP_CODE;
    }
    fclose(f);
  }
  TestVersion();
  model = TestLoad(argv[1]);
  TestInfo(model, is_default);
  TestOutputInit(model);
  TestTokens(model);
  TestChatTemplate(model, is_default);
  TestEvalLogitsTruncate(model);
  TestSampler(model);
  TestGenerate(model, is_default);
  TestAbortEval(model);
  TestMultiTurn(model, is_default);
  kx_model_free(model);
  TestSharingAndLogs(argv[1]);
  return kx_test_finish("capi_api_test");
}
