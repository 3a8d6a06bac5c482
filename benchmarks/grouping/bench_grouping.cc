// bench_grouping: how well each grouping method groups co-firing neurons.
//
//   bench_grouping [options] [layer.kxact ...]
//     --calib-frac F   share of tokens used to group (default 0.75); the rest is held out
//     --threads N      oneDNN threads for the co-activation GEMM (default 1)
//     --repeats R      timing repeats, median reported (default 5)
//     --seed S         grouping / synthetic seed (default 42)
//     --tokens T       synthetic profile length (default 8192)
//     --json PATH      also write the results as JSON
//
// Each kxact file (WriteActivity) is one layer's profile; with no file a
// synthetic 1536-neuron profile is generated (a latent-factor model, see
// MakeSynthetic). Tokens [0, calib) build the co-activation counts, tokens
// [calib, end) score the groupings. Prints, per group size and method:
// intra-group co-activation, over-fetch, groups and active neurons per token,
// and the median grouping time (wall and this thread's CPU time).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/timer.h"
#include "nlohmann/json.hpp"
#include "sparse/coactivation.h"
#include "sparse/grouping.h"

namespace {

using kx::sparse::ActivityMatrix;
using kx::sparse::GroupingMethod;

constexpr int kSyntheticNeurons = 1536;    // SmolLM2-135M n_ff
constexpr int kLatentDims = 96;            // hidden "features" driving the neurons
constexpr int kDimsPerNeuron = 3;          // each neuron reads a few features
constexpr double kTokenCorrelation = 0.6;  // AR(1) persistence of features across tokens
constexpr double kDeadShare = 0.03;        // neurons that never fire
constexpr int kGroupSizes[] = {4, 8, 16, 32};
using kx::sparse::EdgeAffinity;
struct Variant {
  const char* name;
  GroupingMethod method;
  EdgeAffinity affinity;
};
// The default METIS affinity first; the others show what the choice is worth.
constexpr Variant kVariants[] = {
    {"metis", GroupingMethod::kMetis, EdgeAffinity::kCount},
    {"metis-jac", GroupingMethod::kMetis, EdgeAffinity::kJaccard},
    {"metis-cos", GroupingMethod::kMetis, EdgeAffinity::kCosine},
    {"frequency", GroupingMethod::kFrequency, EdgeAffinity::kCount},
    {"random", GroupingMethod::kRandom, EdgeAffinity::kCount},
};

// Φ⁻¹(p) by bisection on the normal CDF (accuracy far beyond what the model needs).
double InverseNormalCdf(double p) {
  double lo = -10.0, hi = 10.0;
  for (int it = 0; it < 100; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

// A ReLU-FFN-like profile: token features z_t follow an AR(1) process (topics
// persist); neuron n fires when w_n·z_t > θ_n, w_n touching kDimsPerNeuron
// features, θ_n set for a log-normal target frequency (median ≈ 5%, a hot
// tail, a few dead neurons). Neurons sharing features co-fire, softly.
ActivityMatrix MakeSynthetic(int64_t n_tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> dim(0, kLatentDims - 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  struct Neuron {
    int dims[kDimsPerNeuron];
    double w[kDimsPerNeuron];
    double threshold;
    bool dead;
  };
  std::vector<Neuron> neurons(kSyntheticNeurons);
  for (Neuron& nr : neurons) {
    double norm2 = 0.0;
    for (int k = 0; k < kDimsPerNeuron; ++k) {
      nr.dims[k] = dim(rng);
      nr.w[k] = normal(rng);
      norm2 += nr.w[k] * nr.w[k];
    }
    const double freq = std::clamp(0.05 * std::exp(0.9 * normal(rng)), 0.002, 0.7);
    nr.threshold = std::sqrt(norm2) * InverseNormalCdf(1.0 - freq);
    nr.dead = u(rng) < kDeadShare;
  }
  ActivityMatrix a(n_tokens, kSyntheticNeurons);
  std::vector<double> z(kLatentDims);
  for (double& v : z) v = normal(rng);
  const double fresh = std::sqrt(1.0 - kTokenCorrelation * kTokenCorrelation);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (double& v : z) v = kTokenCorrelation * v + fresh * normal(rng);
    for (int n = 0; n < kSyntheticNeurons; ++n) {
      const Neuron& nr = neurons[n];
      if (nr.dead) continue;
      double s = 0.0;
      for (int k = 0; k < kDimsPerNeuron; ++k) s += nr.w[k] * z[nr.dims[k]];
      if (s > nr.threshold) a.Set(t, n, true);
    }
  }
  return a;
}

// CPU time of the calling thread: steadier than wall time on a shared machine.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  double calib_frac = 0.75;
  int threads = 1;
  int repeats = 5;
  uint64_t seed = 42;
  int64_t tokens = 8192;
  std::string json_path;
  std::vector<std::string> files;
};

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--calib-frac" && (v = value())) {
      o->calib_frac = std::atof(v);
    } else if (arg == "--threads" && (v = value())) {
      o->threads = std::atoi(v);
    } else if (arg == "--repeats" && (v = value())) {
      o->repeats = std::max(1, std::atoi(v));
    } else if (arg == "--seed" && (v = value())) {
      o->seed = std::strtoull(v, nullptr, 10);
    } else if (arg == "--tokens" && (v = value())) {
      o->tokens = std::atoll(v);
    } else if (arg == "--json" && (v = value())) {
      o->json_path = v;
    } else if (!arg.empty() && arg[0] != '-') {
      o->files.push_back(arg);
    } else {
      std::fprintf(stderr, "unknown or incomplete option '%s'\n", arg.c_str());
      return false;
    }
  }
  return o->calib_frac > 0.0 && o->calib_frac < 1.0;
}

