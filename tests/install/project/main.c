/* Uses the installed C ABI: load the model given, generate a few greedy tokens. */
#include <stdio.h>

#include <kairox/kairox.h>

static int32_t Print(void* ud, int32_t token, const char* text, uint64_t len) {
  (void)ud;
  (void)token;
  fwrite(text, 1, (size_t)len, stdout);
  return 0;
}

int main(int argc, char** argv) {
  kx_model* model = NULL;
  kx_session* session = NULL;
  kx_generate_params gp;
  kx_generate_result r;
  int rc = 1;
  if (argc != 2) return 2;
  printf("external_c: kairox %s\n", kx_version_string());
  if (kx_model_load(argv[1], NULL, &model) != KX_STATUS_OK ||
      kx_session_create(model, NULL, &session) != KX_STATUS_OK) {
    fprintf(stderr, "external_c: %s\n", kx_last_error());
    goto done;
  }
  kx_generate_params_init(&gp, sizeof gp);
  gp.max_tokens = 8;
  gp.on_token = Print;
  r.struct_size = sizeof r;
  if (kx_session_generate(session, NULL, "Hello", &gp, &r) != KX_STATUS_OK) {
    fprintf(stderr, "external_c: %s\n", kx_last_error());
    goto done;
  }
  printf("\nexternal_c: %d tokens\n", r.n_tokens);
  rc = 0;
done:
  kx_session_free(session);
  kx_model_free(model);
  return rc;
}
