/* One session, two callers: a call on a session while another call on it runs — from one of
 * the session's own callbacks, or from another thread — returns KX_STATUS_BUSY and leaves the
 * running call undisturbed; kx_session_free during a call is deferred until it returns.
 * Deterministic: the second thread is held inside its call by a gate in the progress
 * callback while the main thread calls.
 *
 *   capi_busy_test MODEL.gguf
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>

#include "capi_test.h"

static kx_session* NewSession(const kx_model* model) {
  kx_session_params p;
  kx_session* s = NULL;
  OK(kx_session_params_init(&p, sizeof p));
  p.n_ctx = 64;
  p.n_threads = 1;
  OK(kx_session_create(model, &p, &s));
  return s;
}

/* ---- calls from inside the session's own callbacks */

typedef struct {
  kx_session* session;
  kx_sampler* sampler;
  int calls;
  kx_status eval, n_past, truncate, sample, logits, set_callback, generate, reset;
} Reentry;

static int32_t ReenterFromProgress(void* user_data, float progress) {
  Reentry* r = (Reentry*)user_data;
  int32_t token = 1;
  int32_t n_past = 0;
  const float* logits = NULL;
  int32_t n_vocab = 0;
  (void)progress;
  if (r->calls++ > 0) return 0;
  r->eval = kx_session_eval(r->session, &token, 1, 0);
  CHECK(strstr(kx_last_error(), "kx_session_eval") != NULL);
  CHECK(strstr(kx_last_error(), "busy") != NULL);
  r->n_past = kx_session_get_n_past(r->session, &n_past);
  r->truncate = kx_session_truncate(r->session, 0);
  r->sample = kx_sampler_sample(r->sampler, r->session, &token);
  r->logits = kx_session_get_logits(r->session, -1, &logits, &n_vocab);
  r->set_callback = kx_session_set_progress_callback(r->session, NULL, NULL);
  return 0;
}

static int32_t ReenterFromToken(void* user_data, int32_t token, const char* text,
                                uint64_t text_len) {
  Reentry* r = (Reentry*)user_data;
  (void)token;
  (void)text;
  (void)text_len;
  if (r->calls++ > 0) return 0;
  r->generate = kx_session_generate(r->session, NULL, "again", NULL, NULL);
  r->reset = kx_session_reset(r->session);
  return 0;
}

static void TestReentrantCallbacks(const kx_model* model) {
  const int32_t prompt[4] = {1, 2, 3, 4};
  kx_sampler* smp = NULL;
  kx_session* s = NewSession(model);
  Reentry r;
  int32_t n_past = 0;
  memset(&r, 0, sizeof r);
  r.session = s;
  OK(kx_sampler_create(NULL, &smp));
  r.sampler = smp;

  /* The progress callback calls back into its own session: each call is refused. */
  OK(kx_session_set_progress_callback(s, ReenterFromProgress, &r));
  OK(kx_session_eval(s, prompt, 4, 0));
  CHECK(r.calls > 0);
  CHECK(r.eval == KX_STATUS_BUSY);
  CHECK(r.n_past == KX_STATUS_BUSY);
  CHECK(r.truncate == KX_STATUS_BUSY);
  CHECK(r.sample == KX_STATUS_BUSY);
  CHECK(r.logits == KX_STATUS_BUSY);
  CHECK(r.set_callback == KX_STATUS_BUSY);
  OK(kx_session_get_n_past(s, &n_past));
  CHECK(n_past == 4); /* the outer evaluation alone, nothing of the refused ones */
  OK(kx_session_set_progress_callback(s, NULL, NULL));

  /* The token callback of a generation calls back in: refused, the generation goes on. */
  {
    kx_generate_params gp;
    kx_generate_result res;
    OK(kx_generate_params_init(&gp, sizeof gp));
    OK(kx_generate_result_init(&res, sizeof res));
    gp.max_tokens = 3;
    gp.on_token = ReenterFromToken;
    gp.user_data = &r;
    r.calls = 0;
    OK(kx_session_generate(s, smp, NULL, &gp, &res));
    CHECK(r.calls > 0);
    CHECK(r.generate == KX_STATUS_BUSY);
    CHECK(r.reset == KX_STATUS_BUSY);
    OK(kx_session_get_n_past(s, &n_past));
    CHECK(n_past == 4 + res.n_tokens);
  }
  kx_sampler_free(smp);
  kx_session_free(s);
}

/* kx_session_free from the session's own token callback: the generation finishes its
 * current call and the session is freed when kx_session_generate returns. */
