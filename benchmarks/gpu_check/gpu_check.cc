// kairox-gpu-check: every op of the CUDA module on the real GPU against the same kernel
// source under the CUDA emulator (whose kernels the unit tests check against the CPU
// kernels), on real model shapes, with the GPU's time and its share of the device's copy
// bandwidth. Builds with the CUDA toolkit, CMake and a C++ compiler only (no kairox
// library, no Debian package), so it runs from a checkout on a bare GPU machine:
//
//   cmake -S benchmarks/gpu_check -B build-gpu -G Ninja && cmake --build build-gpu
//   build-gpu/kairox-gpu-check [--model smollm2|qwen1.5b|all] [--small] [--emulator-only]
//
// Exit status: 0 all cases pass; 1 a mismatch, an error, or a registered op without a case;
// 77 no usable GPU (or no module) — CTest's skip code in this project.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/gpu_check/cases.h"
#include "benchmarks/gpu_check/gpu_module.h"
#include "benchmarks/gpu_check/report.h"
#include "benchmarks/gpu_check/runner.h"
#include "kernels/cuda/op_registry.h"

namespace kx::gpu_check {
namespace {

constexpr int kExitSkip = 77;
constexpr uint64_t kDefaultSeed = 20250611;
constexpr int kDefaultReps = 20;
constexpr uint64_t kCopyBytes = uint64_t{1} << 30;  // far beyond any L2
constexpr int kCopyReps = 10;

// Every op family (cases.h). A new family is added here.
constexpr CaseFamily kFamilies[] = {
    AddMatvecCases,
    AddLayerCases,
    AddSparseCases,
};

struct Options {
  std::vector<std::string> models = {"smollm2"};
  bool small = false;
  bool emulator_only = false;
  std::string module_path;
  std::string op_filter;  // substring of the op name; empty: all
  std::string json_path;
  uint64_t seed = kDefaultSeed;
  int reps = kDefaultReps;
};

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: kairox-gpu-check [options]\n"
               "  --model NAME      smollm2 (default: SmolLM2-135M shapes, Q4_1/Q8_0),\n"
               "                    qwen1.5b (Qwen2.5-1.5B, Q4_K/Q6_K), or all\n"
               "  --small           reduced shapes (the self-test's; seconds on the emulator)\n"
               "  --emulator-only   no GPU: every case twice on the emulator (a self-test)\n"
               "  --module PATH     libkairox_cuda.so to load (default: $KAIROX_CUDA_MODULE if\n"
               "                    set, else lib/ or ../lib/ beside the program, else the\n"
               "                    loader's search)\n"
               "  --op NAME         only ops whose name contains NAME\n"
               "  --reps N          timed repetitions per op (median; default %d)\n"
               "  --seed N          input seed (default $KAIROX_TEST_SEED, else %llu; printed)\n"
               "  --json PATH       also write the results as JSON\n",
               kDefaultReps, static_cast<unsigned long long>(kDefaultSeed));
}

bool ParseArgs(int argc, char** argv, Options* o) {
  // The test suite's seed variable, so a CTest run can be repeated with other inputs.
  if (const char* env = std::getenv("KAIROX_TEST_SEED"); env != nullptr && *env != '\0') {
    o->seed = std::strtoull(env, nullptr, 10);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kairox-gpu-check: %s needs a value\n", flag);
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      Usage(stdout);
      std::exit(0);
    } else if (a == "--small") {
      o->small = true;
    } else if (a == "--emulator-only") {
      o->emulator_only = true;
    } else if (a == "--model") {
      if (!(v = value("--model"))) return false;
      const std::string m = v;
      if (m == "all") {
        o->models = {"smollm2", "qwen1.5b"};
      } else if (m == "smollm2" || m == "qwen1.5b") {
        o->models = {m};
      } else {
        std::fprintf(stderr, "kairox-gpu-check: unknown --model '%s'\n", v);
        return false;
      }
    } else if (a == "--module") {
      if (!(v = value("--module"))) return false;
      o->module_path = v;
    } else if (a == "--op") {
      if (!(v = value("--op"))) return false;
      o->op_filter = v;
    } else if (a == "--json") {
      if (!(v = value("--json"))) return false;
      o->json_path = v;
    } else if (a == "--reps") {
      if (!(v = value("--reps"))) return false;
      o->reps = std::atoi(v);
      if (o->reps < 1) {
        std::fprintf(stderr, "kairox-gpu-check: --reps must be >= 1\n");
        return false;
      }
    } else if (a == "--seed") {
      if (!(v = value("--seed"))) return false;
      o->seed = std::strtoull(v, nullptr, 10);
    } else {
      std::fprintf(stderr, "kairox-gpu-check: unknown argument '%s'\n", a.c_str());
      Usage(stderr);
      return false;
    }
  }
  return true;
}

