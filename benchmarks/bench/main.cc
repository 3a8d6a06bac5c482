// kairox-bench: prompt-processing and generation throughput, following
// llama-bench's conventions (tests pp<N> and tg<N>, -r repetitions, t/s as
// mean ± stddev, tokenisation and sampling excluded), each beside a measured
// ceiling:
//   tg: bytes read per token ÷ read bandwidth measured by this program with
//       its own threads, at a cache-resident and at the DRAM working set;
//   pp: FLOPs per token ÷ the peak of the matmul prefill runs on: the
//       engine's Q4_1 kernel (--prefill native) or its oneDNN bf16 path
//       (--prefill dnnl), measured on a large problem.
// Probes run between repetitions (the machine's caches and clocks are shared
// with the runs) and their medians are reported.
//
//   kairox-bench -m model.gguf [-t N] [-p 512] [-n 128] [-r 5] [-d 0] [-o md|json] [--e2e]
//                [--prefill native|dnnl]
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
#include "base/status.h"
#include "base/timer.h"
#include "bench/probes.h"
#include "bench/report.h"
#include "common/cli_args.h"
#include "common/sparse_args.h"
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
  int n_threads = 0;
  int n_prompt = 512;
  int n_gen = 128;
  int repetitions = 5;
  int depth = 0;
  int n_batch = 0;  // engine default
  bool json = false;
  bool e2e = false;
  std::string prefill;  // "": the engine's default
  EngineOptions engine;  // the sparsity flags
  bool compare_dense = true;
};

void PrintUsage(std::FILE* out) {
  std::fprintf(out,
               "usage: kairox-bench -m MODEL [options]\n"
               "\n"
               "  -m, --model FILE       GGUF model\n"
               "  -t, --threads N        threads (default: all cores)\n"
               "  -p, --n-prompt N       prompt tokens for the pp test (default 512; 0: skip)\n"
               "  -n, --n-gen N          generated tokens for the tg test (default 128; 0: skip)\n"
               "  -r, --repetitions N    repetitions of each test (default 5)\n"
               "  -d, --n-depth D        run the tests after D tokens in the KV cache (default 0)\n"
               "  -b, --batch-size N     tokens per prefill batch (default: the engine's)\n"
               "  -o, --output md|json   output format (default md)\n"
               "      --e2e              also time tg with the default sampler included\n"
               "      --prefill native|dnnl|dnnl-fast\n"
               "                         batched matmuls: the quantized kernels, or oneDNN bf16\n"
               "                         with split (dnnl) or single bf16 activations (dnnl-fast)\n"
               "                         (default: $KAIROX_PREFILL, else the engine's)\n"
               "      --no-dense         with a sidecar: skip the dense tg run beside the sparse one\n"
               "      --kv-type f16|q8_0 KV cache element type (default f16)\n"
               "  -h, --help             this help\n"
               "      --version          print the version\n"
               "%s", cli::kSparseUsage);
}

