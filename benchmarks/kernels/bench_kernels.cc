// Kernel microbenchmark: matvec throughput (weight GB/s) per weight type and
// ISA, on 1 thread and on 2 threads splitting the rows in halves (as the
// engine does), each beside the measured read bandwidth of the same working
// set with the same thread count (the ceiling for a kernel that streams its
// weights once), plus matmul's per-column time against matvec's (the
// prompt-processing win).
//
//   bench_kernels [--repeats N] [--quick] [--only TYPE] [--isa ISA] [--json FILE]
//                 [--model qwen1.5b] [--dram-mib N] [--huge-pages]
//
// A working set larger than one matrix is made of copies of it, walked in
// turn like a model's layers, so the big sets come from DRAM. --model
// qwen1.5b measures Qwen2.5-1.5B Q4_K_M's decode shapes instead (Q4_K
// gate/up, Q4_K and Q6_K down, Q4_K attn_q/attn_output, the Q6_K LM head):
// a few rows of it that stay in the L2 (the kernel's compute rate), one
// matrix (from the caches where it fits) and --dram-mib of copies (default
// 1024: past any L3 we have seen, e.g. a 260 MiB one). --huge-pages puts the weights in 2 MiB
// transparent huge pages, as kairox-bench --mmap 0 (MappedFile::Mode::kRead) holds a model; the
// read probe is on 2 MiB pages either way (bandwidth.cc).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/cpu_features.h"
#include "base/huge_pages.h"
#include "base/timer.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/kernels.h"

