/* Minimal assertion helpers for the C ABI tests (plain C99, no framework). */
#ifndef KAIROX_TESTS_CAPI_CAPI_TEST_H_
#define KAIROX_TESTS_CAPI_CAPI_TEST_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kairox/kairox.h"

#define KX_TEST_SKIP_CODE 77

static int kx_test_failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++kx_test_failures;                                             \
    }                                                                 \
  } while (0)

/* A call that must succeed; stops the program otherwise (later checks would cascade). */
#define OK(call)                                                                  \
  do {                                                                            \
    kx_status st_ = (call);                                                       \
    if (st_ != KX_STATUS_OK) {                                                    \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call,   \
              kx_status_name(st_), kx_last_error());                              \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* A call that must fail with `expected` and leave a message naming `fn`. */
#define EXPECT_STATUS(expected, fn, call)                                          \
  do {                                                                             \
    kx_status st_ = (call);                                                        \
    if (st_ != (expected)) {                                                       \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__,       \
              __LINE__, #call, kx_status_name(st_), kx_status_name(expected),      \
              kx_last_error());                                                    \
      ++kx_test_failures;                                                          \
    } else if (strstr(kx_last_error(), (fn)) == NULL) {                            \
      fprintf(stderr, "%s:%d: %s: message '%s' does not name %s\n", __FILE__,      \
              __LINE__, #call, kx_last_error(), (fn));                             \
      ++kx_test_failures;                                                          \
    }                                                                              \
  } while (0)

static int kx_test_finish(const char* name) {
  if (kx_test_failures != 0) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, kx_test_failures);
    return 1;
  }
  fprintf(stderr, "%s: all checks passed\n", name);
  return 0;
}

#endif /* KAIROX_TESTS_CAPI_CAPI_TEST_H_ */
