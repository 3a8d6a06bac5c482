// Teacher-forced evaluation helpers shared by the engine, prepare, tier and
// decode-graph tests on writer-made tiny models (header-only; Catch2 checks).
//
//   const auto prompt = kx::test::RandomTokens(11, 10), forced = kx::test::RandomTokens(12, 24);
//   const auto a = kx::test::TeacherForced(*ref, prompt, forced);
//   const auto b = kx::test::TeacherForced(*sparse, prompt, forced);
//   CHECK(kx::test::MaxAbsDiff(a, b) <= bound);
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "test_util.h"

namespace kx::test {

// `n` seeded token ids in [1, 255] (a tiny model's vocabulary is its bytes).
inline std::vector<int32_t> RandomTokens(uint64_t seed, int n) {
  auto rng = SeededRng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(1 + rng() % 255);
  return t;
}

// `prompt` in one Eval (none when empty), then each of `forced` in its own
// Eval: the logits after every forced token.
inline std::vector<std::vector<float>> TeacherForced(Engine& e, const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& forced) {
  std::vector<std::vector<float>> out;
  if (!prompt.empty()) {
    absl::Status st = e.Eval(prompt);
    INFO(st.message());
    REQUIRE(st.ok());
  }
  for (int32_t t : forced) {
    absl::Status st = e.Eval(std::span<const int32_t>(&t, 1));
    INFO(st.message());
    REQUIRE(st.ok());
    auto l = e.Logits();
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

// True when no logit is NaN or infinite.
inline bool AllFinite(const std::vector<std::vector<float>>& rows) {
  for (const auto& r : rows) {
    for (float v : r) {
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

// Evaluates `prompt`, then `n` greedy tokens (the argmax, lowest id on ties); returns them.
inline std::vector<int32_t> Greedy(Engine& e, const std::vector<int32_t>& prompt, int n) {
  REQUIRE(e.Eval(prompt).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto l = e.Logits();
    const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(t);
    REQUIRE(e.Eval(std::span<const int32_t>(&t, 1)).ok());
  }
  return out;
}

// Engine::Load, or fail the test with the message.
inline std::unique_ptr<Engine> LoadEngine(const std::string& path, const EngineOptions& o) {
  auto e = Engine::Load(path, o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  return *std::move(e);
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline double MaxAbsDiff(const std::vector<std::vector<float>>& a,
                         const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t t = 0; t < a.size(); ++t) m = std::max(m, MaxAbsDiff(a[t], b[t]));
  return m;
}

}  // namespace kx::test
