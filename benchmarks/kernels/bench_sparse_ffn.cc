// Sparse FFN benchmark: one decode token's FFN over bundles (lib/sparse) at
// active fractions from 1% to 100%, beside the dense FFN of the existing
// kernels (gate+up matvec, act·up, down matvec) and the measured read
// bandwidth. Prints median µs per layer, bytes touched, GB/s and the ratio to
// the bandwidth ceiling, as a table and as JSON.
//
//   bench_sparse_ffn [-t THREADS] [-r REPEATS] [--layers N] [--gs GS] [-m MODEL.gguf]
//                    [--json FILE] [--fraction F] [--threshold T] [--down-layout rows|blocks]
//                    [--neurons P]
//
// --down-layout (sparse/bundle.h): blocks (the default where ffn_down is Q4_1;
// GS 32, the model's own down blocks) or rows (down_t rows re-quantized to
// DefaultDownType, GS from --gs).
//
// Without -m: SmolLM2-shaped random layers (n_embd 576, n_ff 1536, Q4_1). With
// -m: the model's own ffn_up/gate/down of every layer, repeated to N layers.
// A walk over N distinct layers per repeat keeps the data out of the caches,
// as a real decode does. Active groups are drawn at random with every neuron
// of a group active (grouping's aim: co-active neurons share a bundle), or,
// with --neurons P, each of their neurons predicted with probability P (at
// the default sparsity the predictors mark ~98 % of the neurons: most
// groups then miss one or two).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "base/timer.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "sparse/bundle.h"
#include "sparse/sparse_ffn.h"

