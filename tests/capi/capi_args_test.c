/* Every C ABI function given NULL or invalid arguments, one at a time: an error status and
 * a message naming the function, never a crash. Then failure injection: missing, corrupt
 * and truncated files, an allocation that cannot succeed; the handles involved stay usable.
 *
 *   capi_args_test TINY.gguf HUGE_CTX_TINY.gguf SCRATCH_DIR
 */
#define _POSIX_C_SOURCE 200809L /* setrlimit */
#include <stdint.h>
#include <sys/resource.h>

#include "capi_test.h"

/* GCC defines __SANITIZE_ADDRESS__ under ASan; clang reports it through __has_feature. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KX_CLANG_ASAN 1
#endif
#endif
#ifndef KX_CLANG_ASAN
#define KX_CLANG_ASAN 0
#endif

#define INVALID KX_STATUS_INVALID_ARGUMENT

static void TestNullArguments(kx_model* model, kx_session* s, kx_sampler* smp) {
  kx_model_options* opts = NULL;
  kx_model* m = NULL;
  kx_session* s2 = NULL;
  kx_sampler* smp2 = NULL;
  kx_model_info info;
  kx_session_params sp;
  kx_sampler_params pp;
  kx_generate_params gp;
  kx_generate_result gr;
  kx_stats st;
  kx_chat_message msg, bad_msg;
  const float* logits = NULL;
  int32_t tok = 5, i32 = 0;
  uint64_t n = 0;
  char buf[64];
  float logit_row[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const char* null_stop[1] = {NULL};
  msg.role = "user";
  msg.content = "hi";
  bad_msg.role = NULL;
  bad_msg.content = "hi";
  info.struct_size = sizeof info;
  st.struct_size = sizeof st;

  EXPECT_STATUS(INVALID, "kx_set_log_level", kx_set_log_level((kx_log_level)42));

  EXPECT_STATUS(INVALID, "kx_model_options_create", kx_model_options_create(NULL));
  OK(kx_model_options_create(&opts));
  EXPECT_STATUS(INVALID, "kx_model_options_set_sidecar_path",
                kx_model_options_set_sidecar_path(NULL, "x"));
  EXPECT_STATUS(INVALID, "kx_model_options_set_threads", kx_model_options_set_threads(NULL, 1));
  EXPECT_STATUS(INVALID, "kx_model_options_set_threads", kx_model_options_set_threads(opts, -1));
  EXPECT_STATUS(INVALID, "kx_model_options_set_threads",
                kx_model_options_set_threads(opts, 1 << 20));
  EXPECT_STATUS(INVALID, "kx_model_options_set_device", kx_model_options_set_device(NULL, "cpu"));
  EXPECT_STATUS(INVALID, "kx_model_options_set_device", kx_model_options_set_device(opts, NULL));
  /* An unknown device is refused with the choices; cpu|cuda|sim|auto are accepted here (an
   * unusable cuda fails at kx_session_create). */
  EXPECT_STATUS(INVALID, "cpu, cuda, sim, auto", kx_model_options_set_device(opts, "cuda:0"));
  OK(kx_model_options_set_device(opts, "sim"));
  OK(kx_model_options_set_device(opts, "auto"));
  EXPECT_STATUS(INVALID, "kx_model_options_set_budget",
                kx_model_options_set_budget(NULL, KX_TIER_RAM, 1));
  EXPECT_STATUS(INVALID, "kx_model_options_set_budget",
                kx_model_options_set_budget(opts, (kx_tier)9, 1));
  EXPECT_STATUS(INVALID, "kx_model_options_set_mmap", kx_model_options_set_mmap(NULL, 1));
  OK(kx_model_options_set_mmap(opts, 0)); /* read into memory: supported */
  OK(kx_model_options_set_mmap(opts, 1));
  EXPECT_STATUS(INVALID, "kx_model_options_set_progress_callback",
                kx_model_options_set_progress_callback(NULL, NULL, NULL));
  kx_model_options_free(opts);

  EXPECT_STATUS(INVALID, "kx_model_load", kx_model_load(NULL, NULL, &m));
  EXPECT_STATUS(INVALID, "kx_model_load", kx_model_load("x.gguf", NULL, NULL));
  EXPECT_STATUS(INVALID, "kx_model_get_info", kx_model_get_info(NULL, &info));
  EXPECT_STATUS(INVALID, "kx_model_get_info", kx_model_get_info(model, NULL));
  info.struct_size = 0; /* uninitialised */
  EXPECT_STATUS(INVALID, "kx_model_get_info", kx_model_get_info(model, &info));
  EXPECT_STATUS(INVALID, "kx_model_info_init", kx_model_info_init(NULL, sizeof info));
  EXPECT_STATUS(INVALID, "kx_model_info_init", kx_model_info_init(&info, 4));
  EXPECT_STATUS(INVALID, "kx_stats_init", kx_stats_init(NULL, sizeof st));
  EXPECT_STATUS(INVALID, "kx_stats_init", kx_stats_init(&st, 1u << 30));
  EXPECT_STATUS(INVALID, "kx_generate_result_init", kx_generate_result_init(NULL, sizeof gr));
  EXPECT_STATUS(INVALID, "kx_generate_result_init", kx_generate_result_init(&gr, 0));

  EXPECT_STATUS(INVALID, "kx_tokenize", kx_tokenize(NULL, "a", 1, 0, NULL, 0, &n));
  EXPECT_STATUS(INVALID, "kx_tokenize", kx_tokenize(model, NULL, 1, 0, NULL, 0, &n));
  EXPECT_STATUS(INVALID, "kx_tokenize", kx_tokenize(model, "a", 1, 0, NULL, 4, &n));
  EXPECT_STATUS(INVALID, "kx_tokenize", kx_tokenize(model, "a", 1, 0, NULL, 0, NULL));
  EXPECT_STATUS(INVALID, "kx_tokenize", kx_tokenize(model, "a", 1, 0x100, NULL, 0, &n));
  EXPECT_STATUS(INVALID, "kx_detokenize", kx_detokenize(NULL, &tok, 1, 0, buf, 64, &n));
  EXPECT_STATUS(INVALID, "kx_detokenize", kx_detokenize(model, NULL, 1, 0, buf, 64, &n));
  EXPECT_STATUS(INVALID, "kx_detokenize", kx_detokenize(model, &tok, 1, 0, NULL, 64, &n));
  EXPECT_STATUS(INVALID, "kx_detokenize", kx_detokenize(model, &tok, 1, 0, buf, 64, NULL));
  EXPECT_STATUS(INVALID, "kx_detokenize", kx_detokenize(model, &tok, 1, 0x100, buf, 64, &n));
  i32 = -1;
  EXPECT_STATUS(INVALID, "kx_detokenize", kx_detokenize(model, &i32, 1, 0, buf, 64, &n));
  EXPECT_STATUS(INVALID, "kx_model_is_end_of_generation",
                kx_model_is_end_of_generation(NULL, 0, &i32));
  EXPECT_STATUS(INVALID, "kx_model_is_end_of_generation",
                kx_model_is_end_of_generation(model, 0, NULL));
  EXPECT_STATUS(INVALID, "kx_model_apply_chat_template",
                kx_model_apply_chat_template(NULL, &msg, 1, 0, buf, 64, &n));
  EXPECT_STATUS(INVALID, "kx_model_apply_chat_template",
                kx_model_apply_chat_template(model, NULL, 1, 0, buf, 64, &n));
  EXPECT_STATUS(INVALID, "kx_model_apply_chat_template",
                kx_model_apply_chat_template(model, &msg, 1, 0, NULL, 64, &n));
  EXPECT_STATUS(INVALID, "kx_model_apply_chat_template",
                kx_model_apply_chat_template(model, &msg, 1, 0, buf, 64, NULL));
  EXPECT_STATUS(INVALID, "kx_model_apply_chat_template",
                kx_model_apply_chat_template(model, &bad_msg, 1, 0, buf, 64, &n));
  EXPECT_STATUS(INVALID, "kx_model_apply_chat_template",
                kx_model_apply_chat_template(model, &msg, 1, 0x100, buf, 64, &n));

  EXPECT_STATUS(INVALID, "kx_session_params_init", kx_session_params_init(NULL, sizeof sp));
  EXPECT_STATUS(INVALID, "kx_session_params_init", kx_session_params_init(&sp, 0));
  OK(kx_session_params_init(&sp, sizeof sp));
  EXPECT_STATUS(INVALID, "kx_session_create", kx_session_create(NULL, &sp, &s2));
  EXPECT_STATUS(INVALID, "kx_session_create", kx_session_create(model, &sp, NULL));
  sp.n_ctx = -5;
  EXPECT_STATUS(INVALID, "kx_session_create", kx_session_create(model, &sp, &s2));
  sp.n_ctx = 1 << 20; /* more than the model was trained for */
  EXPECT_STATUS(INVALID, "kx_session_create", kx_session_create(model, &sp, &s2));
  sp.n_ctx = 0;
  sp.n_threads = -1;
  EXPECT_STATUS(INVALID, "kx_session_create", kx_session_create(model, &sp, &s2));
  sp.n_threads = 0;
  sp.struct_size = 1u << 30;
  EXPECT_STATUS(INVALID, "kx_session_create", kx_session_create(model, &sp, &s2));
  CHECK(s2 == NULL);

  EXPECT_STATUS(INVALID, "kx_session_set_progress_callback",
                kx_session_set_progress_callback(NULL, NULL, NULL));
  EXPECT_STATUS(INVALID, "kx_session_eval", kx_session_eval(NULL, &tok, 1, 0));
  EXPECT_STATUS(INVALID, "kx_session_eval", kx_session_eval(s, NULL, 1, 0));
  EXPECT_STATUS(INVALID, "kx_session_eval", kx_session_eval(s, &tok, 0, 0));
  EXPECT_STATUS(INVALID, "kx_session_eval", kx_session_eval(s, &tok, 1, 0x100));
  i32 = 1 << 30;
  EXPECT_STATUS(INVALID, "kx_session_eval", kx_session_eval(s, &i32, 1, 0));
  EXPECT_STATUS(INVALID, "kx_session_get_logits", kx_session_get_logits(NULL, -1, &logits, &i32));
  EXPECT_STATUS(INVALID, "kx_session_get_logits", kx_session_get_logits(s, -1, NULL, &i32));
  EXPECT_STATUS(INVALID, "kx_session_get_logits", kx_session_get_logits(s, -1, &logits, NULL));
  EXPECT_STATUS(INVALID, "kx_session_get_n_past", kx_session_get_n_past(NULL, &i32));
  EXPECT_STATUS(INVALID, "kx_session_get_n_past", kx_session_get_n_past(s, NULL));
  EXPECT_STATUS(INVALID, "kx_session_get_n_ctx", kx_session_get_n_ctx(NULL, &i32));
  EXPECT_STATUS(INVALID, "kx_session_get_n_ctx", kx_session_get_n_ctx(s, NULL));
  EXPECT_STATUS(INVALID, "kx_session_get_tokens", kx_session_get_tokens(NULL, NULL, 0, &n));
  EXPECT_STATUS(INVALID, "kx_session_get_tokens", kx_session_get_tokens(s, NULL, 4, &n));
  EXPECT_STATUS(INVALID, "kx_session_get_tokens", kx_session_get_tokens(s, NULL, 0, NULL));
  EXPECT_STATUS(INVALID, "kx_session_truncate", kx_session_truncate(NULL, 0));
  EXPECT_STATUS(INVALID, "kx_session_truncate", kx_session_truncate(s, -1));
  EXPECT_STATUS(INVALID, "kx_session_reset", kx_session_reset(NULL));
  EXPECT_STATUS(INVALID, "kx_session_get_stats", kx_session_get_stats(NULL, &st));
  EXPECT_STATUS(INVALID, "kx_session_get_stats", kx_session_get_stats(s, NULL));
  st.struct_size = 3;
  EXPECT_STATUS(INVALID, "kx_session_get_stats", kx_session_get_stats(s, &st));
  EXPECT_STATUS(INVALID, "kx_session_reset_stats", kx_session_reset_stats(NULL));

  EXPECT_STATUS(INVALID, "kx_sampler_params_init", kx_sampler_params_init(NULL, sizeof pp));
  EXPECT_STATUS(INVALID, "kx_sampler_params_init", kx_sampler_params_init(&pp, 2));
  OK(kx_sampler_params_init(&pp, sizeof pp));
  EXPECT_STATUS(INVALID, "kx_sampler_create", kx_sampler_create(&pp, NULL));
  pp.temperature = 1.0f / 0.0f;
  EXPECT_STATUS(INVALID, "kx_sampler_create", kx_sampler_create(&pp, &smp2));
  CHECK(smp2 == NULL);
  /* Out of range, not only non-finite: min_p > 1 once overflowed the sampler's candidates. */
  OK(kx_sampler_params_init(&pp, sizeof pp));
  pp.min_p = 2.0f;
  EXPECT_STATUS(INVALID, "min_p", kx_sampler_create(&pp, &smp2));
  CHECK(smp2 == NULL);
  OK(kx_sampler_params_init(&pp, sizeof pp));
  pp.repeat_penalty = 0.0f;
  EXPECT_STATUS(INVALID, "repeat_penalty", kx_sampler_create(&pp, &smp2));
  CHECK(smp2 == NULL);
  OK(kx_sampler_params_init(&pp, sizeof pp));
  pp.top_p = 1.5f;
  EXPECT_STATUS(INVALID, "top_p", kx_sampler_create(&pp, &smp2));
  CHECK(smp2 == NULL);
  EXPECT_STATUS(INVALID, "kx_sampler_reset", kx_sampler_reset(NULL, 1));
  EXPECT_STATUS(INVALID, "kx_sampler_sample_logits",
                kx_sampler_sample_logits(NULL, logit_row, 4, NULL, 0, &i32));
  EXPECT_STATUS(INVALID, "kx_sampler_sample_logits",
                kx_sampler_sample_logits(smp, NULL, 4, NULL, 0, &i32));
  EXPECT_STATUS(INVALID, "kx_sampler_sample_logits",
                kx_sampler_sample_logits(smp, logit_row, 0, NULL, 0, &i32));
  EXPECT_STATUS(INVALID, "kx_sampler_sample_logits",
                kx_sampler_sample_logits(smp, logit_row, 4, NULL, 3, &i32));
  EXPECT_STATUS(INVALID, "kx_sampler_sample_logits",
                kx_sampler_sample_logits(smp, logit_row, 4, NULL, 0, NULL));
  EXPECT_STATUS(INVALID, "kx_sampler_sample", kx_sampler_sample(NULL, s, &i32));
  EXPECT_STATUS(INVALID, "kx_sampler_sample", kx_sampler_sample(smp, NULL, &i32));
  EXPECT_STATUS(INVALID, "kx_sampler_sample", kx_sampler_sample(smp, s, NULL));
  OK(kx_session_reset(s));
  EXPECT_STATUS(KX_STATUS_INVALID_STATE, "kx_sampler_sample", kx_sampler_sample(smp, s, &i32));

  EXPECT_STATUS(INVALID, "kx_generate_params_init", kx_generate_params_init(NULL, sizeof gp));
  EXPECT_STATUS(INVALID, "kx_generate_params_init", kx_generate_params_init(&gp, 0));
  OK(kx_generate_params_init(&gp, sizeof gp));
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(NULL, NULL, "a", &gp, NULL));
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, NULL, &gp, NULL));
  gp.max_tokens = -2;
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, "a", &gp, NULL));
  gp.max_tokens = 4;
  gp.n_stop_strings = 1;
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, "a", &gp, NULL));
  gp.stop_strings = null_stop;
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, "a", &gp, NULL));
  gp.n_stop_strings = 0;
  gp.flags = 8;
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, "a", &gp, NULL));
  gp.flags = 0;
  gr.struct_size = 0;
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, "a", &gp, &gr));
  gp.struct_size = 0;
  EXPECT_STATUS(INVALID, "kx_session_generate", kx_session_generate(s, NULL, "a", &gp, NULL));

  /* free(NULL) is a no-op for every object. */
  kx_model_options_free(NULL);
  kx_model_free(NULL);
  kx_session_free(NULL);
  kx_sampler_free(NULL);
}