nlohmann::json BenchLayer(const std::string& name, const ActivityMatrix& a, const Options& o) {
  const int64_t calib_tokens =
      static_cast<int64_t>(static_cast<double>(a.n_tokens()) * o.calib_frac);
  const ActivityMatrix calib = a.Slice(0, calib_tokens);
  const ActivityMatrix held = a.Slice(calib_tokens, a.n_tokens());

  std::vector<double> coact_ms;
  kx::sparse::Coactivation c;
  for (int r = 0; r < o.repeats; ++r) {
    const int64_t t0 = kx::NowNs();
    c = kx::sparse::ComputeCoactivation(calib, o.threads);
    coact_ms.push_back(static_cast<double>(kx::NowNs() - t0) * 1e-6);
  }
  std::printf(
      "\n%s: %d neurons, %lld calibration / %lld held-out tokens; "
      "co-activation GEMM %.1f ms (median of %d, %d thread(s))\n",
      name.c_str(), a.n_neurons(), static_cast<long long>(calib.n_tokens()),
      static_cast<long long>(held.n_tokens()), Median(coact_ms), o.repeats, o.threads);
  std::printf(
      "| GS | method    | intra co-act | over-fetch | vs random | groups/token | "
      "active/token | wall ms |  cpu ms |\n");
  std::printf(
      "|---:|-----------|-------------:|-----------:|----------:|-------------:|"
      "-------------:|--------:|--------:|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int gs : kGroupSizes) {
    if (a.n_neurons() % gs != 0 || a.n_neurons() / gs > kx::sparse::kMaxGroupsPerLayer) continue;
    double random_overfetch = 0.0;
    std::vector<kx::sparse::GroupingQuality> qs;
    std::vector<double> times;
    std::vector<double> cpu_times;
    for (const Variant& var : kVariants) {
      std::vector<double> ms;
      std::vector<double> cpu_ms;
      std::vector<int32_t> perm;
      for (int r = 0; r < o.repeats; ++r) {
        const double cpu0 = ThreadCpuMs();
        const int64_t t0 = kx::NowNs();
        auto p = kx::sparse::GroupNeurons(c, gs, var.method, o.seed, var.affinity);
        ms.push_back(static_cast<double>(kx::NowNs() - t0) * 1e-6);
        cpu_ms.push_back(ThreadCpuMs() - cpu0);
        if (!p.ok()) {
          std::fprintf(stderr, "GroupNeurons: %s\n", p.status().ToString().c_str());
          std::exit(1);
        }
        perm = *std::move(p);
      }
      qs.push_back(kx::sparse::EvaluateGrouping(perm, gs, held));
      times.push_back(Median(ms));
      cpu_times.push_back(Median(cpu_ms));
      if (var.method == GroupingMethod::kRandom) random_overfetch = qs.back().overfetch;
    }
    for (size_t k = 0; k < qs.size(); ++k) {
      const auto& q = qs[k];
      const double vs_random = random_overfetch > 0 ? q.overfetch / random_overfetch : 0.0;
      std::printf("| %2d | %-9s | %12.5f | %10.4f | %9.3f | %12.2f | %12.2f | %7.2f | %7.2f |\n",
                  gs, kVariants[k].name, q.intra_coactivation, q.overfetch, vs_random,
                  q.groups_per_token, q.active_per_token, times[k], cpu_times[k]);
      rows.push_back({{"group_size", gs},
                      {"method", kVariants[k].name},
                      {"affinity", kx::sparse::EdgeAffinityName(kVariants[k].affinity)},
                      {"intra_coactivation", q.intra_coactivation},
                      {"overfetch", q.overfetch},
                      {"overfetch_vs_random", vs_random},
                      {"groups_per_token", q.groups_per_token},
                      {"active_per_token", q.active_per_token},
                      {"group_ms_median", times[k]},
                      {"group_cpu_ms_median", cpu_times[k]}});
    }
  }
  return {{"layer", name},
          {"neurons", a.n_neurons()},
          {"calibration_tokens", calib.n_tokens()},
          {"held_out_tokens", held.n_tokens()},
          {"coactivation_ms_median", Median(coact_ms)},
          {"threads", o.threads},
          {"rows", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: bench_grouping [--calib-frac F] [--threads N] [--repeats R] [--seed S] "
                 "[--tokens T] [--json PATH] [layer.kxact ...]\n");
    return 2;
  }
  nlohmann::json layers = nlohmann::json::array();
  if (o.files.empty()) {
    const int64_t t0 = kx::NowNs();
    const ActivityMatrix a = MakeSynthetic(o.tokens, o.seed);
    std::printf("synthetic profile: %lld tokens × %d neurons (%.0f ms to generate)\n",
                static_cast<long long>(a.n_tokens()), a.n_neurons(),
                static_cast<double>(kx::NowNs() - t0) * 1e-6);
    layers.push_back(BenchLayer("synthetic", a, o));
  }
  for (const std::string& path : o.files) {
    auto a = kx::sparse::ReadActivity(path);
    if (!a.ok()) {
      std::fprintf(stderr, "%s\n", a.status().ToString().c_str());
      return 1;
    }
    layers.push_back(BenchLayer(path, *a, o));
  }
  const nlohmann::json out = {{"benchmark", "grouping"}, {"layers", layers}};
  if (!o.json_path.empty()) {
    std::ofstream(o.json_path) << out.dump(2) << "\n";
    std::printf("\nJSON written to %s\n", o.json_path.c_str());
  }
  return 0;
}
