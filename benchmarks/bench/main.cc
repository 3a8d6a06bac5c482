// kairox-bench: prompt-processing and generation throughput, following
// llama-bench's conventions (tests pp<N> and tg<N>, -r repetitions, t/s as
// mean ± stddev, tokenisation and sampling excluded), each beside a measured
// ceiling:
//   tg: bytes read per token ÷ read bandwidth measured by this program with
//       its own threads, at a cache-resident and at the DRAM working set;
//   pp: FLOPs per token ÷ the peak of the engine's Q4_1 matmul, measured
//       on a large problem.
// Probes run between repetitions (the machine's caches and clocks are shared
// with the runs) and their medians are reported.
//
//   kairox-bench -m model.gguf [-t 1,2,4] [-p 128,512] [-n 64,128] [-r 5] [-d 0,512]
//                [-o md|csv|json|jsonl] [--e2e]
//                [--no-probes] [--tg-tokens random|greedy]
//
// -p, -n, -t and -d take comma lists, as llama-bench's do: every thread count and
// depth is a separate instance, each running a pp test per -p value and a tg test per
// -n value (0 skips), in that order.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/cpu_features.h"
#include "base/huge_pages.h"
#include "base/status.h"
#include "base/timer.h"
#include "bench/probes.h"
#include "bench/report.h"
#include "common/cli_app.h"
#include "common/sparse_args.h"
#include "engine/device_ffn.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/sparse_runtime.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/model.h"

#ifndef KX_VERSION_STRING
#define KX_VERSION_STRING "unknown"
#endif

