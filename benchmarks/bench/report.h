// kairox-bench's results and their output formats: a markdown table like llama-bench's
// (md), and the machine formats with llama-bench's field names plus kairox's own (kx_*):
// csv, json (one array) and jsonl (one object per line).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kx::bench {

struct ModelInfo {
  std::string filename;
  std::string type;         // "llama 135M Q4_1"
  uint64_t size_bytes = 0;  // bytes of all tensors
  uint64_t n_params = 0;    // elements of all tensors
};

// One op's share of decode time, from the engine's profile.
struct OpTime {
  std::string name;
  double ms_per_token = 0.0;
  double calls_per_token = 0.0;
  double percent = 0.0;
};

struct TestResult {
  std::string name;  // "pp512", "tg128", "tg128 e2e" (+ " @ d<depth>")
  int n_prompt = 0;
  int n_gen = 0;
  int n_depth = 0;
  int n_threads = 0;
  bool e2e = false;  // tg with sampling included
  std::vector<int64_t> samples_ns;

  // tg: bytes one token reads and the read bandwidths (medians of probes).
  double weight_bytes_per_token = 0.0;
  double kv_bytes_per_token = 0.0;
  double bw_dram_gbps = 0.0;
  double bw_cache_gbps = 0.0;
  uint64_t cache_probe_bytes = 0;
  // tg: bytes read from storage per timed token (/proc/self/io; -1: unknown).
  double disk_read_bytes_per_token = -1.0;
  // pp: work per token and the measured compute peak (median of probes).
  double flops_per_token = 0.0;
  double peak_gflops = 0.0;
  std::string peak_method;  // how peak_gflops was measured ("": RunInfo's)
  // tg with a sidecar: the sparse FFN. weight_bytes_per_token then counts the
  // non-FFN weights, the predicted fraction of the bundles and the predictors.
  bool sparse = false;
  double sparsity = 0.0;
  double predicted_fraction = 0.0;  // FFN neurons computed per layer-token
  double kept_fraction = 0.0;       // of those, above the threshold
  int64_t graph_parts = 0;          // tg: task-graph parts per decode token (0: the pool path)
  // tg under --ram-budget: bundles from the sidecar file through the RAM tier.
  bool tiered = false;
  std::string policy, io_backend;
  int slots_per_layer = 0, groups_per_layer = 0;
  double hit_rate = 0.0;              // needed groups found resident
  double needed_fraction = 0.0;       // groups predicted active per layer step / groups
  double read_bytes_per_token = 0.0;  // bytes read from the file
  double read_ops_per_token = 0.0;
  double io_wait_ms_per_token = 0.0;  // the FFN waited for reads (stall on I/O)
  double ffn_ms_per_token = 0.0;      // the FFN computing over its bundles
  double lambda_mean = 0.0;           // TAM's λ over layers at the end (0: not TAM)
  // tg with the split FFN (engine/device_ffn.h): the device's share and the stall breakdown.
  bool device_ffn = false;
  std::string device_policy;
  int device_slots_per_layer = 0;
  double device_group_share = 0.0;      // needed groups computed on the device
  double device_neuron_share = 0.0;     // predicted neurons computed on the device
  double device_loads_per_token = 0.0;  // bundles reloaded (background stream)
  double device_load_bytes_per_token = 0.0;
  double device_wait_ms_per_token = 0.0;          // the host waited for the device's partial sums
  double device_cpu_ms_per_token = 0.0;           // the CPU's share of the split FFN
  double device_load_wait_ms_per_token = 0.0;     // three tiers: waits for loads from RAM slots
  int device_staging_bundles = 0;                 // pinned staging ring's buffers (0: none)
  double device_staging_wait_ms_per_token = 0.0;  // waits for a staging buffer's copy
  double device_lambda_mean = 0.0;
  // Device-timed parts per token (timing events; docs/device.md): the critical uploads, the
  // kernels, the partial sums' downloads, and the bundle loads' rate on the background stream.
  double device_upload_ms_per_token = 0.0;
  double device_compute_ms_per_token = 0.0;
  double device_download_ms_per_token = 0.0;
  double device_load_gb_per_s = 0.0;          // 0: no load batch timed
  double device_cpu_neurons_per_token = 0.0;  // predicted neurons the CPU computed
  // --dual-threshold (sparse/dual_threshold.h): means over layer steps of θ_g, θ_c and the
  // single θ; per token the neurons added on the device and skipped on the CPU against θ;
  // the share of layer steps whose CPU band was put back (the error bound).
  bool dual = false;
  double dual_theta_g = 0.0, dual_theta_c = 0.0, dual_theta = 0.0;
  double dual_gained_per_token = 0.0, dual_dropped_per_token = 0.0;
  double dual_clamped_share = 0.0;
  // tg with a RAM tier or the split FFN: where each token's time went (docs/device.md,
  // "Where the time goes"). The tags add up to the token's wall time: other is the rest
  // (attention, norms, the LM head, sampling, the waits no part covers).
  bool stall = false;
  double stall_cpu_ms_per_token = 0.0;             // the CPU computing its FFN share
  double stall_gpu_ms_per_token = 0.0;             // waiting for the device's kernels
  double stall_h2d_critical_ms_per_token = 0.0;    // ... for the critical copies (up and down)
  double stall_h2d_background_ms_per_token = 0.0;  // ... for bundle loads (queueing, RAM slots)
  double stall_disk_ms_per_token = 0.0;            // the RAM tier waiting for reads
  double stall_other_ms_per_token = 0.0;
  // tg on the decode graph with the split FFN (docs/dag.md): the graph's own stall accounting
  // (DecodeGraphStats): the time every pool thread waited for a device external, by its tag,
  // and cpu = the graph's wall time less those waits. Beside the stall tags above, not instead.
  bool graph_stall = false;
  double graph_cpu_ms_per_token = 0.0;
  double graph_gpu_ms_per_token = 0.0;
  double graph_h2d_critical_ms_per_token = 0.0;
  double graph_h2d_background_ms_per_token = 0.0;
  double graph_disk_ms_per_token = 0.0;
  int64_t graph_early_signals = 0;  // must be 0: an external signalled before its event

