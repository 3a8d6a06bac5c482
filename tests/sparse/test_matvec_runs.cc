// matvec_runs (kernels.h) on every ISA the CPU runs that has one: each
// computed run equals that table's matvec of the same rows bit for bit (and
// the scalar matvec within the dot-product rounding bound); prefetch-only
// runs and the n_ahead tail write nothing; poison around every output and
// in the gaps between runs stays intact.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/cpu/kernels.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace kx::test {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::kQ4_1, GgmlType::kQ8_0};
constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni};
constexpr float kPoison = -7.77e33f;
constexpr int64_t kGap = 3;  // poisoned outputs between runs

struct Case {
  int64_t n;       // elements per row
  int64_t n_rows;  // rows in the buffer
};

TEST_CASE("matvec_runs equals matvec per run on every ISA", "[sparse][matvec_runs]") {
  auto rng = SeededRng(7401);
  // n: no quads (32, 96: a pair and a lone block), quads and a tail (576),
  // quads only (1536), beyond the kernel's stack scratch (16512: 129 quads).
  const Case cases[] = {{32, 50}, {96, 70}, {576, 120}, {1536, 64}, {16512, 12}};
  const cpu::KernelTable* scalar = cpu::KernelsFor(Isa::kScalar);
  int tested = 0;
  for (GgmlType t : kTypes) {
    for (const Case& c : cases) {
      INFO(TypeName(t) << " n=" << c.n);
      const size_t rb = RowBytes(t, c.n);
      const std::vector<uint8_t> w = RandomRows(t, c.n, c.n_rows, rng);
      const std::vector<float> x = RandomActs(c.n, rng);
      // Runs of 1..40 rows at random places (overlaps allowed: rows are only
      // read), every third one prefetch-only, in list order; outputs packed
      // with kGap poisoned floats between them.
      std::vector<cpu::RowRun> runs;
      std::vector<int64_t> first_row, out_at;
      int64_t outs = kGap;
      std::uniform_int_distribution<int64_t> len_dist(1, std::min<int64_t>(40, c.n_rows));
      for (int i = 0; i < 24; ++i) {
        const int64_t len = len_dist(rng);
        const int64_t r0 = std::uniform_int_distribution<int64_t>(0, c.n_rows - len)(rng);
        runs.push_back({w.data() + r0 * rb, static_cast<uint64_t>(len) * rb, nullptr});
        first_row.push_back(r0);
        out_at.push_back(i % 3 == 2 ? -1 : outs);
        if (i % 3 != 2) outs += len + kGap;
      }
      const int64_t n_ahead = 5;  // the last 5 runs: prefetched only
      const int64_t n_runs = static_cast<int64_t>(runs.size()) - n_ahead;

      for (Isa isa : kIsas) {
        const cpu::KernelTable* table = cpu::KernelsFor(isa);
        if (table == nullptr || table->MatvecRuns(t) == nullptr) continue;
        INFO(IsaName(isa));
        ++tested;
        const cpu::TypeKernels* tk = table->For(t);
        std::vector<uint8_t> act(tk->act_bytes(c.n));
        tk->quantize_act(x.data(), c.n, act.data());
        std::vector<float> y(static_cast<size_t>(outs), kPoison);
        std::vector<cpu::RowRun> list = runs;
        for (size_t i = 0; i < list.size(); ++i) {
          list[i].y = out_at[i] >= 0 ? y.data() + out_at[i] : nullptr;
        }
        // The tail runs point at outputs too: writing them would be a bug.
        // Two calls, the second continuing the first's prefetch, as
        // SparseFfn makes them.
        const int64_t split = n_runs / 2;
        const uint64_t ahead = table->MatvecRuns(t)(list.data(), split, n_runs - split + n_ahead,
                                                    rb, c.n, act.data(), 0);
        table->MatvecRuns(t)(list.data() + split, n_runs - split, n_ahead, rb, c.n, act.data(),
                             ahead);

        std::vector<bool> written(static_cast<size_t>(outs), false);
        for (int64_t i = 0; i < n_runs; ++i) {
          if (out_at[i] < 0) continue;
          const int64_t len = static_cast<int64_t>(runs[i].bytes / rb);
          std::vector<float> want(static_cast<size_t>(len)), scalar_y(want.size());
          tk->matvec(runs[i].w, rb, c.n, len, act.data(), want.data());
          scalar->For(t)->matvec(runs[i].w, rb, c.n, len, act.data(), scalar_y.data());
          for (int64_t k = 0; k < len; ++k) {
            const auto at = static_cast<size_t>(out_at[i] + k);
            written[at] = true;
            INFO("run " << i << " row " << k << " got " << y[at] << " matvec " << want[k]);
            REQUIRE(std::memcmp(&y[at], &want[static_cast<size_t>(k)], sizeof(float)) == 0);
            const uint8_t* row = w.data() + (first_row[i] + k) * rb;
            REQUIRE(std::fabs(y[at] - scalar_y[static_cast<size_t>(k)]) <=
                    2 * DotErrorBound(t, row, c.n, act.data()));
          }
        }
        for (size_t k = 0; k < y.size(); ++k) {
          if (!written[k]) REQUIRE(std::memcmp(&y[k], &kPoison, sizeof(float)) == 0);
        }
      }
    }
  }
  // On AVX-512 machines this must have run; elsewhere there is no kernel.
  if (GetCpuFeatures().BestIsa() >= Isa::kAvx512) REQUIRE(tested > 0);
}

TEST_CASE("matvec_runs with no runs touches nothing", "[sparse][matvec_runs]") {
  for (Isa isa : kIsas) {
    const cpu::KernelTable* table = cpu::KernelsFor(isa);
    if (table == nullptr) continue;
    for (GgmlType t : kTypes) {
      if (table->MatvecRuns(t) == nullptr) continue;
      CHECK(table->MatvecRuns(t)(nullptr, 0, 0, RowBytes(t, 576), 576, nullptr, 123) == 123);
    }
    CHECK(table->MatvecRuns(GgmlType::kQ4_K) == nullptr);
    CHECK(table->MatvecRuns(static_cast<GgmlType>(1000)) == nullptr);
  }
}

}  // namespace
}  // namespace kx::test