/* The process's virtual size (VmSize in /proc/self/status), 0 if unknown. */
static unsigned long long VmSizeBytes(void) {
  char line[256];
  unsigned long long kb = 0;
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmSize:", 7) == 0) kb = strtoull(line + 7, NULL, 10);
  }
  fclose(f);
  return kb * 1024ull;
}

static long FileSize(const char* path) {
  FILE* f = fopen(path, "rb");
  long n;
  if (f == NULL) return -1;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fclose(f);
  return n;
}

/* Writes the first `n` bytes of `src` to `dst`, with byte `flip_at` (if >= 0) inverted. */
static void WriteVariant(const char* src, const char* dst, long n, long flip_at) {
  FILE* in = fopen(src, "rb");
  FILE* out = fopen(dst, "wb");
  long i;
  if (in == NULL || out == NULL) {
    fprintf(stderr, "cannot copy %s to %s\n", src, dst);
    exit(1);
  }
  for (i = 0; i < n; ++i) {
    int c = fgetc(in);
    if (c == EOF) break;
    if (i == flip_at) c ^= 0xFF;
    fputc(c, out);
  }
  fclose(in);
  fclose(out);
}

static void TestFailureInjection(const char* tiny, const char* huge, const char* dir,
                                 kx_model* model, kx_session* s) {
  char path[1024];
  const long size = FileSize(tiny);
  const long cuts[] = {0, 3, 8, 16, 24, 100, 1000, size / 2, size - 1};
  const long flips[] = {0, 1, 2, 3, 4, 8, 9, 16, 17};
  kx_model* m = NULL;
  kx_session* big = NULL;
  kx_session_params sp;
  size_t i;
  uint64_t n = 0;
  int32_t ids[16];

  EXPECT_STATUS(KX_STATUS_NOT_FOUND, "no model file",
                kx_model_load("/nonexistent/model.gguf", NULL, &m));
  CHECK(size > 1000);
  snprintf(path, sizeof path, "%s/variant.gguf", dir);
  for (i = 0; i < sizeof cuts / sizeof cuts[0]; ++i) {
    WriteVariant(tiny, path, cuts[i], -1);
    m = NULL;
    EXPECT_STATUS(KX_STATUS_INVALID_MODEL, "kx_model_load", kx_model_load(path, NULL, &m));
    CHECK(m == NULL);
  }
  /* Flipped magic, version or counts: refused with a message, never a crash. */
  for (i = 0; i < sizeof flips / sizeof flips[0]; ++i) {
    kx_status st;
    WriteVariant(tiny, path, size, flips[i]);
    m = NULL;
    st = kx_model_load(path, NULL, &m);
    CHECK(st == KX_STATUS_INVALID_MODEL || st == KX_STATUS_OUT_OF_MEMORY);
    CHECK(m == NULL && kx_last_error()[0] != '\0');
  }
  /* A directory is not a model. */
  m = NULL;
  CHECK(kx_model_load(dir, NULL, &m) != KX_STATUS_OK && m == NULL);

  /* An allocation that cannot succeed: a KV cache of 2^24 tokens (2 GiB per cache) under an
   * address-space limit of what the process uses now plus 1 GiB. */
  OK(kx_model_load(huge, NULL, &m));
  OK(kx_session_params_init(&sp, sizeof sp));
  sp.n_ctx = 1 << 24;
  sp.n_threads = 1;
#if defined(__SANITIZE_ADDRESS__) || KX_CLANG_ASAN
  /* ASan's operator new aborts on failure instead of throwing std::bad_alloc. */
  fprintf(stderr, "note: the out-of-memory case is not run under AddressSanitizer\n");
  (void)VmSizeBytes;
#else
  {
    struct rlimit old_limit = {0, 0}, limit;
    const unsigned long long vm = VmSizeBytes();
    CHECK(vm > 0 && getrlimit(RLIMIT_AS, &old_limit) == 0);
    limit = old_limit;
    limit.rlim_cur = (rlim_t)(vm + (1ull << 30));
    CHECK(setrlimit(RLIMIT_AS, &limit) == 0);
    EXPECT_STATUS(KX_STATUS_OUT_OF_MEMORY, "kx_session_create", kx_session_create(m, &sp, &big));
    CHECK(setrlimit(RLIMIT_AS, &old_limit) == 0);
  }
#endif
  CHECK(big == NULL);
  sp.n_ctx = 32; /* the model is still usable */
  OK(kx_session_create(m, &sp, &big));
  OK(kx_session_generate(big, NULL, "ok", NULL, NULL));
  kx_session_free(big);
  kx_model_free(m);

  /* After all that, the handles made at the start still work. */
  OK(kx_tokenize(model, "still fine", 10, 0, ids, 16, &n));
  OK(kx_session_eval(s, ids, n, 0));
}

int main(int argc, char** argv) {
  kx_model* model = NULL;
  kx_session* s = NULL;
  kx_sampler* smp = NULL;
  int32_t prompt[3] = {1, 20, 30};
  if (argc != 4) {
    fprintf(stderr, "usage: capi_args_test TINY.gguf HUGE_CTX_TINY.gguf SCRATCH_DIR\n");
    return 2;
  }
  OK(kx_set_log_level(KX_LOG_OFF)); /* the corrupt files would log warnings */
  OK(kx_model_load(argv[1], NULL, &model));
  OK(kx_session_create(model, NULL, &s));
  OK(kx_sampler_create(NULL, &smp));
  OK(kx_session_eval(s, prompt, 3, 0));
  TestNullArguments(model, s, smp);
  TestFailureInjection(argv[1], argv[2], argv[3], model, s);
  kx_sampler_free(smp);
  kx_session_free(s);
  kx_model_free(model);
  return kx_test_finish("capi_args_test");
}
