/* kairox — the stable C ABI.
 *
 * This header grows with the C ABI issue; for now it carries the version
 * query that every later entry point builds on. C99, no C++ needed.
 *
 *   #include <kairox/kairox.h>
 *   printf("kairox %s\n", kx_version_string());
 */
#ifndef KAIROX_KAIROX_H_
#define KAIROX_KAIROX_H_

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

/* The library's version as (major << 16) | (minor << 8) | patch. Thread-safe. */
KX_API uint32_t kx_version(void);

/* The version as "major.minor.patch"; a static string, never freed. Thread-safe. */
KX_API const char* kx_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KAIROX_H_ */
