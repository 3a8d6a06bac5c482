// Decode attention microbenchmark: one token's attention over a KV cache of --depth positions
// in every one of --layers layers (F16, the engine's layout: per layer and KV head the
// positions are consecutive, V in rows of head_dim halves, K in blocks of 16 keys (kernels.h
// dot_f16_blocked) or, as before, in rows; in 2 MiB pages), split over the threads as
// the engine's decode splits it (forward.cc RunAttentionPart: a task per (KV head, chunk of
// cpu::kAttnChunkKeys keys), thread i taking a contiguous range, then the serial merge), against
// the read bandwidth probe on the same bytes in the same run, alternating: probe, K in rows, K in
// blocks.
//
// The bytes ceiling of a token's attention is K + V of every layer read once:
// layers · 2 · kv_heads · depth · head_dim · 2 bytes ÷ the probe's GB/s. docs/performance.md's
// "tg at depth 4096 within 1.3× of the attention bytes ceiling" is the ratio printed here.
//
//   bench_attention [--depth N] [--layers N] [--kv-heads N] [--group G] [--head-dim N]
//                   [--threads 1,2] [--repeats N] [--isa ISA]
// Defaults: SmolLM2-135M's shape (30 layers, 3 KV heads of 64, 3 query heads each), depth 4096.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/huge_pages.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/layer_ops.h"

namespace kx {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  int depth = 4096, layers = 30, kv_heads = 3, group = 3, head_dim = 64;
  uint64_t LayerBytes() const {  // K and V of one layer
    return uint64_t{2} * kv_heads * depth * head_dim * sizeof(uint16_t);
  }
};

// One token's attention over every layer: the engine's decode split, one pool dispatch and one
// merge per layer. Returns seconds.
double RunToken(const cpu::KernelTable& k, const Shape& s, const uint8_t* kv, bool blocked,
                ThreadPool& pool, const std::vector<float>& q, std::vector<float>& scratch,
                std::vector<float>& parts, std::vector<float>& out) {
  const int n_chunks = cpu::AttnChunks(s.depth);
  const int n_tasks = s.kv_heads * n_chunks;
  const int64_t part_floats = cpu::AttnPartFloats(s.group, s.head_dim);
  const size_t row = size_t{static_cast<size_t>(s.head_dim)} * sizeof(uint16_t);
  const size_t head_bytes = row * s.depth;
  const int64_t scratch_per_thread = int64_t{s.group} * cpu::kAttnChunkKeys;
  const float scale = 0.125f;
  Stopwatch sw;
  for (int l = 0; l < s.layers; ++l) {
    const uint8_t* k_layer = kv + l * s.LayerBytes();
    const uint8_t* v_layer = k_layer + s.LayerBytes() / 2;
    const float* ql = &q[static_cast<size_t>(l) * s.kv_heads * s.group * s.head_dim];
    pool.Run([&](int ith, int nth) {
      float* sc = &scratch[static_cast<size_t>(ith) * scratch_per_thread];
      for (int u = n_tasks * ith / nth; u < n_tasks * (ith + 1) / nth; ++u) {
        const int kvh = u / n_chunks, c = u % n_chunks;
        cpu::KvRun run;
        run.k0 = run.k_wrap = k_layer + kvh * head_bytes;
        run.v0 = run.v_wrap = v_layer + kvh * head_bytes;
        run.row_stride_bytes = row;
        run.n_keys = run.n_contig = s.depth;
        if (blocked) run.k_blocks = run.k0;  // the same bytes, read as blocks
        cpu::AttendChunk(k, false, ql + kvh * s.group * s.head_dim, s.group, run, c, s.head_dim,
                         scale, sc, &parts[u * part_floats]);
      }
    });
    for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
      cpu::MergeChunks(&parts[kvh * n_chunks * part_floats], n_chunks, s.group, s.head_dim,
                       &out[kvh * s.group * s.head_dim]);
    }
  }
  return sw.ElapsedSeconds();
}

std::vector<int> ParseList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

