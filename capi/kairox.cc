// The C ABI entry points. Every function checks its arguments, catches every
// exception and returns a status; nothing throws across this boundary.
#include "kairox/kairox.h"

#include "kairox/version.h"

extern "C" {

uint32_t kx_version(void) {
  return (KAIROX_VERSION_MAJOR << 16) | (KAIROX_VERSION_MINOR << 8) | KAIROX_VERSION_PATCH;
}

const char* kx_version_string(void) { return KAIROX_VERSION_STRING; }

}  // extern "C"