namespace kx {
namespace {

struct Shape {
  const char* name;
  int64_t rows;
  int64_t n;
};

struct Result {
  std::string type, isa, shape;
  uint64_t ws_bytes;
  double gbps, ceiling_gbps;    // 1 thread
  double gbps2, ceiling_gbps2;  // 2 threads (0: not measured)
};

constexpr int kThreads2 = 2;
constexpr int64_t kRowAlign = 16;  // thread shares start at a multiple of this

constexpr uint64_t kMiB = 1ull << 20;
constexpr int kSamplesPerRepeat = 5;

bool g_huge_pages = false;  // --huge-pages

// The weights' allocator: operator new, or under --huge-pages whole 2 MiB
// pages (kx::AllocHugePages: MADV_HUGEPAGE before the first touch), as
// MappedFile::Mode::kRead holds a model. The mode is fixed before the first
// allocation, so deallocate knows which one made a buffer.
template <class T>
struct WeightAlloc {
  using value_type = T;
  WeightAlloc() = default;
  template <class U>
  WeightAlloc(const WeightAlloc<U>&) {}  // NOLINT: allocator rebinding
  T* allocate(size_t n) {
    if (!g_huge_pages) return static_cast<T*>(::operator new(n * sizeof(T)));
    uint8_t* p = AllocHugePages(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return reinterpret_cast<T*>(p);
  }
  void deallocate(T* t, size_t n) {
    if (!g_huge_pages) {
      ::operator delete(t);
      return;
    }
    FreeHugePages(reinterpret_cast<const uint8_t*>(t), n * sizeof(T));
  }
  bool operator==(const WeightAlloc&) const { return true; }
  bool operator!=(const WeightAlloc&) const { return false; }
};
using WeightBytes = std::vector<uint8_t, WeightAlloc<uint8_t>>;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

WeightBytes RandomBytes(uint64_t bytes, GgmlType type, std::mt19937_64& rng) {
  WeightBytes w(bytes);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  // Keep float types finite and quant scales sane (speed does not depend on
  // values, but NaN/denormal inputs could slow some paths).
  const int block = GetTypeInfo(type).block_size, bb = GetTypeInfo(type).block_bytes;
  for (uint64_t off = 0; off + bb <= bytes; off += bb) {
    if (type == GgmlType::kF32) {
      const float v = static_cast<float>(rng() % 1000) * 1e-3f;
      std::memcpy(&w[off], &v, 4);
    } else if (type == GgmlType::kF16 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0) {
      const uint16_t h = cpu::FloatToHalf(1e-3f * static_cast<float>(1 + rng() % 9));
      std::memcpy(&w[off], &h, 2);
      if (type == GgmlType::kQ4_1) std::memcpy(&w[off + 2], &h, 2);
    } else if (type == GgmlType::kBF16) {
      const uint16_t h = cpu::FloatToBf16(1e-3f * static_cast<float>(1 + rng() % 9));
      std::memcpy(&w[off], &h, 2);
    }
  }
  (void)block;
  return w;
}

// Median weight GB/s of matvec over `copies` consecutive copies of a matrix,
// with n_threads threads each computing a contiguous share of every matrix's
// rows (no barrier between matrices: the kernel's rate, not the pool's).
double MatvecGbps(const cpu::TypeKernels& k, const Shape& s, uint64_t ws_bytes, int repeats,
                  int n_threads, std::mt19937_64& rng) {
  const uint64_t mat_bytes = static_cast<uint64_t>(s.rows) *
                             (s.n / GetTypeInfo(k.type).block_size) *
                             GetTypeInfo(k.type).block_bytes;
  const uint64_t copies = std::max<uint64_t>(1, ws_bytes / mat_bytes);
  const WeightBytes w = RandomBytes(copies * mat_bytes, k.type, rng);
  std::vector<float> x(s.n), y(s.rows);
  for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 200) - 100) * 0.01f;
  std::vector<uint8_t> act(k.act_bytes(s.n));
  k.quantize_act(x.data(), s.n, act.data());
  const size_t row_bytes = mat_bytes / s.rows;
  const int64_t share = (s.rows / n_threads + kRowAlign - 1) / kRowAlign * kRowAlign;
  auto pass = [&](int ith) {
    const int64_t r0 = std::min<int64_t>(s.rows, ith * share);
    const int64_t r1 = ith == n_threads - 1 ? s.rows : std::min<int64_t>(s.rows, r0 + share);
    for (uint64_t c = 0; c < copies; ++c) {
      k.matvec(w.data() + c * mat_bytes + r0 * row_bytes, row_bytes, s.n, r1 - r0, act.data(),
               y.data() + r0);
    }
  };
  int passes = 1;
  auto run = [&](int ith) {
    for (int p = 0; p < passes; ++p) pass(ith);
  };
  cpu::TimeConcurrently(n_threads, run);  // warm-up
  // Short samples (~2 ms, at least one pass), many of them: on a shared
  // machine a long sample almost always includes time a thread was
  // descheduled, while the median of short ones reflects the kernel.
  const double probe = cpu::TimeConcurrently(n_threads, run);
  passes = std::max(1, static_cast<int>(0.002 / std::max(1e-9, probe)));
  std::vector<double> gbps;
  for (int r = 0; r < repeats * kSamplesPerRepeat; ++r) {
    const double sec = cpu::TimeConcurrently(n_threads, run);
    gbps.push_back(static_cast<double>(copies * mat_bytes) * passes / sec * 1e-9);
  }
  return Median(gbps);
}

// Seconds per column: matmul over ncols columns vs matvec per column.
void MatmulVsMatvec(const cpu::TypeKernels& k, const Shape& s, int64_t ncols, int repeats,
                    std::mt19937_64& rng, const char* isa) {
  const uint64_t row_bytes =
      (s.n / GetTypeInfo(k.type).block_size) * GetTypeInfo(k.type).block_bytes;
  const WeightBytes w = RandomBytes(row_bytes * s.rows, k.type, rng);
  const size_t stride = k.act_bytes(s.n);
  std::vector<uint8_t> acts(stride * ncols);
  std::vector<float> x(s.n), y(s.rows * ncols);
  for (int64_t c = 0; c < ncols; ++c) {
    for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 200) - 100) * 0.01f;
    k.quantize_act(x.data(), s.n, acts.data() + c * stride);
  }
  std::vector<double> mm, mv;
  for (int r = 0; r < repeats; ++r) {
    Stopwatch sw;
    k.matmul(w.data(), row_bytes, s.n, s.rows, acts.data(), stride, ncols, y.data(), s.rows);
    mm.push_back(sw.ElapsedSeconds() / ncols);
    sw.Reset();
    for (int64_t c = 0; c < ncols; ++c) {
      k.matvec(w.data(), row_bytes, s.n, s.rows, acts.data() + c * stride, y.data() + c * s.rows);
    }
    mv.push_back(sw.ElapsedSeconds() / ncols);
  }
  std::printf("| %-5s | %-10s | %-10s | %5lld | %10.2f | %10.2f | %6.2fx |\n", TypeName(k.type),
              isa, s.name, static_cast<long long>(ncols), Median(mm) * 1e6, Median(mv) * 1e6,
              Median(mv) / Median(mm));
}