namespace kx {
namespace {

constexpr int64_t kNEmbd = 576, kNFf = 1536;  // SmolLM2-135M
constexpr int kDefaultLayers = 60;            // 60 × 1.7 MB: beyond a 32 MB L3
constexpr double kFractions[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4,
                                 0.5,  0.6,  0.7,  0.8, 0.9, 1.0};
constexpr int64_t kRowAlign = 16;  // dense rows per thread share (as forward.cc)
constexpr uint64_t kBandwidthBytes = 256ull << 20;
constexpr size_t kSetsPerLayer = 7;  // coprime with the walk: each repeat sees new sets

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

WeightRef Ref(const uint8_t* data, GgmlType t, int64_t n_in, int64_t n_out) {
  WeightRef w;
  w.data = data;
  w.type = t;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = static_cast<uint64_t>(n_in / GetTypeInfo(t).block_size) *
                static_cast<uint64_t>(GetTypeInfo(t).block_bytes);
  return w;
}

// Random Q4_1 bytes with sane half scales (speed does not depend on values).
std::vector<uint8_t> RandomQ4_1(int64_t n, int64_t rows, std::mt19937_64& rng) {
  const size_t bytes = static_cast<size_t>(n / 32 * 20 * rows);
  std::vector<uint8_t> w(bytes);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < bytes; off += 20) {
    const uint16_t d = cpu::FloatToHalf(0.002f + 0.001f * static_cast<float>(rng() % 8));
    const uint16_t m = cpu::FloatToHalf(-0.01f * static_cast<float>(rng() % 4));
    std::memcpy(&w[off], &d, 2);
    std::memcpy(&w[off + 2], &m, 2);
  }
  return w;
}

// One layer as both layouts: the dense matrices and the packed bundles.
struct Layer {
  WeightRef up, gate, down;
  std::vector<uint8_t> bundles;
  std::vector<const uint8_t*> bundle_ptrs;
};

int Main(int argc, char** argv) {
  int n_threads = 1, repeats = 30, n_layers = kDefaultLayers, gs = 16;
  std::string model_path, json_path;
  double only_fraction = 0;  // > 0: measure just this active fraction
  // > 0: the CATS cut; a huge value keeps no neuron, which times gate/up alone.
  float threshold = 0.0f;
  std::string down_layout = "auto";
  double neurons = 1.0;  // share of an active group's neurons predicted
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "-t") n_threads = std::max(1, std::atoi(next()));
    else if (a == "-r") repeats = std::max(1, std::atoi(next()));
    else if (a == "--layers") n_layers = std::max(1, std::atoi(next()));
    else if (a == "--gs") gs = std::atoi(next());
    else if (a == "-m") model_path = next();
    else if (a == "--json") json_path = next();
    else if (a == "--fraction") only_fraction = std::atof(next());
    else if (a == "--threshold") threshold = static_cast<float>(std::atof(next()));
    else if (a == "--down-layout") down_layout = next();
    else if (a == "--neurons") neurons = std::clamp(std::atof(next()), 0.0, 1.0);
    else {
      std::fprintf(stderr,
                   "usage: bench_sparse_ffn [-t THREADS] [-r REPEATS] [--layers N] [--gs GS] "
                   "[-m MODEL.gguf] [--json FILE] [--fraction F] [--threshold T] "
                   "[--down-layout rows|blocks] [--neurons P]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(42);
  const cpu::KernelTable& k = cpu::Kernels();

  // The dense weights: random, or the model's layers (mapped, not copied).
  std::shared_ptr<const Model> model;
  std::vector<std::vector<uint8_t>> random_store;
  std::vector<Layer> layers(static_cast<size_t>(n_layers));
  int64_t n_embd = kNEmbd, n_ff = kNFf;
  if (!model_path.empty()) {
    auto m = Model::Load(model_path);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    model = *m;
    n_embd = model->hparams().n_embd;
    n_ff = model->hparams().n_ff;
    const auto& ml = model->weights().layers;
    for (int l = 0; l < n_layers; ++l) {
      const LlamaLayerWeights& w = ml[static_cast<size_t>(l) % ml.size()];
      layers[static_cast<size_t>(l)].up = w.ffn_up;
      layers[static_cast<size_t>(l)].gate = w.ffn_gate;
      layers[static_cast<size_t>(l)].down = w.ffn_down;
    }
  } else {
    for (int l = 0; l < n_layers; ++l) {
      random_store.push_back(RandomQ4_1(n_embd, n_ff, rng));
      random_store.push_back(RandomQ4_1(n_embd, n_ff, rng));
      random_store.push_back(RandomQ4_1(n_ff, n_embd, rng));
      const size_t b = random_store.size() - 3;
      Layer& L = layers[static_cast<size_t>(l)];
      L.up = Ref(random_store[b].data(), GgmlType::kQ4_1, n_embd, n_ff);
      L.gate = Ref(random_store[b + 1].data(), GgmlType::kQ4_1, n_embd, n_ff);
      L.down = Ref(random_store[b + 2].data(), GgmlType::kQ4_1, n_ff, n_embd);
    }
  }
  const Layer& first = layers[0];
  const bool blocks = down_layout == "blocks" ||
                     (down_layout == "auto" &&
                      sparse::CanUseDownBlocks(first.down.type, n_embd, n_ff));
  if (blocks) gs = 32;
  auto layout_or =
      blocks ? sparse::MakeBundleLayout(n_embd, n_ff, gs, first.up.type, first.gate.type,
                                        first.down.type, sparse::DownLayout::kBlocks)
             : sparse::MakeBundleLayout(n_embd, n_ff, gs, first.up.type, first.gate.type,
                                        sparse::DefaultDownType(first.down.type, n_embd));
  if (!layout_or.ok()) {
    std::fprintf(stderr, "%s\n", std::string(layout_or.status().message()).c_str());
    return 1;
  }
  const sparse::BundleLayout layout = *layout_or;
  std::vector<int32_t> perm(static_cast<size_t>(n_ff));
  std::iota(perm.begin(), perm.end(), 0);
  for (Layer& L : layers) {
    L.bundles.resize(layout.bundle_stride * static_cast<uint64_t>(layout.n_groups));
    const absl::Status s = sparse::PackBundles(L.up, L.gate, L.down, perm, layout, L.bundles.data());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    for (int g = 0; g < layout.n_groups; ++g) {
      L.bundle_ptrs.push_back(L.bundles.data() + layout.bundle_stride * static_cast<uint64_t>(g));
    }
  }

  ThreadPool pool(n_threads);
  const double ceiling = cpu::MeasureReadBandwidthGBps(kBandwidthBytes, n_threads, 5);
  std::vector<float> x(static_cast<size_t>(n_embd)), y(x.size());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);

  // Dense FFN: the engine's path (x prepared once, gate+up rows split over
  // the pool in one dispatch, act·up, h prepared, down rows split).
  const cpu::TypeKernels* tk_gate = k.For(first.gate.type);
  const cpu::TypeKernels* tk_up = k.For(first.up.type);
  const cpu::TypeKernels* tk_down = k.For(first.down.type);
  std::vector<uint8_t> ax_gate(tk_gate->act_bytes(n_embd)), ax_up(tk_up->act_bytes(n_embd)),
      ah(tk_down->act_bytes(n_ff));
  std::vector<float> g(static_cast<size_t>(n_ff)), u(g.size());
  auto dense = [&](const Layer& L) {
    tk_gate->quantize_act(x.data(), n_embd, ax_gate.data());
    tk_up->quantize_act(x.data(), n_embd, ax_up.data());
    pool.Run([&](int ith, int nth) {
      int64_t r0, r1;
      ThreadPool::Split(2 * n_ff, ith, nth, kRowAlign, &r0, &r1);
      for (int64_t r = r0; r < r1;) {
        const bool is_gate = r < n_ff;
        const int64_t base = is_gate ? 0 : n_ff, end = std::min(r1, base + n_ff);
        const WeightRef& w = is_gate ? L.gate : L.up;
        (is_gate ? tk_gate : tk_up)
            ->matvec(w.row(r - base), w.row_bytes, n_embd, end - r,
                     is_gate ? ax_gate.data() : ax_up.data(), (is_gate ? g : u).data() + r - base);
        r = end;
      }
    });
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    tk_down->quantize_act(g.data(), n_ff, ah.data());
    pool.Run([&](int ith, int nth) {
      int64_t r0, r1;
      ThreadPool::Split(n_embd, ith, nth, kRowAlign, &r0, &r1);
      if (r1 > r0) tk_down->matvec(L.down.row(r0), L.down.row_bytes, n_ff, r1 - r0, ah.data(), y.data() + r0);
    });
  };

  sparse::SparseFfn ffn(k, n_embd, static_cast<int>(n_ff), n_threads);
  ThreadPool::HotScope hot(pool);
  // One walk over all layers, appending each layer's time in µs. Layers are
  // timed one by one: on a shared machine a walk is often descheduled part
  // way, a single layer (≤ a few hundred µs) rarely, so the median of the
  // per-layer times is what the kernel costs, the data coming from DRAM as
  // the walk keeps it out of the caches.
  auto walk = [&](const auto& fn, std::vector<double>* samples) {
    for (const Layer& L : layers) {
      const int64_t t0 = NowNs();
      fn(L);
      samples->push_back(static_cast<double>(NowNs() - t0) / 1e3);
    }
  };
  // Medians over `repeats` walks of fn_a and fn_b interleaved, so that load
  // from other processes hits both alike; the first walk of each warms up.
  auto time_pair = [&](const auto& fn_a, const auto& fn_b, double* us_a, double* us_b) {
    std::vector<double> a, b, warm;
    walk(fn_a, &warm);
    walk(fn_b, &warm);
    for (int rep = 0; rep < repeats; ++rep) {
      walk(fn_a, &a);
      walk(fn_b, &b);
    }
    *us_a = Median(a);
    *us_b = Median(b);
  };
  double dense_us = 0, dense_again = 0;
  time_pair(dense, dense, &dense_us, &dense_again);
  const uint64_t dense_bytes = first.up.bytes() + first.gate.bytes() + first.down.bytes();

  std::printf("sparse FFN: n_embd %lld, n_ff %lld, %s/%s/%s (down %s %s), GS %d, %d groups, "
              "%d layers, %d thread(s), ISA %s\n",
              static_cast<long long>(n_embd), static_cast<long long>(n_ff),
              TypeName(first.up.type), TypeName(first.gate.type), TypeName(first.down.type),
              sparse::DownLayoutName(layout.down), TypeName(layout.down_type), gs, layout.n_groups, n_layers, n_threads,
              IsaName(k.isa));
  std::printf("read bandwidth (%d thread(s)): %.1f GB/s\n", n_threads, ceiling);
  std::printf("dense FFN: %.1f us/layer, %.2f MB, %.1f GB/s (%.0f%% of ceiling)\n\n", dense_us,
              dense_bytes / 1e6, dense_bytes / dense_us / 1e3,
              100.0 * dense_bytes / dense_us / 1e3 / ceiling);
  std::printf("| active | groups | us/layer | MB touched | GB/s | %% ceiling | dense us | vs dense |\n");
  std::printf("|-------:|-------:|---------:|-----------:|-----:|----------:|---------:|---------:|\n");
  std::string json = "{\"n_threads\":" + std::to_string(n_threads) +
                     ",\"ceiling_gbps\":" + std::to_string(ceiling) +
                     ",\"dense_us\":" + std::to_string(dense_us) + ",\"rows\":[";
  for (double frac : kFractions) {
    if (only_fraction > 0 && std::fabs(frac - only_fraction) > 1e-9) continue;
    const int n_active = std::max(1, static_cast<int>(frac * layout.n_groups + 0.5));
    // Random group sets, a different one for every (layer, repeat) so that
    // the walk touches the whole model over the repeats, as decoding does
    // (a fixed set per layer would sit in the L3 at low fractions).
    std::vector<std::vector<int32_t>> groups(layers.size() * kSetsPerLayer);
    std::vector<std::vector<uint32_t>> masks(groups.size());
    std::bernoulli_distribution predicted(neurons);
    double n_predicted = 0;
    for (size_t si = 0; si < groups.size(); ++si) {
      std::vector<int32_t>& gl = groups[si];
      std::vector<int32_t> all(static_cast<size_t>(layout.n_groups));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      gl.assign(all.begin(), all.begin() + n_active);
      std::sort(gl.begin(), gl.end());
      for (int i = 0; i < n_active; ++i) {
        uint32_t m = 0;
        for (int j = 0; j < gs; ++j) m |= (neurons >= 1.0 || predicted(rng) ? 1u : 0u) << j;
        if (m == 0) m = 1;  // an active group has a predicted neuron
        masks[si].push_back(m);
        n_predicted += __builtin_popcount(m);
      }
    }
    n_predicted /= static_cast<double>(groups.size());
    size_t li = 0;
    double us = 0, dense_row_us = 0;
    time_pair([&](const Layer& L) {
      sparse::SparseFfnArgs a;
      a.layout = &layout;
      a.bundles = L.bundle_ptrs.data();
      a.groups = groups[li].data();
      a.n_groups = n_active;
      a.masks = masks[li].data();
      a.x = x.data();
      a.act = FfnActivation::kSilu;
      a.threshold = threshold;
      a.y = y.data();
      ffn.Run(a, pool);
      li = (li + 1) % groups.size();
    }, dense, &us, &dense_row_us);
    // Bytes the predicted neurons need (down blocks: the whole group's).
    const double row_bytes = static_cast<double>(layout.up_row_bytes + layout.gate_row_bytes +
                                                 layout.down_row_bytes);
    const double bytes =
        layout.down == sparse::DownLayout::kBlocks
            ? n_predicted * row_bytes + static_cast<double>(layout.down_bytes) * n_active
            : n_predicted * row_bytes;
    const double gbps = bytes / us / 1e3;
    std::printf("| %5.0f%% | %6d | %8.1f | %10.3f | %4.1f | %8.0f%% | %8.1f | %7.2fx |\n",
                frac * 100, n_active, us, bytes / 1e6, gbps, 100.0 * gbps / ceiling, dense_row_us,
                dense_row_us / us);
    json += std::string(frac == kFractions[0] ? "" : ",") + "{\"active\":" + std::to_string(frac) +
 ",\"us\":" + std::to_string(us) + ",\"dense_us\":" + std::to_string(dense_row_us) + ",\"bytes\":" + std::to_string(bytes) + "}";
  }
  json += "]}";
  std::printf("\n%s\n", json.c_str());
  if (!json_path.empty()) {
    if (FILE* f = std::fopen(json_path.c_str(), "w")) {
      std::fprintf(f, "%s\n", json.c_str());
      std::fclose(f);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kx

int main(int argc, char** argv) { return kx::Main(argc, argv); }
