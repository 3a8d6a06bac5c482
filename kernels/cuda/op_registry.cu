// The table behind FindOp: a fixed array filled during static initialisation (no
// allocation, no ordering dependency between translation units).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/op_registry.h"

namespace kx::cuda {
namespace {

constexpr int kMaxOps = 128;

struct Entry {
  const char* name;
  void* launcher;
};

struct Registry {
  Entry entries[kMaxOps];
  int count;
};

// Zero-initialised before any dynamic initialiser runs, so RegisterOp may be called from
// any translation unit's initialisers in any order.
Registry& Table() {
  static Registry registry;
  return registry;
}

}  // namespace

bool RegisterOp(const char* name, void* launcher) {
  Registry& r = Table();
  for (int i = 0; i < r.count; ++i) {
    if (std::strcmp(r.entries[i].name, name) == 0) {
      std::fprintf(stderr, "kairox CUDA module: op '%s' registered twice\n", name);
      std::abort();
    }
  }
  if (r.count == kMaxOps) {
    std::fprintf(stderr, "kairox CUDA module: more than %d ops; raise kMaxOps\n", kMaxOps);
    std::abort();
  }
  r.entries[r.count++] = Entry{name, launcher};
  return true;
}

void* FindOp(const char* name) {
  if (name == nullptr) return nullptr;
  const Registry& r = Table();
  for (int i = 0; i < r.count; ++i) {
    if (std::strcmp(r.entries[i].name, name) == 0) return r.entries[i].launcher;
  }
  return nullptr;
}

int OpCount() { return Table().count; }

const char* OpName(int i) { return (i >= 0 && i < Table().count) ? Table().entries[i].name : nullptr; }

}  // namespace kx::cuda