static int32_t FreeFromToken(void* user_data, int32_t token, const char* text,
                             uint64_t text_len) {
  kx_session** s = (kx_session**)user_data;
  (void)token;
  (void)text;
  (void)text_len;
  if (*s != NULL) {
    kx_session_free(*s);
    kx_session_free(*s); /* a second free during the same call is ignored */
    *s = NULL;
  }
  return 1; /* stop */
}

static void TestFreeFromCallback(const kx_model* model) {
  kx_session* s = NewSession(model);
  kx_session* handle = s;
  kx_generate_params gp;
  kx_generate_result res;
  OK(kx_generate_params_init(&gp, sizeof gp));
  OK(kx_generate_result_init(&res, sizeof res));
  gp.max_tokens = 8;
  gp.on_token = FreeFromToken;
  gp.user_data = &s;
  OK(kx_session_generate(handle, NULL, "hello", &gp, &res));
  CHECK(s == NULL);
  CHECK(res.stop_reason == KX_STOP_CALLBACK);
  CHECK(res.n_tokens == 1);
}

/* ---- a second thread */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int entered; /* the worker is inside its evaluation */
  int release; /* the main thread lets it finish */
  kx_session* session;
  kx_status status;
} Gate;

static int32_t HoldInProgress(void* user_data, float progress) {
  Gate* g = (Gate*)user_data;
  (void)progress;
  pthread_mutex_lock(&g->mu);
  g->entered = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->release) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return 0;
}

static void* EvalWorker(void* arg) {
  Gate* g = (Gate*)arg;
  const int32_t prompt[3] = {5, 6, 7};
  g->status = kx_session_eval(g->session, prompt, 3, 0);
  return NULL;
}

static void StartHeld(Gate* g, pthread_t* thread) {
  g->entered = 0;
  g->release = 0;
  OK(kx_session_set_progress_callback(g->session, HoldInProgress, g));
  CHECK(pthread_create(thread, NULL, EvalWorker, g) == 0);
  pthread_mutex_lock(&g->mu);
  while (!g->entered) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void Release(Gate* g, pthread_t thread) {
  pthread_mutex_lock(&g->mu);
  g->release = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  CHECK(pthread_join(thread, NULL) == 0);
}

static void TestTwoThreads(const kx_model* model) {
  Gate g;
  pthread_t thread;
  const int32_t token = 9;
  int32_t n_past = -1;
  uint64_t n_tokens = 0;
  kx_stats stats;
  memset(&g, 0, sizeof g);
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  g.session = NewSession(model);

  /* While the worker is inside kx_session_eval, every call from here is BUSY. */
  StartHeld(&g, &thread);
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_eval", kx_session_eval(g.session, &token, 1, 0));
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_generate",
                kx_session_generate(g.session, NULL, "hi", NULL, NULL));
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_get_n_past", kx_session_get_n_past(g.session, &n_past));
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_get_tokens",
                kx_session_get_tokens(g.session, NULL, 0, &n_tokens));
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_reset", kx_session_reset(g.session));
  OK(kx_stats_init(&stats, sizeof stats));
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_get_stats", kx_session_get_stats(g.session, &stats));
  EXPECT_STATUS(KX_STATUS_BUSY, "kx_session_reset_stats", kx_session_reset_stats(g.session));
  CHECK(n_past == -1 && n_tokens == 0); /* outputs untouched */
  CHECK(strcmp(kx_status_name(KX_STATUS_BUSY), "KX_STATUS_BUSY") == 0);
  Release(&g, thread);
  CHECK(g.status == KX_STATUS_OK);

  /* Free again: the worker's evaluation was not disturbed, and the session is usable. */
  OK(kx_session_set_progress_callback(g.session, NULL, NULL));
  OK(kx_session_get_n_past(g.session, &n_past));
  CHECK(n_past == 3);
  OK(kx_session_eval(g.session, &token, 1, 0));
  OK(kx_session_get_n_past(g.session, &n_past));
  CHECK(n_past == 4);

  /* kx_session_free from here while the worker is inside: deferred to the worker's return. */
  OK(kx_session_reset(g.session));
  StartHeld(&g, &thread);
  kx_session_free(g.session);
  Release(&g, thread);
  CHECK(g.status == KX_STATUS_OK);

  pthread_cond_destroy(&g.cv);
  pthread_mutex_destroy(&g.mu);
}

int main(int argc, char** argv) {
  kx_model* model = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: capi_busy_test MODEL.gguf\n");
    return 2;
  }
  OK(kx_model_load(argv[1], NULL, &model));
  TestReentrantCallbacks(model);
  TestFreeFromCallback(model);
  TestTwoThreads(model);
  kx_model_free(model);
  return kx_test_finish("capi_busy_test");
}