// Returns the parsed arguments; exit_now is set for --help/--version.
absl::StatusOr<Args> ParseArgs(int argc, char** argv, bool& exit_now) {
  constexpr long long kMaxCount = 1 << 24;
  cli::Args args(argc, argv,
                 cli::WithSparse({"-m", "--model", "-t", "--threads", "-p", "--n-prompt", "-n",
                                  "--n-gen", "-r", "--repetitions", "-d", "--n-depth", "-b",
                                  "--batch-size", "-o", "--output", "--prefill", "--kv-type"},
                                 false),
                 cli::WithSparse({"-h", "--help", "--version", "--e2e", "--no-dense"}, true));
  Args a;
  exit_now = false;
  if (args.ok() && args.Has("-h", "--help")) {
    PrintUsage(stdout);
    exit_now = true;
    return a;
  }
  if (args.ok() && args.Has("--version")) {
    std::printf("kairox-bench %s\n", KX_VERSION_STRING);
    exit_now = true;
    return a;
  }
  a.model = args.Str("-m", "--model", "");
  a.n_threads = static_cast<int>(args.Int("-t", "--threads", a.n_threads, 1, kMaxCount));
  a.n_prompt = static_cast<int>(args.Int("-p", "--n-prompt", a.n_prompt, 0, kMaxCount));
  a.n_gen = static_cast<int>(args.Int("-n", "--n-gen", a.n_gen, 0, kMaxCount));
  a.repetitions = static_cast<int>(args.Int("-r", "--repetitions", a.repetitions, 1, kMaxCount));
  a.depth = static_cast<int>(args.Int("-d", "--n-depth", a.depth, 0, kMaxCount));
  a.n_batch = static_cast<int>(args.Int("-b", "--batch-size", a.n_batch, 1, kMaxCount));
  const std::string fmt = args.Str("-o", "--output", "md");
  if (fmt != "md" && fmt != "json") args.Fail("-o expects md or json, got '" + fmt + "'");
  a.json = fmt == "json";
  a.e2e = args.Has("--e2e");
  a.compare_dense = !args.Has("--no-dense");
  cli::ApplySparseArgs(args, &a.engine);
  const std::string kv_type = args.Str("--kv-type", "--kv-type", "f16");
  if (kv_type == "q8_0") {
    a.engine.kv_type = EngineOptions::KvType::kQ8_0;
  } else if (kv_type != "f16") {
    args.Fail("--kv-type expects f16 or q8_0, got '" + kv_type + "'");
  }
  // The engine lets KAIROX_PREFILL override its options: the default here
  // too, so the ceiling matches the path that runs.
  const char* env_prefill = std::getenv("KAIROX_PREFILL");
  a.prefill = args.Str("--prefill", "--prefill", env_prefill ? env_prefill : "");
  if (!a.prefill.empty() && a.prefill != "native" && a.prefill != "dnnl" &&
      a.prefill != "dnnl-fast") {
    args.Fail("--prefill expects native, dnnl or dnnl-fast, got '" + a.prefill + "'");
  }
  if (env_prefill != nullptr && a.prefill != env_prefill) {
    args.Fail("--prefill " + a.prefill + " contradicts KAIROX_PREFILL=" + env_prefill +
              " (which the engine obeys)");
  }
  if (!args.ok()) return absl::InvalidArgumentError(args.error());
  if (a.model.empty()) return absl::InvalidArgumentError("no model given (-m MODEL)");
  if (a.n_prompt == 0 && a.n_gen == 0) {
    return absl::InvalidArgumentError("nothing to run: -p and -n are both 0");
  }
  return a;
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
  absl::Status ResetToDepth() {
    engine_.TruncateKv(0);
    if (args_.depth > 0) KX_RETURN_IF_ERROR(engine_.Eval(RandomTokens(args_.depth)));
    return absl::OkStatus();
  }

  absl::StatusOr<TestResult> RunPrompt() {
    TestResult r;
    r.name = TestName("pp", args_.n_prompt, args_.depth, false);
    r.n_prompt = args_.n_prompt;
    r.n_depth = args_.depth;
    r.flops_per_token = engine_.FlopsPerToken();
    const std::vector<int32_t> prompt = RandomTokens(args_.n_prompt);
    KX_RETURN_IF_ERROR(ResetToDepth());  // warm-up run (converts oneDNN weights)
    KX_RETURN_IF_ERROR(engine_.Eval(prompt));
    // The ceiling is the peak of the path the batches really took.
    const bool dnnl = engine_.PrefillWeightBytes() > 0;
    const bool split = args_.prefill != "dnnl-fast";
    r.prefill_weight_bytes = engine_.PrefillWeightBytes();
    r.peak_method = dnnl ? DnnlMatmulPeakMethod(split) : MatmulPeakMethod();
    std::vector<double> peaks;
    ProfileTotals op_sum;
    for (int rep = 0; rep < args_.repetitions; ++rep) {
      KX_RETURN_IF_ERROR(ResetToDepth());
      const ProfileTotals before = Snapshot(engine_.profile());
      Stopwatch sw;
      KX_RETURN_IF_ERROR(engine_.Eval(prompt));
      r.samples_ns.push_back(sw.ElapsedNs());
      AddDifference(before, Snapshot(engine_.profile()), op_sum);
      peaks.push_back(dnnl ? DnnlMatmulPeakGflops(engine_.n_threads(), split)
                           : MatmulPeakGflops(engine_.n_threads()));
      Progress(r, rep);
    }
    r.peak_gflops = Summarize(peaks).median;
    r.profile = ToOpTimes(op_sum, static_cast<int64_t>(args_.n_prompt) * args_.repetitions);
    return r;
  }

  absl::StatusOr<TestResult> RunGeneration() {
    TestResult r;
    r.name = TestName("tg", args_.n_gen, args_.depth, false);
    r.n_gen = args_.n_gen;
    r.n_depth = args_.depth;
    r.cache_probe_bytes = kCacheProbeBytes;
    KX_RETURN_IF_ERROR(ResetToDepth());  // warm-up
    for (int32_t id : RandomTokens(kTgWarmupTokens)) KX_RETURN_IF_ERROR(engine_.Eval({&id, 1}));

    ProfileTotals op_sum;
    std::vector<double> kv_bytes, dram, cache;
    const double weight_bytes = static_cast<double>(engine_.WeightBytesPerToken());
    for (int rep = 0; rep < args_.repetitions; ++rep) {
      KX_RETURN_IF_ERROR(ResetToDepth());
      if (rep == 0) engine_.ResetProfile();  // sparse statistics of the timed tokens only
      const std::vector<int32_t> ids = RandomTokens(args_.n_gen);
      const double kv_start = static_cast<double>(engine_.KvBytesPerToken());
      const ProfileTotals before = Snapshot(engine_.profile());
      Stopwatch sw;
      for (const int32_t& id : ids) KX_RETURN_IF_ERROR(engine_.Eval({&id, 1}));
      r.samples_ns.push_back(sw.ElapsedNs());
      AddDifference(before, Snapshot(engine_.profile()), op_sum);
      // KV read per token grows linearly with depth: the run's mean is the
      // mean of its ends.
      const double kv_mean = 0.5 * (kv_start + static_cast<double>(engine_.KvBytesPerToken()));
      kv_bytes.push_back(kv_mean);
      const uint64_t working_set = static_cast<uint64_t>(weight_bytes + kv_mean);
      dram.push_back(ReadBandwidthGBps(working_set, engine_.n_threads()));
      cache.push_back(ReadBandwidthGBps(kCacheProbeBytes, engine_.n_threads()));
      Progress(r, rep);
    }
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
        const double tokens = static_cast<double>(args_.n_gen) * args_.repetitions;
        r.tiered = true;
        r.name += " tier";
        r.policy = std::string(tier->policy().name());
        r.io_backend = std::string(tier->io_backend()) + (tier->direct_io() ? " O_DIRECT" : "");
        r.slots_per_layer = tier->slots_per_layer();
        r.groups_per_layer = tier->residency().n_groups();
        r.hit_rate = ts.groups_needed > 0 ? static_cast<double>(ts.hits) / ts.groups_needed : 0;
        r.needed_fraction = ts.layer_steps > 0 ? static_cast<double>(ts.groups_needed) /
                                                     (static_cast<double>(ts.layer_steps) *
                                                      r.groups_per_layer)
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
    }
    r.kv_bytes_per_token = Summarize(kv_bytes).mean;
    r.bw_dram_gbps = Summarize(dram).median;
    r.bw_cache_gbps = Summarize(cache).median;
    r.profile = ToOpTimes(op_sum, static_cast<int64_t>(args_.n_gen) * args_.repetitions);
    return r;
  }

  // tg with the default sampler choosing each next token from the logits.
  absl::StatusOr<TestResult> RunEndToEnd() {
    TestResult r;
    r.name = TestName("tg", args_.n_gen, args_.depth, true);
    r.n_gen = args_.n_gen;
    r.n_depth = args_.depth;
    r.e2e = true;
    for (int rep = 0; rep < args_.repetitions; ++rep) {
      KX_RETURN_IF_ERROR(ResetToDepth());
      Sampler sampler{SamplerParams{}};
      std::vector<int32_t> history = RandomTokens(1);
      history.reserve(static_cast<size_t>(args_.n_gen) + 1);
      Stopwatch sw;
      for (int i = 0; i < args_.n_gen; ++i) {
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

absl::Status Run(const Args& args) {
  {
    std::ifstream probe(args.model, std::ios::binary);
    if (!probe) return absl::NotFoundError("cannot open model file '" + args.model + "'");
  }
  EngineOptions opts = args.engine;
  if (args.n_threads > 0) opts.n_threads = args.n_threads;
  if (args.n_batch > 0) opts.n_batch = args.n_batch;
  if (args.prefill == "dnnl") opts.prefill = EngineOptions::Prefill::kDnnl;
  if (args.prefill == "dnnl-fast") opts.prefill = EngineOptions::Prefill::kDnnlFast;
  if (args.prefill == "native") opts.prefill = EngineOptions::Prefill::kNative;
  // Room for the deepest test; tg's warm-up adds a few tokens.
  opts.n_ctx = args.depth + std::max({args.n_prompt, args.n_gen + 1, kTgWarmupTokens});
  KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Load(args.model, opts));

  RunInfo run;
  run.model = DescribeModel(*engine, args.model);
  run.n_threads = engine->n_threads();
  run.n_batch = args.n_batch > 0 ? args.n_batch : EngineOptions{}.n_batch;
  run.isa = IsaName(SelectedIsa());
  run.cpu_info = CpuInfo();
  run.test_time = NowIso8601();
  run.peak_method = MatmulPeakMethod();
  if (engine->n_device_layers() > 0 || engine->device_head()) {
    run.backend = absl::StrCat("CPU+", engine->device_name(), " (", engine->n_device_layers(),
                               " layers", engine->device_head() ? ", head)" : ")");
  }
  run.repetitions = args.repetitions;

  Bench bench(args, *engine);
  std::vector<TestResult> results;
  if (args.n_prompt > 0) {
    KX_ASSIGN_OR_RETURN(TestResult r, bench.RunPrompt());
    results.push_back(std::move(r));
  }
  if (args.n_gen > 0) {
    // With a sidecar, the dense model first, on the same weights in the same run.
    if (engine->sparse() != nullptr && args.compare_dense) {
      EngineOptions dense_opts = opts;
      dense_opts.sparse = false;
      dense_opts.ram_budget.clear();
      KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> dense, Engine::Create(engine->model(), dense_opts));
      Bench dense_bench(args, *dense);
      KX_ASSIGN_OR_RETURN(TestResult d, dense_bench.RunGeneration());
      d.name += " dense";
      results.push_back(std::move(d));
      // Under a RAM budget, also the sparse path with every bundle in RAM:
      // the tier's ceiling, measured in the same run.
      if (engine->sparse()->tier() != nullptr) {
        EngineOptions ram_opts = opts;
        ram_opts.ram_budget.clear();
        KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> all, Engine::Create(engine->model(), ram_opts));
        Bench all_bench(args, *all);
        KX_ASSIGN_OR_RETURN(TestResult a, all_bench.RunGeneration());
        a.name += " all-in-RAM";
        results.push_back(std::move(a));
      }
    }
    KX_ASSIGN_OR_RETURN(TestResult r, bench.RunGeneration());
    results.push_back(std::move(r));
    if (args.e2e) {
      KX_ASSIGN_OR_RETURN(TestResult e, bench.RunEndToEnd());
      results.push_back(std::move(e));
    }
  }
  if (args.json) {
    PrintJson(run, results, stdout);
  } else {
    PrintMarkdown(run, results, stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kx::bench

int main(int argc, char** argv) {
  bool exit_now = false;
  absl::StatusOr<kx::bench::Args> args = kx::bench::ParseArgs(argc, argv, exit_now);
  if (!args.ok()) {
    std::fprintf(stderr, "kairox-bench: %s\n", std::string(args.status().message()).c_str());
    return 1;
  }
  if (exit_now) return 0;
  absl::Status s = kx::bench::Run(*args);
  if (!s.ok()) {
    std::fprintf(stderr, "kairox-bench: error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