int Main(int argc, char** argv) {
  Shape s;
  std::vector<int> threads = {1, 2};
  int repeats = 9;
  std::string only_isa;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--depth" && has) {
      s.depth = std::atoi(argv[++i]);
    } else if (a == "--layers" && has) {
      s.layers = std::atoi(argv[++i]);
    } else if (a == "--kv-heads" && has) {
      s.kv_heads = std::atoi(argv[++i]);
    } else if (a == "--group" && has) {
      s.group = std::atoi(argv[++i]);
    } else if (a == "--head-dim" && has) {
      s.head_dim = std::atoi(argv[++i]);
    } else if (a == "--threads" && has) {
      threads = ParseList(argv[++i]);
    } else if (a == "--repeats" && has) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--isa" && has) {
      only_isa = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--depth N] [--layers N] [--kv-heads N] [--group G] [--head-dim N] "
                   "[--threads 1,2] [--repeats N] [--isa ISA]\n",
                   argv[0]);
      return 2;
    }
  }
  if (s.depth < 1 || s.layers < 1 || s.kv_heads < 1 || s.group < 1 || s.head_dim < 16 ||
      s.head_dim > static_cast<int>(cpu::kAttnMaxHeadDim) || s.head_dim % 16 != 0 || repeats < 1 ||
      threads.empty()) {
    std::fprintf(stderr, "bench_attention: bad shape (head_dim a multiple of 16, ≤ %d)\n",
                 static_cast<int>(cpu::kAttnMaxHeadDim));
    return 2;
  }
  const uint64_t total = s.LayerBytes() * s.layers;
  uint8_t* kv = AllocHugePages(total);
  if (kv == nullptr) {
    std::fprintf(stderr, "bench_attention: cannot allocate %llu bytes\n",
                 static_cast<unsigned long long>(total));
    return 1;
  }
  // Seeded halves in [-1, 1): random keys and values, never all zero.
  std::mt19937 rng(20261127);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto* h = reinterpret_cast<uint16_t*>(kv);
  for (uint64_t i = 0; i < total / 2; ++i) h[i] = cpu::FloatToHalf(dist(rng));
  std::vector<float> q(static_cast<size_t>(s.layers) * s.kv_heads * s.group * s.head_dim);
  for (float& x : q) x = dist(rng);

  std::printf(
      "decode attention, depth %d, %d layers × %d KV heads × %d query heads, head_dim %d: "
      "%.1f MB of K/V a token (F16, 2 MiB pages)\n",
      s.depth, s.layers, s.kv_heads, s.group, s.head_dim, total / 1e6);
  std::printf(
      "| isa | threads | K layout | attention ms/token | best | GB/s | probe GB/s | "
      "ceiling ms | time ÷ ceiling |\n|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (int isa_i = static_cast<int>(Isa::kScalar); isa_i <= static_cast<int>(SelectedIsa());
       ++isa_i) {
    const Isa isa = static_cast<Isa>(isa_i);
    const cpu::KernelTable* k = cpu::KernelsFor(isa);
    if (k == nullptr || isa == Isa::kScalar) continue;
    if (!only_isa.empty() && only_isa != IsaName(isa)) continue;
    for (int nt : threads) {
      ThreadPool pool(nt);
      const int n_chunks = cpu::AttnChunks(s.depth);
      std::vector<float> scratch(static_cast<size_t>(nt) * s.group * cpu::kAttnChunkKeys);
      std::vector<float> parts(static_cast<size_t>(s.kv_heads) * n_chunks *
                               cpu::AttnPartFloats(s.group, s.head_dim));
      std::vector<float> out(static_cast<size_t>(s.kv_heads) * s.group * s.head_dim);
      RunToken(*k, s, kv, true, pool, q, scratch, parts, out);  // warm-up
      std::vector<double> t[2], bw;
      for (int r = 0; r < repeats; ++r) {  // alternating: probe, rows, blocks
        bw.push_back(cpu::MeasureReadBandwidthGBps(total, nt, 1));
        for (int b = 0; b < 2; ++b) {
          t[b].push_back(RunToken(*k, s, kv, b == 1, pool, q, scratch, parts, out));
        }
      }
      const double bwm = Median(bw), ceiling = total / (bwm * 1e9);
      for (int b = 0; b < 2; ++b) {
        const double tm = Median(t[b]);
        // best: the fastest repetition, for a machine shared with other work (medians are the
        // figures to report).
        std::printf("| %s | %d | %s | %.3f | %.3f | %.1f | %.1f | %.3f | %.2f× |\n", IsaName(isa),
                    nt, b == 1 ? "blocks" : "rows", tm * 1e3,
                    *std::min_element(t[b].begin(), t[b].end()) * 1e3, total / tm / 1e9, bwm,
                    ceiling * 1e3, tm / ceiling);
      }
      // Keep the result alive (and show it is finite).
      float sum = 0;
      for (float x : out) sum += x;
      if (!(sum == sum)) std::printf("non-finite output\n");
    }
  }
  FreeHugePages(kv, total);
  return 0;
}

}  // namespace
}  // namespace kx

int main(int argc, char** argv) { return kx::Main(argc, argv); }