ModelShapes ShapesFor(const std::string& model, bool small) {
  ModelShapes m = model == "qwen1.5b" ? Qwen15bShapes() : SmolLm2Shapes();
  if (small) {
    // Keep the model's types and head size, shrink everything else.
    const ModelShapes s = SmallShapes();
    m.n_layer = s.n_layer;
    m.n_embd = s.n_embd;
    m.n_ff = s.n_ff;
    m.n_head = s.n_embd / m.head_dim;
    m.n_kv_head = std::max<int64_t>(1, m.n_head / 2);
    m.n_vocab = s.n_vocab;
    m.n_ctx = s.n_ctx;
  }
  return m;
}

// Registered ops (the emulator's registry: the same .cu files as the module's) without a
// case in any family.
std::vector<std::string> UncoveredOps(const std::vector<CheckRow>& rows) {
  std::vector<std::string> missing;
  for (int i = 0; i < cuda::OpCount(); ++i) {
    const std::string name = cuda::OpName(i);
    bool found = false;
    for (const CheckRow& r : rows) found = found || r.op == name;
    if (!found) missing.push_back(name);
  }
  return missing;
}

int Run(const Options& o) {
  GpuModule gpu;
  DeviceSummary device;
  if (!o.emulator_only) {
    std::string why;
    if (!gpu.Open(o.module_path, &why)) {
      std::printf("kairox-gpu-check: %s\n", why.c_str());
      if (gpu.failure() == OpenFailure::kBrokenModule) return EXIT_FAILURE;
      std::printf("kairox-gpu-check: skipped (exit %d)\n", kExitSkip);
      return kExitSkip;
    }
    device.name = gpu.device().name;
    device.cc_major = gpu.device().compute_capability_major;
    device.cc_minor = gpu.device().compute_capability_minor;
    device.sm_count = gpu.device().multiprocessor_count;
    device.module_path = gpu.module_path();
    device.copy_bytes_per_second = gpu.MeasureCopyBandwidth(kCopyBytes, kCopyReps);
  }
  std::printf("kairox-gpu-check: seed %llu, %s\n", static_cast<unsigned long long>(o.seed),
              o.emulator_only ? "emulator vs emulator (self-test; no GPU used)"
                              : "GPU vs the same kernels under the CUDA emulator");
  std::fflush(stdout);

  std::vector<CheckRow> rows;
  bool all_pass = true;
  for (const std::string& model : o.models) {
    CaseConfig config;
    config.model = ShapesFor(model, o.small);
    config.small = o.small;
    config.seed = o.seed;
    std::mt19937_64 rng(o.seed);
    std::vector<Case> cases;
    for (CaseFamily family : kFamilies) family(config, rng, &cases);
    for (const Case& c : cases) {
      if (!o.op_filter.empty() && c.op.find(o.op_filter) == std::string::npos) continue;
      CheckRow row = RunCase(o.emulator_only ? nullptr : &gpu, c, o.reps);
      row.model = config.model.name;
      all_pass = all_pass && row.cmp.pass;
      PrintProgress(row);
      rows.push_back(std::move(row));
    }
  }
  PrintTable(rows, device, o.emulator_only);
  std::vector<std::string> uncovered;
  if (o.op_filter.empty()) uncovered = UncoveredOps(rows);
  for (const std::string& op : uncovered) {
    std::printf("FAIL: op '%s' is registered but has no case (benchmarks/gpu_check/cases_*.cc)\n",
                op.c_str());
  }
  if (!o.json_path.empty() && !WriteJson(o.json_path, rows, device, o.seed)) {
    std::fprintf(stderr, "kairox-gpu-check: cannot write %s\n", o.json_path.c_str());
    return EXIT_FAILURE;
  }
  const bool ok = all_pass && uncovered.empty() && !rows.empty();
  std::printf("kairox-gpu-check: %s\n", ok ? "PASS" : "FAIL");
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace
}  // namespace kx::gpu_check

int main(int argc, char** argv) {
  kx::gpu_check::Options options;
  if (!kx::gpu_check::ParseArgs(argc, argv, &options)) return EXIT_FAILURE;
  return kx::gpu_check::Run(options);
}