namespace kx::bench {
namespace {

// A working set that fits in L2 on current x86 cores, split across threads.
constexpr uint64_t kCacheProbeBytes = uint64_t{1} << 20;
// Single-token evaluations that warm up caches and the thread pool before tg.
constexpr int kTgWarmupTokens = 4;
constexpr uint64_t kTokenSeed = 0xBE7C4;

struct Args {
  std::string model;
  std::vector<int64_t> threads;  // empty: the engine's default (all cores)
  std::vector<int64_t> n_prompt = {512};
  std::vector<int64_t> n_gen = {128};
  std::vector<int64_t> depth = {0};
  int repetitions = 5;
  int n_batch = 0;  // engine default
  std::string output = "md";
  bool e2e = false;
  std::string kv_type = "f16";
  EngineOptions engine;  // the sparsity, tier and device flags
  bool compare_dense = true;
  // Off: no bandwidth or peak probes (a tg probe allocates the model's bytes, which a memory
  // limit around the process must not be charged with: benchmarks/tier/cgroup_bench.py).
  bool probes = true;
  bool greedy = false;  // tg feeds each token's argmax instead of random tokens
  int mmap = 1;         // 0: read the weights into memory (huge pages), llama-bench's --mmap 0
};

// A comma list of integers, each in [lo, hi] (llama-bench's `-p 128,512`). Repeating the
// flag adds to the list.
CLI::Option* AddIntList(CLI::App& app, const std::string& names, std::vector<int64_t>* dst,
                        int64_t lo, int64_t hi, const std::string& help) {
  std::string def;
  for (int64_t v : *dst) def += (def.empty() ? "" : ",") + std::to_string(v);
  return app.add_option(names, *dst, help)
      ->delimiter(',')
      ->check(cli::IntIn(lo, hi))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("N[,N...]")
      ->default_str(def);
}

// Parses argv into *a. Returns cli::kContinue to go on, else the exit code (0 after --help
// or --version, 1 after an error, printed as "kairox-bench: error: ...").
int ParseArgs(int argc, char** argv, Args* a) {
  CLI::App app(
      "Prompt-processing (pp) and generation (tg) throughput, llama-bench's way, each beside a "
      "measured ceiling.",
      "kairox-bench");
  cli::SetUp(app);
  bool version = false;
  app.add_flag("--version", version, "print the version and exit");
  a->model = cli::DefaultModelPath();
  app.add_option("-m,--model", a->model,
                 "GGUF model (default: $KAIROX_MODEL, else the one cmake/fetch_model.sh fetches)");
  AddIntList(app, "-t,--threads", &a->threads, 1, cli::kMaxThreads, "threads, a comma list")
      ->default_str("all cores");
  AddIntList(app, "-p,--n-prompt", &a->n_prompt, 0, cli::kMaxContext,
             "prompt tokens of the pp tests, a comma list (0: no pp test)");
  AddIntList(app, "-n,--n-gen", &a->n_gen, 0, cli::kMaxContext,
             "generated tokens of the tg tests, a comma list (0: no tg test)");
  AddIntList(app, "-d,--n-depth", &a->depth, 0, cli::kMaxContext,
             "tokens in the KV cache before each test, a comma list");
  cli::AddInt(app, "-r,--repetitions", &a->repetitions, 1, 100000, "repetitions of each test");
  cli::AddInt(app, "-b,--batch-size", &a->n_batch, 1, cli::kMaxContext, "tokens per prefill batch")
      ->default_str("the engine's");
  app.add_option("-o,--output", a->output,
                 "output format: md (a table), csv, json (an array) or jsonl (an object per "
                 "line), with llama-bench's field names")
      ->check(cli::OneOf({"md", "csv", "json", "jsonl"}));
  app.add_flag("--e2e", a->e2e, "also time tg with the default sampler included");
  app.add_flag_callback(
      "--no-dense", [a] { a->compare_dense = false; },
      "with a sidecar: skip the dense tg run beside the sparse one");
  app.add_option("--kv-type", a->kv_type, "KV cache element type")
      ->check(cli::OneOf({"f16", "q8_0"}));
  app.add_flag_callback(
      "--no-probes", [a] { a->probes = false; },
      "skip the ceiling probes (their buffers are as large as the model)");
  app.add_option_function<std::string>(
         "--tg-tokens", [a](const std::string& v) { a->greedy = v == "greedy"; },
         "tg's input tokens: random (llama-bench's way) or greedy (each token is the argmax of "
         "the previous one's logits, from one random token: the model's own continuation)")
      ->check(cli::OneOf({"random", "greedy"}))
      ->default_str("random");
  cli::AddInt(app, "--mmap", &a->mmap, 0, 1,
              "1: map the model file; 0: read it into memory in 2 MiB pages (tg streams the "
              "weights faster through them: docs/performance.md)");
  cli::AddSparseOptions(app, &a->engine);

  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "kairox-bench: error: %s\n", msg.c_str());
    return 1;
  };
  if (const int rc = cli::Parse(app, argc, argv); rc != cli::kContinue) return rc;
  if (version) {
    std::printf("kairox-bench %s\n", KX_VERSION_STRING);
    return 0;
  }
  if (a->kv_type == "q8_0") a->engine.kv_type = EngineOptions::KvType::kQ8_0;
  const auto all_zero = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
  };
  if (all_zero(a->n_prompt) && all_zero(a->n_gen)) {
    return fail("nothing to run: every -p and -n value is 0");
  }
  return cli::kContinue;
}

ModelInfo DescribeModel(const Engine& engine, const std::string& path) {
  ModelInfo m;
  m.filename = path;
  // The weight type holding the most bytes names the quantization.
  std::map<GgmlType, uint64_t> bytes_by_type;
  for (const GgufTensorInfo& t : engine.gguf().tensors()) {
    m.size_bytes += t.size_bytes;
    m.n_params += static_cast<uint64_t>(t.n_elements());
    if (t.n_dims >= 2) bytes_by_type[t.type] += t.size_bytes;
  }
  std::string quant = "?";
  uint64_t best = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > best) {
      best = bytes;
      quant = TypeName(type);
    }
  }
  std::string size_label;
  if (auto s = engine.gguf().GetString("general.size_label"); s.ok()) {
    size_label = std::string(*s);
  } else {
    size_label = absl::StrFormat("%.0fM", static_cast<double>(m.n_params) * 1e-6);
  }
  m.type = absl::StrFormat("%s %s %s", engine.hparams().arch, size_label, quant);
  return m;
}