int Main(int argc, char** argv) {
  int repeats = 7;
  bool quick = false;
  const char* json_path = nullptr;
  const char* only = nullptr;      // one type name, e.g. Q4_1
  const char* only_isa = nullptr;  // one ISA name, e.g. avx512vnni
  const char* model = nullptr;     // qwen1.5b: that model's shapes only
  uint64_t dram_mib = 1024;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--isa") && i + 1 < argc)
      only_isa = argv[++i];
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc &&
             !std::strcmp(argv[i + 1], "qwen1.5b"))
      model = argv[++i];
    else if (!std::strcmp(argv[i], "--dram-mib") && i + 1 < argc)
      dram_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--huge-pages"))
      g_huge_pages = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--repeats N] [--quick] [--only TYPE] [--isa ISA] [--json FILE] "
                   "[--model qwen1.5b] [--dram-mib N] [--huge-pages]\n",
                   argv[0]);
      return 2;
    }
  }
  std::mt19937_64 rng(1234);
  const Shape kUpGate{"1536x576", 1536, 576};     // rows × n: ffn_up/gate, n_in = 576
  const Shape kDown{"576x1536", 576, 1536};       // ffn_down
  const Shape kHead{"49152x576", 49152, 576};     // tied LM head (Q8_0)
  const Shape kGemmaDown{"640x2048", 640, 2048};  // Gemma 3 270M ffn_down (n % 256 == 0)
  const GgmlType kTypes[] = {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kF16,  GgmlType::kBF16,
                             GgmlType::kF32,  GgmlType::kQ4_0, GgmlType::kQ5_0, GgmlType::kQ5_1,
                             GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                             GgmlType::kQ6_K};
  // K-quant rows are whole 256-element super-blocks: SmolLM2's 576-wide rows
  // cannot be K-quants (llama.cpp falls back to other types there).
  auto shapes_for = [&](GgmlType ty) {
    return GetTypeInfo(ty).block_size == 256 ? std::vector<Shape>{kDown, kGemmaDown}
                                             : std::vector<Shape>{kUpGate, kDown};
  };
  std::vector<Result> results;
  std::printf("CPU: %s; best ISA %s; medians of %d; 2T = %d threads on row halves\n\n",
              GetCpuFeatures().brand.c_str(), IsaName(GetCpuFeatures().BestIsa()), repeats,
              kThreads2);
  std::printf(
      "| type  | isa        | shape      | working set | matvec GB/s | read GB/s | ratio "
      "| 2T matvec | 2T read | 2T ratio |\n");
  std::printf(
      "|-------|------------|------------|-------------|-------------|-----------|-------"
      "|-----------|---------|----------|\n");
  auto row = [&](const cpu::TypeKernels& k, Isa isa, const Shape& s, uint64_t ws, bool two) {
    const uint64_t mat = static_cast<uint64_t>(s.rows) * (s.n / GetTypeInfo(k.type).block_size) *
                         GetTypeInfo(k.type).block_bytes;
    const uint64_t used = std::max<uint64_t>(1, ws / mat) * mat;
    const double g = MatvecGbps(k, s, ws, repeats, 1, rng);
    const double ceil = cpu::MeasureReadBandwidthGBps(used, 1, repeats * kSamplesPerRepeat);
    double g2 = 0, ceil2 = 0;
    if (two) {
      g2 = MatvecGbps(k, s, ws, repeats, kThreads2, rng);
      ceil2 = cpu::MeasureReadBandwidthGBps(used, kThreads2, repeats * kSamplesPerRepeat);
    }
    std::printf("| %-5s | %-10s | %-10s | %8.2f MB | %11.2f | %9.2f | %5.2f ", TypeName(k.type),
                IsaName(isa), s.name, static_cast<double>(used) / 1e6, g, ceil, g / ceil);
    if (two) {
      std::printf("| %9.2f | %7.2f | %8.2f |\n", g2, ceil2, g2 / ceil2);
    } else {
      std::printf("|         - |       - |        - |\n");
    }
    std::fflush(stdout);
    results.push_back({TypeName(k.type), IsaName(isa), s.name, used, g, ceil, g2, ceil2});
  };
  // Qwen2.5-1.5B Q4_K_M: hidden 1536, FFN 8960, vocabulary 151936. Half its layers have a
  // Q4_K ffn_down, half a Q6_K one; attn_q / attn_output are Q4_K 1536x1536.
  const Shape kQwenGateUp{"8960x1536", 8960, 1536};    // ffn_gate / ffn_up, Q4_K
  const Shape kQwenDown{"1536x8960", 1536, 8960};      // ffn_down, Q4_K or Q6_K
  const Shape kQwenAttn{"1536x1536", 1536, 1536};      // attn_q / attn_output, Q4_K
  const Shape kQwenHead{"151936x1536", 151936, 1536};  // output (LM head), Q6_K
  const std::pair<GgmlType, Shape> kQwen[] = {{GgmlType::kQ4_K, kQwenGateUp},
                                              {GgmlType::kQ4_K, kQwenDown},
                                              {GgmlType::kQ6_K, kQwenDown},
                                              {GgmlType::kQ4_K, kQwenAttn},
                                              {GgmlType::kQ6_K, kQwenHead}};
  // The same widths with few enough rows to stay in the L2 (~0.5 MB): the kernel's compute
  // rate, which a DRAM-bound run can reach only if it overlaps the reads fully.
  constexpr uint64_t kL2Bytes = 512 * 1024;
  auto l2_shape = [](GgmlType ty, const Shape& s, std::string* name) {
    const uint64_t row =
        static_cast<uint64_t>(s.n / GetTypeInfo(ty).block_size) * GetTypeInfo(ty).block_bytes;
    const int64_t rows = std::max<int64_t>(
        kRowAlign * kThreads2, static_cast<int64_t>(kL2Bytes / row) / kRowAlign * kRowAlign);
    *name = std::to_string(rows) + "x" + std::to_string(s.n);
    return Shape{name->c_str(), std::min(rows, s.rows), s.n};
  };
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const cpu::KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr || (only_isa && std::strcmp(only_isa, IsaName(isa)) != 0)) continue;
    if (model != nullptr) {
      if (isa == Isa::kScalar && only_isa == nullptr) continue;  // minutes per row
      for (const auto& [ty, s] : kQwen) {
        if (only && std::strcmp(only, TypeName(ty)) != 0) continue;
        std::string l2_name;
        row(*t->For(ty), isa, l2_shape(ty, s, &l2_name), 0, true);
        row(*t->For(ty), isa, s, 0, true);
        row(*t->For(ty), isa, s, dram_mib * kMiB, true);
      }
      continue;
    }
    for (GgmlType ty : kTypes) {
      if (only && std::strcmp(only, TypeName(ty)) != 0) continue;
      const cpu::TypeKernels& k = *t->For(ty);
      const bool quant = ty != GgmlType::kF16 && ty != GgmlType::kBF16 && ty != GgmlType::kF32;
      const bool two = quant && isa != Isa::kScalar;
      for (const Shape& s : shapes_for(ty)) row(k, isa, s, 0, two);
      if (ty == GgmlType::kQ8_0) row(k, isa, kHead, 0, two);
      if (quant && !(quick && isa == Isa::kScalar)) {
        // DRAM: a working set well past the L3, like a decode step's ~98 MB.
        if (!quick) row(k, isa, ty == GgmlType::kQ8_0 ? kHead : kDown, 256 * kMiB, two);
      }
    }
  }
  std::printf("\nmatmul vs matvec, microseconds per column (single thread, weights in cache):\n\n");
  std::printf("| type  | isa        | shape      | ncols | matmul us | matvec us | speedup |\n");
  std::printf("|-------|------------|------------|-------|-----------|-----------|---------|\n");
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    const cpu::KernelTable* t = cpu::KernelsFor(isa);
    if (t == nullptr || (only_isa && std::strcmp(only_isa, IsaName(isa)) != 0)) continue;
    if (model != nullptr) {
      for (const auto& [ty, s] : kQwen) {
        if ((only && std::strcmp(only, TypeName(ty)) != 0) || s.rows > kQwenGateUp.rows) continue;
        MatmulVsMatvec(*t->For(ty), s, 16, repeats, rng, IsaName(isa));
      }
      continue;
    }
    for (GgmlType ty : kTypes) {
      if (only && std::strcmp(only, TypeName(ty)) != 0) continue;
      for (const Shape& s : shapes_for(ty)) {
        MatmulVsMatvec(*t->For(ty), s, 64, repeats, rng, IsaName(isa));
      }
    }
  }
  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(
          f,
          "  {\"type\": \"%s\", \"isa\": \"%s\", \"shape\": \"%s\", \"working_set_bytes\": "
          "%llu, \"matvec_gbps\": %.3f, \"read_gbps\": %.3f, \"matvec_gbps_2t\": "
          "%.3f, \"read_gbps_2t\": %.3f}%s\n",
          r.type.c_str(), r.isa.c_str(), r.shape.c_str(),
          static_cast<unsigned long long>(r.ws_bytes), r.gbps, r.ceiling_gbps, r.gbps2,
          r.ceiling_gbps2, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace kx

int main(int argc, char** argv) { return kx::Main(argc, argv); }
