/* simple.c: generate text with kairox from C, through the stable C ABI.
 *
 *   simple [MODEL.gguf] ["prompt"]
 *
 * Loads the model, formats the prompt as one user turn of the model's chat
 * template, and streams a greedy answer to stdout. Errors go to stderr with
 * kairox's message and a non-zero exit. Model default: $KAIROX_MODEL, else
 * ~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf (cmake/fetch_model.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kairox/kairox.h>

#define CHECK_KX(call)                                                        \
  do {                                                                        \
    kx_status st_ = (call);                                                   \
    if (st_ != KX_STATUS_OK) {                                                \
      fprintf(stderr, "simple: %s: %s\n", kx_status_name(st_), kx_last_error()); \
      goto done;                                                              \
    }                                                                         \
  } while (0)

/* Prints each piece as it arrives: whole UTF-8 characters only. */
static int32_t PrintPiece(void* user_data, int32_t token, const char* text, uint64_t len) {
  (void)user_data;
  (void)token;
  fwrite(text, 1, (size_t)len, stdout);
  fflush(stdout);
  return 0; /* non-zero would stop the generation */
}

int main(int argc, char** argv) {
  char default_path[1024];
  const char* path = argc > 1 ? argv[1] : getenv("KAIROX_MODEL");
  const char* question = argc > 2 ? argv[2] : "What is the capital of France?";
  kx_model* model = NULL;
  kx_session* session = NULL;
  kx_sampler* sampler = NULL;
  kx_model_info info;
  kx_session_params sp;
  kx_sampler_params smp;
  kx_generate_params gp;
  kx_generate_result result;
  kx_stats stats;
  kx_chat_message turn;
  char* prompt = NULL;
  uint64_t prompt_len = 0;
  int rc = 1;

  if (path == NULL || path[0] == '\0') {
    snprintf(default_path, sizeof default_path,
             "%s/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf",
             getenv("HOME") ? getenv("HOME") : ".");
    path = default_path;
  }
  printf("kairox %s, model %s\n", kx_version_string(), path);
  CHECK_KX(kx_model_load(path, NULL, &model));
  info.struct_size = sizeof info;
  CHECK_KX(kx_model_get_info(model, &info));
  printf("%s: %d layers, %d vocab, %s chat template\n", info.arch, info.n_layer, info.n_vocab,
         info.chat_template_kind);

  /* The conversation → prompt text, with buffer-size negotiation. */
  turn.role = "user";
  turn.content = question;
  CHECK_KX(kx_model_apply_chat_template(model, &turn, 1, KX_CHAT_ADD_GENERATION_PROMPT, NULL, 0,
                                        &prompt_len));
  prompt = (char*)malloc((size_t)prompt_len + 1);
  if (prompt == NULL) goto done;
  CHECK_KX(kx_model_apply_chat_template(model, &turn, 1, KX_CHAT_ADD_GENERATION_PROMPT, prompt,
                                        prompt_len + 1, &prompt_len));

  CHECK_KX(kx_session_params_init(&sp, sizeof sp));
  sp.n_ctx = 1024;
  CHECK_KX(kx_session_create(model, &sp, &session));
  CHECK_KX(kx_sampler_params_init(&smp, sizeof smp));
  smp.temperature = 0.0f; /* greedy: the same answer every run */
  CHECK_KX(kx_sampler_create(&smp, &sampler));

  CHECK_KX(kx_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 64;
  gp.on_token = PrintPiece;
  result.struct_size = sizeof result;
  printf("> %s\n", question);
  CHECK_KX(kx_session_generate(session, sampler, prompt, &gp, &result));
  printf("\n");

  stats.struct_size = sizeof stats;
  CHECK_KX(kx_session_get_stats(session, &stats));
  fprintf(stderr, "[%d prompt tokens, %d generated (stop reason %d); %.1f t/s prompt, %.1f t/s "
          "generation]\n", result.n_prompt, result.n_tokens, result.stop_reason,
          stats.prompt_tokens_per_second, stats.gen_tokens_per_second);
  rc = result.n_tokens > 0 ? 0 : 1;

done:
  free(prompt);
  kx_sampler_free(sampler); /* every _free accepts NULL */
  kx_session_free(session);
  kx_model_free(model);
  return rc;
}