std::string CpuInfo() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string NowIso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string TestName(const char* kind, int n, int depth, bool e2e) {
  std::string name = absl::StrFormat("%s%d", kind, n);
  if (e2e) name += " e2e";
  if (depth > 0) name += absl::StrFormat(" @ d%d", depth);
  return name;
}

// Per-op totals by name; the engine's profile only grows, so a test's share
// is the difference of snapshots taken around its timed region.
using ProfileTotals = std::map<std::string, std::pair<int64_t, int64_t>>;  // ns, calls

ProfileTotals Snapshot(const OpProfile& p) {
  ProfileTotals t;
  for (const OpProfile::Entry& e : p.entries) {
    auto& [ns, calls] = t[e.name];
    ns += e.ns;
    calls += e.calls;
  }
  return t;
}

void AddDifference(const ProfileTotals& before, const ProfileTotals& after, ProfileTotals& sum) {
  for (const auto& [name, v] : after) {
    std::pair<int64_t, int64_t> b{0, 0};
    if (auto it = before.find(name); it != before.end()) b = it->second;
    sum[name].first += v.first - b.first;
    sum[name].second += v.second - b.second;
  }
}

std::vector<OpTime> ToOpTimes(const ProfileTotals& sum, int64_t tokens) {
  std::vector<OpTime> ops;
  int64_t total_ns = 0;
  for (const auto& [name, v] : sum) total_ns += v.first;
  if (tokens <= 0 || total_ns <= 0) return ops;
  for (const auto& [name, v] : sum) {
    if (v.second == 0) continue;
    OpTime op;
    op.name = name;
    op.ms_per_token = static_cast<double>(v.first) * 1e-6 / static_cast<double>(tokens);
    op.calls_per_token = static_cast<double>(v.second) / static_cast<double>(tokens);
    op.percent = 100.0 * static_cast<double>(v.first) / static_cast<double>(total_ns);
    ops.push_back(op);
  }
  std::sort(ops.begin(), ops.end(),
            [](const OpTime& a, const OpTime& b) { return a.ms_per_token > b.ms_per_token; });
  return ops;
}

uint64_t DenseFfnBytes(const Engine& engine) {
  uint64_t total = 0;
  for (const LlamaLayerWeights& L : engine.model()->weights().layers) {
    total += L.ffn_up.bytes() + L.ffn_gate.bytes() + L.ffn_down.bytes();
  }
  return total;
}

class Bench {
 public:
  Bench(const Args& args, Engine& engine) : args_(args), engine_(engine), rng_(kTokenSeed) {}

