// Shared by the emulated-kernel tests: seeded inputs, poisoned outputs, op lookup.
//
// "Device memory" under the emulator is host memory, so a test fills std::vectors, passes
// their data() pointers in the op's argument struct, and calls the op's C launcher (or
// looks it up by name, as the module's users do). Outputs are poisoned first (NaN bits)
// so an element the kernel never wrote fails the comparison.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/op_registry.h"
#include "test_util.h"

namespace kx::test {

// All-ones bytes: a quiet NaN as float, -1 as integers.
inline constexpr uint8_t kPoisonByte = 0xff;

template <typename T>
void Poison(std::vector<T>& v) {
  std::memset(v.data(), kPoisonByte, v.size() * sizeof(T));
}

// Uniform floats in [-scale, scale], never all zero (a zero draw is nudged).
inline std::vector<float> RandomFloats(std::mt19937_64& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) {
    x = dist(rng);
    if (x == 0.0f) x = scale * 0.5f;
  }
  return v;
}

// F16 bits of random floats in [-scale, scale].
inline std::vector<uint16_t> RandomHalves(std::mt19937_64& rng, size_t n, float scale = 1.0f) {
  std::vector<uint16_t> v(n);
  for (uint16_t& h : v) {
    float x = std::uniform_real_distribution<float>(-scale, scale)(rng);
    if (x == 0.0f) x = scale * 0.5f;
    h = cpu::FloatToHalf(x);
  }
  return v;
}

// The op's launcher from the registry, cast to its declared type; fails the test when the
// op is not registered (a .cu without KX_CUDA_REGISTER_OP).
template <typename Fn>
Fn FindOpOrFail(const char* name) {
  void* fn = cuda::FindOp(name);
  INFO("op " << name);
  REQUIRE(fn != nullptr);
  return reinterpret_cast<Fn>(fn);
}

// True when |got - want| <= abs_tol + rel_tol·|want| for every element; prints the worst.
inline bool AllClose(const float* got, const float* want, size_t n, double abs_tol,
                     double rel_tol) {
  size_t worst = 0;
  double worst_excess = -1.0;
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = abs_tol + rel_tol * std::fabs(static_cast<double>(want[i]));
    if (!(err <= bound)) ok = false;  // NaN fails
    const double excess = std::isnan(err) ? 1e300 : err - bound;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (!ok) {
    UNSCOPED_INFO("worst element " << worst << ": got " << got[worst] << ", want " << want[worst]
                                   << " (abs tol " << abs_tol << ", rel tol " << rel_tol << ")");
  }
  return ok;
}

// True when |got[i] − want[i]| <= tol[i] for every element (a bound per element, derived
// from each element's own arithmetic); prints the worst.
inline bool AllWithin(const float* got, const double* want, const double* tol, size_t n) {
  size_t worst = 0;
  double worst_ratio = -1.0;
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol[i])) ok = false;  // NaN fails
    const double ratio = std::isnan(err) ? 1e300 : err / (tol[i] > 0.0 ? tol[i] : 1e-300);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (!ok) {
    UNSCOPED_INFO("worst element " << worst << ": got " << got[worst] << ", want " << want[worst]
                                   << " (tol " << tol[worst] << ")");
  }
  return ok;
}

}  // namespace kx::test
