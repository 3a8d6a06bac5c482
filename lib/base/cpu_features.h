// What the CPU can run, read once by cpuid/xgetbv. Kernels are chosen from
// this at start-up; KAIROX_ISA (scalar|avx2|avx512|avx512vnni) caps the
// choice for tests and benchmarks.
#pragma once

#include <string>

namespace kx {

enum class Isa : int {
  kScalar = 0,
  kAvx2 = 1,        // AVX2 + FMA + F16C
  kAvx512 = 2,      // AVX-512 F/BW/VL/DQ
  kAvx512Vnni = 3,  // + VNNI (and BF16 where present)
};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  std::string brand;

  // Highest ISA level the hardware and OS support.
  Isa BestIsa() const;
};

// Hardware features, probed once.
const CpuFeatures& GetCpuFeatures();

// The ISA kernels should use: the best supported, capped by KAIROX_ISA.
Isa SelectedIsa();

const char* IsaName(Isa isa);

}  // namespace kx