  std::vector<int32_t> RandomTokens(int n) {
    std::uniform_int_distribution<int32_t> dist(0, engine_.n_vocab() - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = dist(rng_);
    return ids;
  }

  // Empties the cache and fills it to the requested depth (untimed).
  absl::Status ResetToDepth(int depth) {
    engine_.TruncateKv(0);
    if (depth > 0) KX_RETURN_IF_ERROR(engine_.Eval(RandomTokens(depth)));
    return absl::OkStatus();
  }

  TestResult NewResult(const char* kind, int n, int depth, bool e2e) const {
    TestResult r;
    r.name = TestName(kind, n, depth, e2e);
    r.n_depth = depth;
    r.n_threads = engine_.n_threads();
    r.e2e = e2e;
    return r;
  }

  absl::StatusOr<TestResult> RunPrompt(int n_prompt, int depth) {
    TestResult r = NewResult("pp", n_prompt, depth, false);
    r.n_prompt = n_prompt;
    r.flops_per_token = engine_.FlopsPerToken();
    const std::vector<int32_t> prompt = RandomTokens(n_prompt);
    KX_RETURN_IF_ERROR(ResetToDepth(depth));  // warm-up run
    KX_RETURN_IF_ERROR(engine_.Eval(prompt));
    r.peak_method = MatmulPeakMethod();
    std::vector<double> peaks;
    ProfileTotals op_sum;
    for (int rep = 0; rep < args_.repetitions; ++rep) {
      KX_RETURN_IF_ERROR(ResetToDepth(depth));
      const ProfileTotals before = Snapshot(engine_.profile());
      Stopwatch sw;
      KX_RETURN_IF_ERROR(engine_.Eval(prompt));
      r.samples_ns.push_back(sw.ElapsedNs());
      AddDifference(before, Snapshot(engine_.profile()), op_sum);
      if (args_.probes) {
        peaks.push_back(MatmulPeakGflops(engine_.n_threads()));
      }
      Progress(r, rep);
    }
    r.peak_gflops = Summarize(peaks).median;
    r.profile = ToOpTimes(op_sum, static_cast<int64_t>(n_prompt) * args_.repetitions);
    return r;
  }

  absl::StatusOr<TestResult> RunGeneration(int n_gen, int depth) {
    TestResult r = NewResult("tg", n_gen, depth, false);
    r.n_gen = n_gen;
    r.cache_probe_bytes = kCacheProbeBytes;
    KX_RETURN_IF_ERROR(ResetToDepth(depth));  // warm-up
    for (int32_t id : RandomTokens(kTgWarmupTokens)) KX_RETURN_IF_ERROR(engine_.Eval({&id, 1}));

    ProfileTotals op_sum;
    std::vector<double> kv_bytes, dram, cache;
    int64_t disk_read = 0;  // storage reads of the timed tokens (-1: /proc/self/io unreadable)
    const double weight_bytes = static_cast<double>(engine_.WeightBytesPerToken());
    for (int rep = 0; rep < args_.repetitions; ++rep) {
      KX_RETURN_IF_ERROR(ResetToDepth(depth));
      if (rep == 0) engine_.ResetProfile();  // sparse statistics of the timed tokens only
      const std::vector<int32_t> ids = RandomTokens(n_gen);
      const double kv_start = static_cast<double>(engine_.KvBytesPerToken());
      const ProfileTotals before = Snapshot(engine_.profile());
      const int64_t disk_before = ProcReadBytes();
      Stopwatch sw;
      int32_t next = ids[0];
      for (int i = 0; i < n_gen; ++i) {
        const int32_t id = args_.greedy ? next : ids[static_cast<size_t>(i)];
        KX_RETURN_IF_ERROR(engine_.Eval({&id, 1}));
        if (args_.greedy) next = ArgMax(engine_.Logits());
      }
      r.samples_ns.push_back(sw.ElapsedNs());
      const int64_t disk_after = ProcReadBytes();
      if (disk_before < 0 || disk_after < 0) {
        disk_read = -1;
      } else if (disk_read >= 0) {
        disk_read += disk_after - disk_before;
      }
      AddDifference(before, Snapshot(engine_.profile()), op_sum);
      // KV read per token grows linearly with depth: the run's mean is the
      // mean of its ends.
      const double kv_mean = 0.5 * (kv_start + static_cast<double>(engine_.KvBytesPerToken()));
      kv_bytes.push_back(kv_mean);
      if (args_.probes) {
        const uint64_t working_set = static_cast<uint64_t>(weight_bytes + kv_mean);
        dram.push_back(ReadBandwidthGBps(working_set, engine_.n_threads()));
        cache.push_back(ReadBandwidthGBps(kCacheProbeBytes, engine_.n_threads()));
      }
      Progress(r, rep);
    }
    r.disk_read_bytes_per_token =
        disk_read < 0
            ? -1.0
            : static_cast<double>(disk_read) / (static_cast<double>(n_gen) * args_.repetitions);
    r.weight_bytes_per_token = weight_bytes;
    r.graph_parts = engine_.DecodeGraphParts();
    if (const SparseRuntime* sp = engine_.sparse(); sp != nullptr && sp->UsesBundles(1)) {
      const SparseStats& st = sp->stats();
      const double denom = static_cast<double>(st.layer_tokens) * static_cast<double>(st.n_ff);
      r.sparse = true;
      r.name += " sparse";
      r.sparsity = sp->sparsity();
      r.predicted_fraction = denom > 0 ? st.predicted / denom : 0.0;
      r.kept_fraction = st.predicted > 0 ? static_cast<double>(st.kept) / st.predicted : 0.0;
      r.weight_bytes_per_token = weight_bytes - static_cast<double>(DenseFfnBytes(engine_)) +
                                 r.predicted_fraction * sp->sidecar().BundleBytes() +
                                 static_cast<double>(sp->sidecar().PredictorBytes());
      if (const BundleTier* tier = sp->tier(); tier != nullptr) {
        const TierStats& ts = tier->stats();
        const double tokens = static_cast<double>(n_gen) * args_.repetitions;
        r.tiered = true;
        r.name += " tier";
        r.policy = std::string(tier->policy().name());
        r.io_backend = std::string(tier->io_backend()) + (tier->direct_io() ? " O_DIRECT" : "");
        r.slots_per_layer = tier->slots_per_layer();
        r.groups_per_layer = tier->residency().n_groups();
        r.hit_rate = ts.groups_needed > 0 ? static_cast<double>(ts.hits) / ts.groups_needed : 0;
        r.needed_fraction = ts.layer_steps > 0
                                ? static_cast<double>(ts.groups_needed) /
                                      (static_cast<double>(ts.layer_steps) * r.groups_per_layer)
                                : 0;
        r.read_bytes_per_token = static_cast<double>(ts.bytes_read) / tokens;
        r.read_ops_per_token = static_cast<double>(ts.read_ops) / tokens;
        r.io_wait_ms_per_token = static_cast<double>(ts.io_wait_ns) * 1e-6 / tokens;
        r.ffn_ms_per_token = static_cast<double>(ts.compute_ns) * 1e-6 / tokens;
        double lambda = 0;
        const int n_layer = tier->residency().n_layer();
        for (int l = 0; l < n_layer; ++l) lambda += tier->policy().lambda(l) / n_layer;
        r.lambda_mean = lambda;
      }
      if (const DeviceFfn* d = engine_.device_ffn(); d != nullptr) {
        const DeviceFfnStats& ds = d->stats();
        const double tokens = static_cast<double>(n_gen) * args_.repetitions;
        r.device_ffn = true;
        r.name += " split";
        r.device_policy = std::string(d->policy().name());
        r.device_slots_per_layer = d->slots_per_layer();
        r.device_group_share = ds.groups_needed > 0
                                   ? static_cast<double>(ds.groups_on_device) / ds.groups_needed
                                   : 0.0;
        r.device_neuron_share = ds.neurons_needed > 0
                                    ? static_cast<double>(ds.neurons_on_device) / ds.neurons_needed
                                    : 0.0;
        r.device_loads_per_token = static_cast<double>(ds.loads) / tokens;
        r.device_load_bytes_per_token = static_cast<double>(ds.bytes_loaded) / tokens;
        r.device_wait_ms_per_token = static_cast<double>(ds.device_wait_ns) * 1e-6 / tokens;
        r.device_cpu_ms_per_token = static_cast<double>(ds.cpu_ns) * 1e-6 / tokens;
        r.device_load_wait_ms_per_token = static_cast<double>(ds.load_wait_ns) * 1e-6 / tokens;
        r.device_staging_bundles = d->staging_bundles();
        r.device_staging_wait_ms_per_token =
            static_cast<double>(ds.staging_wait_ns) * 1e-6 / tokens;
        double lambda = 0;
        const int n_layer = d->residency().n_layer();
        for (int l = 0; l < n_layer; ++l) lambda += d->policy().lambda(l) / n_layer;
        r.device_lambda_mean = lambda;
        r.device_upload_ms_per_token = static_cast<double>(ds.upload_ns) * 1e-6 / tokens;
        r.device_compute_ms_per_token = static_cast<double>(ds.compute_ns) * 1e-6 / tokens;
        r.device_download_ms_per_token = static_cast<double>(ds.download_ns) * 1e-6 / tokens;
        r.device_load_gb_per_s = ds.load_ns > 0 ? static_cast<double>(ds.load_bytes_timed) /
                                                      static_cast<double>(ds.load_ns)
                                                : 0.0;
        r.device_cpu_neurons_per_token =
            static_cast<double>(ds.neurons_needed - ds.neurons_on_device) / tokens;
        if (const sparse::DualThreshold* dual = sp->dual(); dual != nullptr) {
          const sparse::DualThresholdStats& st = dual->stats();
          const double steps = static_cast<double>(std::max<int64_t>(st.steps, 1));
          r.dual = true;
          r.name += " dual";
          r.dual_theta_g = st.theta_g_sum / steps;
          r.dual_theta_c = st.theta_c_sum / steps;
          r.dual_theta = st.theta_sum / steps;
          r.dual_gained_per_token = static_cast<double>(st.gained) / tokens;
          r.dual_dropped_per_token = static_cast<double>(st.dropped) / tokens;
          r.dual_clamped_share = static_cast<double>(st.clamped) / steps;
        }
      }
      StallBreakdown(*sp, n_gen, r);
    }
    GraphStalls(n_gen, r);  // dense decode too: device layers are graph externals
    r.kv_bytes_per_token = Summarize(kv_bytes).mean;
    r.bw_dram_gbps = Summarize(dram).median;
    r.bw_cache_gbps = Summarize(cache).median;
    r.profile = ToOpTimes(op_sum, static_cast<int64_t>(n_gen) * args_.repetitions);
    return r;
  }

  // Where the timed tokens' time went, per token (report.h). Needs r.samples_ns.
  void StallBreakdown(const SparseRuntime& sp, int n_gen, TestResult& r) {
    const BundleTier* tier = sp.tier();
    const DeviceFfn* d = engine_.device_ffn();
    if (tier == nullptr && d == nullptr) return;
    const double tokens = static_cast<double>(n_gen) * args_.repetitions;
    double wall_ns = 0;
    for (int64_t ns : r.samples_ns) wall_ns += static_cast<double>(ns);
    const auto ms = [&](int64_t ns) { return static_cast<double>(ns) * 1e-6 / tokens; };
    r.stall = true;
    if (d != nullptr) {
      const DeviceFfnStats& ds = d->stats();
      r.stall_cpu_ms_per_token = ms(ds.cpu_ns);
      r.stall_gpu_ms_per_token = ms(ds.gpu_ns);
      r.stall_h2d_critical_ms_per_token = ms(ds.h2d_critical_ns);
      r.stall_h2d_background_ms_per_token = ms(ds.h2d_background_ns);
    } else {
      r.stall_cpu_ms_per_token = ms(tier->stats().compute_ns);  // Acquire → Release
    }
    r.stall_disk_ms_per_token = tier != nullptr ? ms(tier->stats().io_wait_ns) : 0.0;
    r.stall_other_ms_per_token =
        wall_ns * 1e-6 / tokens -
        (r.stall_cpu_ms_per_token + r.stall_gpu_ms_per_token + r.stall_h2d_critical_ms_per_token +
         r.stall_h2d_background_ms_per_token + r.stall_disk_ms_per_token);
  }

  // The decode graph's per-tag stalls with device externals (device layers, the split FFN)
  // or a RAM tier, per timed token (report.h).
  void GraphStalls(int n_gen, TestResult& r) {
    const DecodeGraphStats* gs = engine_.decode_graph_stats();
    if (gs == nullptr || gs->runs == 0) return;
    const double tokens = static_cast<double>(n_gen) * args_.repetitions;
    const auto ms = [&](int64_t ns) { return static_cast<double>(ns) * 1e-6 / tokens; };
    r.graph_stall = true;
    r.graph_cpu_ms_per_token = ms(gs->wall_ns - gs->external_wait_ns);
    r.graph_gpu_ms_per_token = ms(gs->wait_ns[DecodeGraphStats::kGpu]);
    r.graph_h2d_critical_ms_per_token = ms(gs->wait_ns[DecodeGraphStats::kH2dCritical]);
    r.graph_h2d_background_ms_per_token = ms(gs->wait_ns[DecodeGraphStats::kH2dBackground]);
    r.graph_disk_ms_per_token = ms(gs->wait_ns[DecodeGraphStats::kDisk]);
    r.graph_early_signals = gs->early_signals;
  }

  // tg with the default sampler choosing each next token from the logits.
  absl::StatusOr<TestResult> RunEndToEnd(int n_gen, int depth) {
    TestResult r = NewResult("tg", n_gen, depth, true);
    r.n_gen = n_gen;
    for (int rep = 0; rep < args_.repetitions; ++rep) {
      KX_RETURN_IF_ERROR(ResetToDepth(depth));
      Sampler sampler{SamplerParams{}};
      std::vector<int32_t> history = RandomTokens(1);
      history.reserve(static_cast<size_t>(n_gen) + 1);
      Stopwatch sw;
      for (int i = 0; i < n_gen; ++i) {
        KX_RETURN_IF_ERROR(engine_.Eval({&history.back(), 1}));
        history.push_back(sampler.Sample(engine_.Logits(), history));
      }
      r.samples_ns.push_back(sw.ElapsedNs());
      Progress(r, rep);
    }
    return r;
  }

 private:
  void Progress(const TestResult& r, int rep) const {
    std::fprintf(stderr, "kairox-bench: %s: repetition %d/%d: %.2f t/s\n", r.name.c_str(), rep + 1,
                 args_.repetitions, r.n_tokens() * 1e9 / static_cast<double>(r.samples_ns.back()));
  }

  const Args& args_;
  Engine& engine_;
  std::mt19937_64 rng_;
};

int MaxOf(const std::vector<int64_t>& v) {
  return v.empty() ? 0 : static_cast<int>(*std::max_element(v.begin(), v.end()));
}

// The tests of one instance (a thread count and a depth) on `engine`, appended to *results:
// a pp test per -p value, then a tg test per -n value (with a sidecar, the dense run and,
// under a RAM budget, the all-in-RAM run before the sparse one), then e2e.
absl::Status RunInstance(const Args& args, const EngineOptions& opts, Engine& engine, int depth,
                         std::vector<TestResult>* results) {
  Bench bench(args, engine);
  for (int64_t p : args.n_prompt) {
    if (p == 0) continue;
    KX_ASSIGN_OR_RETURN(TestResult r, bench.RunPrompt(static_cast<int>(p), depth));
    results->push_back(std::move(r));
  }
  for (int64_t n64 : args.n_gen) {
    if (n64 == 0) continue;
    const int n = static_cast<int>(n64);
    // With a sidecar, the dense model first, on the same weights in the same run.
    if (engine.sparse() != nullptr && args.compare_dense) {
      EngineOptions dense_opts = opts;
      dense_opts.sparse = false;
      dense_opts.ram_budget.clear();
      KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> dense,
                          Engine::Create(engine.model(), dense_opts));
      Bench dense_bench(args, *dense);
      KX_ASSIGN_OR_RETURN(TestResult d, dense_bench.RunGeneration(n, depth));
      d.name += " dense";
      results->push_back(std::move(d));
      // Under a RAM budget, also the sparse path with every bundle in RAM:
      // the tier's ceiling, measured in the same run.
      if (engine.sparse()->tier() != nullptr) {
        EngineOptions ram_opts = opts;
        ram_opts.ram_budget.clear();
        KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> all, Engine::Create(engine.model(), ram_opts));
        Bench all_bench(args, *all);
        KX_ASSIGN_OR_RETURN(TestResult a, all_bench.RunGeneration(n, depth));
        a.name += " all-in-RAM";
        results->push_back(std::move(a));
      }
    }
    KX_ASSIGN_OR_RETURN(TestResult r, bench.RunGeneration(n, depth));
    results->push_back(std::move(r));
    if (args.e2e) {
      KX_ASSIGN_OR_RETURN(TestResult e, bench.RunEndToEnd(n, depth));
      results->push_back(std::move(e));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const Args& args) {
  {
    std::ifstream probe(args.model, std::ios::binary);
    if (!probe) return absl::NotFoundError("cannot open model file '" + args.model + "'");
  }
  EngineOptions opts = args.engine;
  if (args.n_batch > 0) opts.n_batch = args.n_batch;
  // Room for the deepest test; tg's warm-up adds a few tokens.
  opts.n_ctx =
      MaxOf(args.depth) + std::max({MaxOf(args.n_prompt), MaxOf(args.n_gen) + 1, kTgWarmupTokens});
  // One engine per thread count, all on the weights the first one loaded.
  const std::vector<int64_t> threads =
      args.threads.empty() ? std::vector<int64_t>{0} : args.threads;
  opts.n_threads = static_cast<int>(threads[0]);
  ModelOptions model_opts;
  model_opts.use_mmap = args.mmap != 0;
  KX_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(args.model, model_opts));
  KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> first, Engine::Create(std::move(model), opts));

  RunInfo run;
  run.model = DescribeModel(*first, args.model);
  run.n_batch = args.n_batch > 0 ? args.n_batch : EngineOptions{}.n_batch;
  run.isa = IsaName(SelectedIsa());
  run.cpu_info = CpuInfo();
  run.test_time = NowIso8601();
  run.peak_method = MatmulPeakMethod();
  run.kv_type = args.kv_type;
  run.version = KX_VERSION_STRING;
  run.n_gpu_layers = first->n_device_layers();
  if (first->n_device_layers() > 0 || first->device_head()) {
    run.gpu_info = first->device_name();
    run.backend = absl::StrCat("CPU+", first->device_name(), " (", first->n_device_layers(),
                               " layers", first->device_head() ? ", head)" : ")");
  }
  run.repetitions = args.repetitions;

  std::vector<TestResult> results;
  for (size_t i = 0; i < threads.size(); ++i) {
    std::unique_ptr<Engine> other;
    if (i > 0) {
      EngineOptions t_opts = opts;
      t_opts.n_threads = static_cast<int>(threads[i]);
      KX_ASSIGN_OR_RETURN(other, Engine::Create(first->model(), t_opts));
    }
    Engine& engine = i == 0 ? *first : *other;
    EngineOptions t_opts = opts;
    t_opts.n_threads = engine.n_threads();
    for (int64_t depth : args.depth) {
      KX_RETURN_IF_ERROR(RunInstance(args, t_opts, engine, static_cast<int>(depth), &results));
    }
  }
  if (const GgufFile& f = first->model()->gguf(); f.file_size() > 0) {
    const int64_t huge = HugeMappedBytes(f.data());
    if (huge >= 0) run.weights_huge_share = static_cast<double>(huge) / f.file_size();
  }
  if (args.output == "csv") {
    PrintCsv(run, results, stdout);
  } else if (args.output == "json") {
    PrintJson(run, results, stdout);
  } else if (args.output == "jsonl") {
    PrintJsonl(run, results, stdout);
  } else {
    PrintMarkdown(run, results, stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kx::bench

int main(int argc, char** argv) {
  kx::bench::Args args;
  if (const int rc = kx::bench::ParseArgs(argc, argv, &args); rc != kx::cli::kContinue) return rc;
  absl::Status s = kx::bench::Run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "kairox-bench: error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
