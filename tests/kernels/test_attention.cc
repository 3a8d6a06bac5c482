// The decode attention: its kernels (kernels.h AttnKernels) on every ISA against float64,
// and cpu::AttendGroup (chunked softmax, merged) against float64 attention, F16 and Q8_0
// caches, across chunk boundaries.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/cpu/layer_ops.h"
#include "kernels/cpu/quantize.h"
#include "test_util.h"

namespace kx::test {
namespace {

using cpu::KernelTable;

constexpr float kPoison = -7777.0f;
constexpr double kEps = 0x1p-24;

std::vector<uint16_t> RandomHalves(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> h(n);
  for (auto& e : h) e = cpu::FloatToHalf(normal(rng));
  return h;
}

std::vector<float> RandomFloats(size_t n, std::mt19937_64& rng, float sd = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(n);
  for (auto& e : v) e = normal(rng);
  return v;
}

// The engine's K cache layout (kernels.h dot_f16_blocked): the same keys in blocks must give
// dot_f16's scores bit for bit on each ISA, for runs that start and end inside a block, and
// must not write past the run's scores. Keys outside the run hold NaN halves, which must not
// reach a score.
TEST_CASE("attention kernels: blocked keys give dot_f16's bits, every ISA", "[kernels][attn]") {
  auto rng = SeededRng(1127);
  constexpr int64_t B = cpu::kAttnKeyBlock;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (int64_t n : {16, 64, 128, 256}) {
      for (auto [key0, n_keys] : std::vector<std::pair<int64_t, int64_t>>{
               {0, 1}, {0, 16}, {0, 100}, {3, 10}, {5, 11}, {7, 40}, {16, 32}, {31, 98}}) {
        for (int n_q : {1, 2, 3, 4, 5, 6, 8}) {
          INFO(IsaName(isa) << " n=" << n << " key0=" << key0 << " keys=" << n_keys
                            << " n_q=" << n_q);
          const int64_t n_blocks = (key0 + n_keys + B - 1) / B;
          const std::vector<uint16_t> rows = RandomHalves(static_cast<size_t>(n * n_keys), rng);
          std::vector<uint16_t> blocks(static_cast<size_t>(n_blocks * B * n), 0x7e00);  // NaN
          for (int64_t t_i = 0; t_i < n_keys; ++t_i) {
            cpu::StoreKeyBlocked(&rows[t_i * n], n, blocks.data(), key0 + t_i);
          }
          const std::vector<float> qs = RandomFloats(static_cast<size_t>(n_q * n), rng);
          const int64_t dst_stride = n_keys + 3;
          std::vector<float> want(static_cast<size_t>(n_q * dst_stride), kPoison);
          std::vector<float> got(want.size(), kPoison);
          t->attn.dot_f16(rows.data(), n, n_keys, qs.data(), n_q, n, want.data(), dst_stride);
          t->attn.dot_f16_blocked(blocks.data(), key0, n_keys, qs.data(), n_q, n, got.data(),
                                  dst_stride);
          for (size_t i = 0; i < want.size(); ++i) {
            REQUIRE(std::memcmp(&got[i], &want[i], sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

// A run that wraps around the end of a blocked ring (a sliding-window layer's cache) attends as
// the same keys in rows.
TEST_CASE("AttendGroup: a blocked K ring gives the rows' bits", "[kernels][attn]") {
  auto rng = SeededRng(1128);
  const KernelTable& k = cpu::Kernels();
  constexpr int kHd = 64, kG = 3, kSlots = 300;  // not whole blocks: the engine rounds up
  const int slots_alloc = (kSlots + 15) / 16 * 16;
  const int n_keys = 290, first_slot = 250;  // keys in slots 250..299, then 0..239
  const std::vector<uint16_t> kv = RandomHalves(static_cast<size_t>(2 * slots_alloc * kHd), rng);
  const uint16_t* k_rows = kv.data();
  const uint16_t* v_rows = kv.data() + slots_alloc * kHd;
  std::vector<uint16_t> k_blocks(static_cast<size_t>(slots_alloc * kHd), 0x7e00);
  for (int s = 0; s < kSlots; ++s) cpu::StoreKeyBlocked(&k_rows[s * kHd], kHd, k_blocks.data(), s);
  cpu::KvRun rows_run;
  rows_run.k0 = reinterpret_cast<const uint8_t*>(k_rows + first_slot * kHd);
  rows_run.v0 = reinterpret_cast<const uint8_t*>(v_rows + first_slot * kHd);
  rows_run.row_stride_bytes = kHd * sizeof(uint16_t);
  rows_run.n_keys = n_keys;
  rows_run.n_contig = kSlots - first_slot;
  rows_run.k_wrap = reinterpret_cast<const uint8_t*>(k_rows);
  rows_run.v_wrap = reinterpret_cast<const uint8_t*>(v_rows);
  cpu::KvRun blocked_run = rows_run;
  blocked_run.k0 = blocked_run.k_wrap = nullptr;
  blocked_run.k_blocks = reinterpret_cast<const uint8_t*>(k_blocks.data());
  blocked_run.k_slot0 = first_slot;
  const std::vector<float> q = RandomFloats(kG * kHd, rng);
  std::vector<float> scratch(cpu::AttnScratchFloats(n_keys, kG, kHd));
  std::vector<float> want(kG * kHd), got(kG * kHd);
  cpu::AttendGroup(k, false, q.data(), kG, rows_run, kHd, 0.125f, scratch.data(), want.data());
  cpu::AttendGroup(k, false, q.data(), kG, blocked_run, kHd, 0.125f, scratch.data(), got.data());
  REQUIRE(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()) == 0);
  // The control: a key written to the wrong slot changes the output.
  cpu::StoreKeyBlocked(&k_rows[0], kHd, k_blocks.data(), 260);
  cpu::AttendGroup(k, false, q.data(), kG, blocked_run, kHd, 0.125f, scratch.data(), got.data());
  REQUIRE(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()) != 0);
}

TEST_CASE("attention kernels: scores of n_q heads against float64, every ISA", "[kernels][attn]") {
  auto rng = SeededRng(811);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (int64_t n : {40, 64, 128, 256}) {
      for (int64_t n_rows : {1, 15, 16, 17, 100}) {
        for (int n_q : {1, 3, 8}) {
          INFO(IsaName(isa) << " n=" << n << " rows=" << n_rows << " n_q=" << n_q);
          const size_t stride = static_cast<size_t>(n) * 3 + 8;  // other heads between rows
          const std::vector<uint16_t> rows = RandomHalves(stride * n_rows, rng);
          const std::vector<float> qs = RandomFloats(static_cast<size_t>(n_q * n), rng);
          const int64_t dst_stride = n_rows + 5;
          std::vector<float> dst(static_cast<size_t>(n_q * dst_stride), kPoison);
          t->attn.dot_f16(rows.data(), stride, n_rows, qs.data(), n_q, n, dst.data(), dst_stride);
          for (int j = 0; j < n_q; ++j) {
            for (int64_t r = 0; r < n_rows; ++r) {
              double ref = 0.0, mag = 0.0;
              for (int64_t i = 0; i < n; ++i) {
                const double p = cpu::HalfToFloat(rows[r * stride + i]) * double{qs[j * n + i]};
                ref += p;
                mag += std::abs(p);
              }
              REQUIRE(std::abs(dst[j * dst_stride + r] - ref) <= (n + 2) * kEps * mag);
            }
            for (int64_t r = n_rows; r < dst_stride; ++r)
              REQUIRE(dst[j * dst_stride + r] == kPoison);
          }
        }
      }
    }
  }
}

TEST_CASE("attention kernels: values of n_y heads against float64, every ISA", "[kernels][attn]") {
  auto rng = SeededRng(812);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (int64_t n : {40, 64, 72, 128, 256}) {
      for (int64_t n_rows : {1, 17, 100}) {
        for (int n_y : {1, 3, 6, 7, 8}) {
          INFO(IsaName(isa) << " n=" << n << " rows=" << n_rows << " n_y=" << n_y);
          const size_t stride = static_cast<size_t>(n) * 2 + 8;
          const std::vector<uint16_t> rows = RandomHalves(stride * n_rows, rng);
          const int64_t p_stride = n_rows + 3, y_stride = n + 2;
          const std::vector<float> p = RandomFloats(static_cast<size_t>(n_y * p_stride), rng);
          std::vector<float> ys = RandomFloats(static_cast<size_t>(n_y * y_stride), rng);
          for (int j = 0; j < n_y; ++j) ys[j * y_stride + n] = ys[j * y_stride + n + 1] = kPoison;
          const std::vector<float> y0 = ys;
          t->attn.axpy_f16(p.data(), p_stride, rows.data(), stride, n_rows, n_y, n, ys.data(),
                           y_stride);
          for (int j = 0; j < n_y; ++j) {
            for (int64_t i = 0; i < n; ++i) {
              double ref = y0[j * y_stride + i], mag = std::abs(ref);
              for (int64_t r = 0; r < n_rows; ++r) {
                const double a =
                    p[j * p_stride + r] * double{cpu::HalfToFloat(rows[r * stride + i])};
                ref += a;
                mag += std::abs(a);
              }
              REQUIRE(std::abs(ys[j * y_stride + i] - ref) <= (n_rows + 2) * kEps * mag);
            }
            REQUIRE(ys[j * y_stride + n] == kPoison);
            REQUIRE(ys[j * y_stride + n + 1] == kPoison);
          }
        }
      }
    }
  }
}

TEST_CASE("attention kernels: exp_shifted within a few ulp, max exact", "[kernels][attn]") {
  auto rng = SeededRng(813);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr) continue;
    for (int64_t n : {1, 7, 16, 33, 1000}) {
      for (float sd : {1.0f, 30.0f, 400.0f}) {  // 400: scores far below the max underflow
        INFO(IsaName(isa) << " n=" << n << " sd=" << sd);
        std::vector<float> x = RandomFloats(static_cast<size_t>(n) + 1, rng, sd);
        x[n] = kPoison;
        const std::vector<float> x0 = x;
        const float scale = 0.125f;
        float mx = 0.0f;
        const float sum = t->attn.exp_shifted(x.data(), n, scale, &mx);
        float ref_max = -INFINITY;
        for (int64_t i = 0; i < n; ++i) ref_max = std::max(ref_max, x0[i] * scale);
        REQUIRE(mx == ref_max);
        double ref_sum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const double arg = double{x0[i] * scale} - double{ref_max};
          const double e = std::exp(arg);
          ref_sum += e;
          // 4 ulp relative, plus the float rounding of the argument x − max (relative error
          // |arg|·eps in e^arg), or 2e-38 absolute where e^arg is below float's normal range.
          REQUIRE(std::abs(x[i] - e) <= (4 + std::abs(arg)) * kEps * e + 2e-38);
        }
        REQUIRE(std::abs(sum - ref_sum) <= (n + 4) * kEps * ref_sum);
        REQUIRE(x[n] == kPoison);
      }
    }
  }
}

// A KV cache of n_pos positions × n_kv heads × hd, F16 or Q8_0 (as the engine stores it),
// and its values as float for the float64 reference.
struct Cache {
  std::vector<uint8_t> k, v;
  std::vector<float> kf, vf;  // dequantized
  size_t row_bytes = 0;
};

Cache MakeCache(bool q8, int n_pos, int kvd, std::mt19937_64& rng) {
  Cache c;
  const std::vector<float> k = RandomFloats(static_cast<size_t>(n_pos) * kvd, rng);
  const std::vector<float> v = RandomFloats(static_cast<size_t>(n_pos) * kvd, rng);
  const GgmlType type = q8 ? GgmlType::kQ8_0 : GgmlType::kF16;
  c.row_bytes = RowBytes(type, kvd);
  c.k.resize(c.row_bytes * n_pos);
  c.v.resize(c.row_bytes * n_pos);
  c.kf.resize(k.size());
  c.vf.resize(v.size());
  const cpu::TypeKernels* tk = cpu::KernelsFor(Isa::kScalar)->For(type);
  for (int p = 0; p < n_pos; ++p) {
    REQUIRE(cpu::QuantizeRow(type, &k[p * kvd], kvd, &c.k[p * c.row_bytes]).ok());
    REQUIRE(cpu::QuantizeRow(type, &v[p * kvd], kvd, &c.v[p * c.row_bytes]).ok());
    tk->dequantize(&c.k[p * c.row_bytes], &c.kf[p * kvd], kvd);
    tk->dequantize(&c.v[p * c.row_bytes], &c.vf[p * kvd], kvd);
  }
  return c;
}

TEST_CASE("AttendGroup: chunked softmax attention equals float64 attention", "[kernels][attn]") {
  auto rng = SeededRng(814);
  const int hd = 64, n_kv = 2;
  const int kvd = n_kv * hd;
  for (bool q8 : {false, true}) {
    for (int g : {1, 3}) {
      for (int n_keys : {1, 255, 256, 257, 700}) {
        const Cache c = MakeCache(q8, n_keys + 3, kvd, rng);
        const float scale = 1.0f / 8.0f;
        for (int kvh = 0; kvh < n_kv; ++kvh) {
          const std::vector<float> q = RandomFloats(static_cast<size_t>(g) * hd, rng, 2.0f);
          const size_t key0 = 3 * c.row_bytes + kvh * hd * c.row_bytes / kvd;  // from position 3
          for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
            const KernelTable* t = cpu::KernelsFor(isa);
            if (t == nullptr) continue;
            INFO(IsaName(isa) << (q8 ? " q8_0" : " f16") << " g=" << g << " keys=" << n_keys
                              << " kvh=" << kvh);
            std::vector<float> scratch(cpu::AttnScratchFloats(n_keys, g, hd) + 1, kPoison);
            std::vector<float> out(static_cast<size_t>(g) * hd + 1, kPoison);
            cpu::AttendGroup(*t, q8, q.data(), g, c.k.data() + key0, c.v.data() + key0, c.row_bytes,
                             n_keys, hd, scale, scratch.data(), out.data());
            REQUIRE(scratch.back() == kPoison);
            REQUIRE(out.back() == kPoison);
            // In place (the sim device's dst = q): the same result.
            std::vector<float> inplace = q;
            cpu::AttendGroup(*t, q8, inplace.data(), g, c.k.data() + key0, c.v.data() + key0,
                             c.row_bytes, n_keys, hd, scale, scratch.data(), inplace.data());
            for (int i = 0; i < g * hd; ++i) REQUIRE(inplace[i] == out[i]);
            for (int j = 0; j < g; ++j) {
              std::vector<double> s(n_keys);
              double mx = -INFINITY, sum = 0.0;
              for (int tk = 0; tk < n_keys; ++tk) {
                double dot = 0.0;
                for (int i = 0; i < hd; ++i) {
                  dot += double{q[j * hd + i]} * c.kf[(3 + tk) * kvd + kvh * hd + i];
                }
                s[tk] = dot * scale;
                mx = std::max(mx, s[tk]);
              }
              for (double& e : s) sum += (e = std::exp(e - mx));
              for (int i = 0; i < hd; ++i) {
                double ref = 0.0;
                for (int tk = 0; tk < n_keys; ++tk) {
                  ref += s[tk] / sum * c.vf[(3 + tk) * kvd + kvh * hd + i];
                }
                // |v| ~ 1 and the weights sum to 1: an absolute bound. Scores of |q·k| up to
                // ~100 put their float rounding (~1e-5) into the exponent.
                REQUIRE(std::abs(out[j * hd + i] - ref) <= 2e-4);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("AttendGroup: the chunks computed apart and merged give the same bits",
          "[kernels][attn]") {
  // What the engine does in decode (a task per chunk, then MergeChunks) against the
  // sequential AttendGroup the sim device calls.
  auto rng = SeededRng(815);
  const int hd = 64, g = 3, n_keys = 600;
  const Cache c = MakeCache(false, n_keys, hd, rng);
  const std::vector<float> q = RandomFloats(static_cast<size_t>(g) * hd, rng, 2.0f);
  const KernelTable& t = cpu::Kernels();
  std::vector<float> scratch(cpu::AttnScratchFloats(n_keys, g, hd));
  std::vector<float> whole(g * hd), merged(g * hd);
  cpu::AttendGroup(t, false, q.data(), g, c.k.data(), c.v.data(), c.row_bytes, n_keys, hd, 0.125f,
                   scratch.data(), whole.data());
  const int n_chunks = cpu::AttnChunks(n_keys);
  REQUIRE(n_chunks == 3);
  std::vector<float> parts(n_chunks * cpu::AttnPartFloats(g, hd));
  for (int ch = n_chunks - 1; ch >= 0; --ch) {  // any order, other scratch
    std::vector<float> scores(g * cpu::kAttnChunkKeys);
    cpu::AttendChunk(t, false, q.data(), g, c.k.data(), c.v.data(), c.row_bytes, n_keys, ch, hd,
                     0.125f, scores.data(), &parts[ch * cpu::AttnPartFloats(g, hd)]);
  }
  cpu::MergeChunks(parts.data(), n_chunks, g, hd, merged.data());
  for (int i = 0; i < g * hd; ++i) REQUIRE(merged[i] == whole[i]);
}

}  // namespace
}  // namespace kx::test
