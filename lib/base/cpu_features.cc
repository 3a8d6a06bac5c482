#include "base/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

#include "base/log.h"

namespace kx {
namespace {

uint64_t ReadXcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Probe() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c >> 27) & 1;
  const bool fma = (c >> 12) & 1;
  const bool f16c = (c >> 29) & 1;
  const bool avx = (c >> 28) & 1;
  uint64_t xcr0 = osxsave ? ReadXcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = avx && os_avx && ((b >> 5) & 1);
    f.fma = fma && os_avx;
    f.f16c = f16c && os_avx;
    f.avx512f = os_avx512 && ((b >> 16) & 1);
    f.avx512dq = os_avx512 && ((b >> 17) & 1);
    f.avx512bw = os_avx512 && ((b >> 30) & 1);
    f.avx512vl = os_avx512 && ((b >> 31) & 1);
    f.avx512vnni = os_avx512 && ((c >> 11) & 1);
    f.amx_bf16 = os_amx && ((d >> 22) & 1);
    f.amx_tile = os_amx && ((d >> 24) & 1);
    f.amx_int8 = os_amx && ((d >> 25) & 1);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx_vnni = os_avx && ((a1 >> 4) & 1);
    f.avx512bf16 = os_avx512 && ((a1 >> 5) & 1);
  }
  char brand[49] = {};
  __get_cpuid(0x80000000, &a, &b, &c, &d);
  if (a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      std::memcpy(brand + 16 * i + 0, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
  }
  f.brand = brand;
  return f;
}

}  // namespace

Isa CpuFeatures::BestIsa() const {
  const bool avx512 = avx512f && avx512bw && avx512vl && avx512dq && fma && f16c;
  if (avx512 && avx512vnni) return Isa::kAvx512Vnni;
  if (avx512) return Isa::kAvx512;
  if (avx2 && fma && f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "unknown";
}

Isa SelectedIsa() {
  static const Isa selected = [] {
    Isa best = GetCpuFeatures().BestIsa();
    const char* env = std::getenv("KAIROX_ISA");
    if (!env || !*env) return best;
    for (Isa cap : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
      if (std::strcmp(env, IsaName(cap)) == 0) {
        if (static_cast<int>(cap) > static_cast<int>(best)) {
          Log().warn("KAIROX_ISA={} is not supported by this CPU; using {}", env, IsaName(best));
          return best;
        }
        return cap;
      }
    }
    Log().warn("KAIROX_ISA={} is not one of scalar|avx2|avx512|avx512vnni; ignored", env);
    return best;
  }();
  return selected;
}

}  // namespace kx