  std::vector<OpTime> profile;

  int n_tokens() const { return n_prompt > 0 ? n_prompt : n_gen; }
  std::vector<double> SamplesTs() const;
  double AvgTs() const;
  double StddevTs() const;
  // Ceilings in tokens/s; 0 when not measured.
  double CeilingDramTs() const;
  double CeilingCacheTs() const;
  double CeilingComputeTs() const;
  // avg t/s over the binding ceiling (DRAM for tg, compute for pp).
  double FractionOfCeiling() const;
};

struct RunInfo {
  ModelInfo model;
  int n_batch = 0;
  std::string kv_type = "f16";  // llama-bench's type_k and type_v
  int n_gpu_layers = 0;         // layers on the device
  std::string gpu_info;         // the device's name, "" on the CPU alone
  std::string version;          // kairox's
  std::string isa;
  std::string cpu_info;
  std::string test_time;  // ISO 8601, UTC
  std::string peak_method;
  int repetitions = 0;
  // Share of the model file mapped by 2 MiB pages after the tests (base/huge_pages.h); < 0:
  // unknown.
  double weights_huge_share = -1.0;
  // "CPU", or "CPU+<device>" with the layers and the LM head it holds (docs/device.md).
  std::string backend = "CPU";
};

void PrintMarkdown(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out);
// A header line, then a line per test; every value quoted, as llama-bench writes them. The
// columns are the union of the tests' scalar fields (llama-bench's first), in a fixed order;
// a field a test does not have is "".
void PrintCsv(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out);
// An array of objects (json) or one object per line (jsonl); the same fields as csv plus the
// samples (samples_ns, samples_ts) and the per-op profile (kx_profile).
void PrintJson(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out);
void PrintJsonl(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out);

}  // namespace kx::bench
