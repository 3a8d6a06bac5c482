// ComputeCoactivation against a naive pair count, and the kxact file format.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "catch2/catch.hpp"
#include "sparse/coactivation.h"
#include "test_util.h"

namespace kx::sparse {
namespace {

ActivityMatrix RandomActivity(int64_t n_tokens, int n, double density, std::mt19937_64& rng) {
  ActivityMatrix a(n_tokens, n);
  std::bernoulli_distribution on(density);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < n; ++i) {
      if (on(rng)) a.Set(t, i, true);
    }
  }
  return a;
}

std::string TempPath(const std::string& name) {
  return "/tmp/kx_test_grouping_" + std::to_string(::getpid()) + "_" + name;
}

TEST_CASE("ComputeCoactivation equals a naive pair count", "[coactivation]") {
  auto rng = test::SeededRng(0xC0AC71);
  struct Shape {
    int64_t tokens;
    int n;
    double density;
  };
  // Neuron counts off multiples of 64; token counts across the GEMM chunk (1024).
  const Shape shapes[] = {{300, 37, 0.3}, {1100, 130, 0.05}, {2500, 200, 0.15},
                          {64, 64, 0.5},  {1025, 95, 0.02},  {777, 513, 0.1}};
  for (const Shape& s : shapes) {
    CAPTURE(s.tokens, s.n, s.density);
    const ActivityMatrix a = RandomActivity(s.tokens, s.n, s.density, rng);
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      const Coactivation c = ComputeCoactivation(a, threads);
      REQUIRE(c.n == s.n);
      REQUIRE(c.n_tokens == s.tokens);
      REQUIRE(c.counts.size() == static_cast<size_t>(s.n) * s.n);
      std::vector<int64_t> naive(static_cast<size_t>(s.n) * s.n, 0);
      for (int64_t t = 0; t < s.tokens; ++t) {
        for (int i = 0; i < s.n; ++i) {
          if (!a.Get(t, i)) continue;
          for (int j = 0; j < s.n; ++j) naive[static_cast<size_t>(i) * s.n + j] += a.Get(t, j);
        }
      }
      int64_t mismatches = 0;
      int64_t nonzero = 0;
      for (int i = 0; i < s.n; ++i) {
        for (int j = 0; j < s.n; ++j) {
          const int64_t want = naive[static_cast<size_t>(i) * s.n + j];
          nonzero += want != 0;
          if (c.at(i, j) != static_cast<float>(want)) ++mismatches;
        }
      }
      CHECK(mismatches == 0);
      CHECK(nonzero > 0);  // the inputs exercise the counts
      int64_t active0 = 0;
      for (int64_t t = 0; t < s.tokens; ++t) active0 += a.Get(t, 0);
      CHECK(c.frequency(0) == static_cast<float>(active0));
    }
  }
}

TEST_CASE("ComputeCoactivation of an empty profile is all zeros", "[coactivation]") {
  const Coactivation c = ComputeCoactivation(ActivityMatrix(0, 10));
  REQUIRE(c.n == 10);
  REQUIRE(c.counts.size() == 100);
  for (float v : c.counts) CHECK(v == 0.0f);
}

TEST_CASE("WriteActivity / ReadActivity round trip", "[coactivation]") {
  auto rng = test::SeededRng(0xF11E);
  for (int n : {1, 63, 64, 65, 200}) {
    CAPTURE(n);
    const ActivityMatrix a = RandomActivity(97, n, 0.2, rng);
    const std::string path = TempPath("roundtrip.kxact");
    REQUIRE(WriteActivity(a, path).ok());
    auto back = ReadActivity(path);
    std::remove(path.c_str());
    REQUIRE(back.ok());
    REQUIRE(back->n_tokens() == a.n_tokens());
    REQUIRE(back->n_neurons() == a.n_neurons());
    int64_t diffs = 0;
    for (int64_t t = 0; t < a.n_tokens(); ++t) {
      for (int w = 0; w < a.words_per_row(); ++w) diffs += a.Row(t)[w] != back->Row(t)[w];
    }
    CHECK(diffs == 0);
  }
}

TEST_CASE("ReadActivity rejects bad files", "[coactivation]") {
  CHECK(absl::IsNotFound(ReadActivity("/nonexistent/dir/x.kxact").status()));

  auto rng = test::SeededRng(0xBAD);
  const ActivityMatrix a = RandomActivity(10, 70, 0.3, rng);
  const std::string good = TempPath("good.kxact");
  REQUIRE(WriteActivity(a, good).ok());
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::remove(good.c_str());
  auto try_bytes = [&](const std::string& b) {
    const std::string path = TempPath("bad.kxact");
    std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
    auto r = ReadActivity(path);
    std::remove(path.c_str());
    return r.status();
  };
  CHECK(try_bytes(bytes).ok());
  CHECK(!try_bytes(bytes.substr(0, 10)).ok());                // truncated header
  CHECK(!try_bytes(bytes.substr(0, bytes.size() - 3)).ok());  // truncated payload
  std::string bad_magic = bytes;
  bad_magic[0] = 'Z';
  CHECK(absl::IsInvalidArgument(try_bytes(bad_magic)));
  std::string bad_version = bytes;
  bad_version[7] = 9;
  CHECK(absl::IsUnimplemented(try_bytes(bad_version)));
  std::string padding = bytes;
  padding[24 + 15] = static_cast<char>(0x80);  // bit 127 of token 0: past neuron 70
  CHECK(absl::IsInvalidArgument(try_bytes(padding)));
}

}  // namespace
}  // namespace kx::sparse
