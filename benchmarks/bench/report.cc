#include "bench/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "bench/probes.h"
#include "nlohmann/json.hpp"

namespace kx::bench {
namespace {

constexpr double kNsPerSecond = 1e9;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;
constexpr double kBytesPerMB = 1e6;

std::string FormatSize(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / kBytesPerMiB;
  if (mib >= 1024.0) return absl::StrFormat("%.2f GiB", mib / 1024.0);
  return absl::StrFormat("%.2f MiB", mib);
}

std::string FormatParams(uint64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return absl::StrFormat("%.2f B", v / 1e9);
  return absl::StrFormat("%.2f M", v / 1e6);
}

std::string FormatTs(double ts) { return ts > 0.0 ? absl::StrFormat("%.2f", ts) : "-"; }

}  // namespace

std::vector<double> TestResult::SamplesTs() const {
  std::vector<double> ts;
  for (int64_t ns : samples_ns) {
    ts.push_back(ns > 0 ? n_tokens() * kNsPerSecond / static_cast<double>(ns) : 0.0);
  }
  return ts;
}

double TestResult::AvgTs() const { return Summarize(SamplesTs()).mean; }
double TestResult::StddevTs() const { return Summarize(SamplesTs()).stddev; }

double TestResult::CeilingDramTs() const {
  const double bytes = weight_bytes_per_token + kv_bytes_per_token;
  return n_gen > 0 && bytes > 0.0 ? bw_dram_gbps * 1e9 / bytes : 0.0;
}

double TestResult::CeilingCacheTs() const {
  const double bytes = weight_bytes_per_token + kv_bytes_per_token;
  return n_gen > 0 && bytes > 0.0 ? bw_cache_gbps * 1e9 / bytes : 0.0;
}

double TestResult::CeilingComputeTs() const {
  return n_prompt > 0 && flops_per_token > 0.0 ? peak_gflops * 1e9 / flops_per_token : 0.0;
}

double TestResult::FractionOfCeiling() const {
  const double ceiling = n_prompt > 0 ? CeilingComputeTs() : CeilingDramTs();
  return ceiling > 0.0 ? AvgTs() / ceiling : 0.0;
}

void PrintMarkdown(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out) {
  absl::FPrintF(out,
                "| %-24s | %10s | %10s | %-7s | %7s | %16s | %18s | %13s | %13s | %13s | %7s |\n",
                "model", "size", "params", "backend", "threads", "test", "t/s", "ceil DRAM t/s",
                "ceil cache t/s", "ceil FLOP t/s", "% ceil");
  absl::FPrintF(out, "| %s | %s: | %s: | %s | %s: | %s: | %s: | %s: | %s: | %s: | %s: |\n",
                std::string(24, '-'), std::string(9, '-'), std::string(9, '-'), std::string(7, '-'),
                std::string(6, '-'), std::string(15, '-'), std::string(17, '-'),
                std::string(12, '-'), std::string(12, '-'), std::string(12, '-'),
                std::string(6, '-'));
  for (const TestResult& r : results) {
    const std::string ts = absl::StrFormat("%.2f ± %.2f", r.AvgTs(), r.StddevTs());
    const double frac = r.FractionOfCeiling();
    absl::FPrintF(
        out, "| %-24s | %10s | %10s | %-7s | %7d | %16s | %18s | %13s | %13s | %13s | %7s |\n",
        run.model.type, FormatSize(run.model.size_bytes), FormatParams(run.model.n_params),
        run.backend, r.n_threads, r.name, ts, FormatTs(r.CeilingDramTs()),
        FormatTs(r.CeilingCacheTs()), FormatTs(r.CeilingComputeTs()),
        frac > 0.0 ? absl::StrFormat("%.1f%%", 100.0 * frac) : "-");
  }
  absl::FPrintF(out, "\n");
  if (run.weights_huge_share >= 0.0) {
    absl::FPrintF(out, "model file: %.1f %% mapped in 2 MiB pages after the tests\n",
                  100.0 * run.weights_huge_share);
  }
  for (const TestResult& r : results) {
    if (r.n_gen > 0 && !r.e2e && r.bw_dram_gbps > 0.0) {
      absl::FPrintF(out,
                    "%s ceiling: %.2f MB read per token (weights %.2f + KV %.2f); read "
                    "bandwidth %.2f GB/s at that working set (DRAM), %.2f GB/s at %.2f MiB "
                    "(cache), both on 2 MiB pages; medians of %d probes between repetitions\n",
                    r.name, (r.weight_bytes_per_token + r.kv_bytes_per_token) / kBytesPerMB,
                    r.weight_bytes_per_token / kBytesPerMB, r.kv_bytes_per_token / kBytesPerMB,
                    r.bw_dram_gbps, r.bw_cache_gbps,
                    static_cast<double>(r.cache_probe_bytes) / kBytesPerMiB, run.repetitions);
    }
    if (r.n_prompt > 0 && r.peak_gflops > 0.0) {
      absl::FPrintF(out,
                    "%s ceiling: %.3f GFLOP per token; peak %.1f GFLOP/s (%s; median of %d "
                    "probes between repetitions)\n",
                    r.name, r.flops_per_token * 1e-9, r.peak_gflops,
                    r.peak_method.empty() ? run.peak_method : r.peak_method, run.repetitions);
    }
    if (r.sparse) {
      absl::FPrintF(out,
                    "%s: sparse FFN at sparsity %.2f: %.1f %% of FFN neurons predicted and "
                    "computed, %.1f %% kept\n",
                    r.name, r.sparsity, 100.0 * r.predicted_fraction, 100.0 * r.kept_fraction);
    }
    if (r.graph_parts > 0) {
      absl::FPrintF(out,
                    "%s: decode on the task graph, %d parts per token (KAIROX_EXEC=pool: "
                    "one pool dispatch per op)\n",
                    r.name, r.graph_parts);
    }
    if (r.tiered) {
      absl::FPrintF(out,
                    "%s: RAM tier: policy %s, %d of %d groups per layer resident, %s reads: "
                    "%.1f %% of groups needed per layer step, hit rate %.1f %%, %.2f MiB in "
                    "%.0f reads per token, per token %.3f ms waiting on reads vs %.3f ms "
                    "computing the FFN%s\n",
                    r.name, r.policy, r.slots_per_layer, r.groups_per_layer, r.io_backend,
                    100.0 * r.needed_fraction, 100.0 * r.hit_rate,
                    r.read_bytes_per_token / kBytesPerMiB, r.read_ops_per_token,
                    r.io_wait_ms_per_token, r.ffn_ms_per_token,
                    r.lambda_mean > 0 ? absl::StrFormat(", λ %.3f", r.lambda_mean) : "");
    }
    if (r.device_ffn) {
      absl::FPrintF(
          out,
          "%s: split FFN: device policy %s, %d groups per layer in device slots: "
          "%.1f %% of needed groups (%.1f %% of predicted neurons) on the device, "
          "%.1f reloads (%.3f MiB) per token; per token %.3f ms waiting on the "
          "device vs %.3f ms of CPU share%s%s%s\n",
          r.name, r.device_policy, r.device_slots_per_layer, 100.0 * r.device_group_share,
          100.0 * r.device_neuron_share, r.device_loads_per_token,
          r.device_load_bytes_per_token / kBytesPerMiB, r.device_wait_ms_per_token,
          r.device_cpu_ms_per_token,
          r.device_load_wait_ms_per_token > 0
              ? absl::StrFormat(", %.3f ms waiting on loads from RAM slots",
                                r.device_load_wait_ms_per_token)
              : "",
          r.device_staging_wait_ms_per_token > 0
              ? absl::StrFormat(", %.3f ms waiting for the %d pinned staging buffers",
                                r.device_staging_wait_ms_per_token, r.device_staging_bundles)
              : "",
          r.device_lambda_mean > 0 ? absl::StrFormat(", λ %.3f", r.device_lambda_mean) : "");
    }
    if (r.dual) {
      absl::FPrintF(out,
                    "%s: dual thresholds: mean θ_g %.4f, θ_c %.4f (θ %.4f); per token %.1f "
                    "neurons added on the device, %.1f skipped on the CPU, %.1f computed by the "
                    "CPU; %.1f %% of layer steps clamped\n",
                    r.name, r.dual_theta_g, r.dual_theta_c, r.dual_theta, r.dual_gained_per_token,
                    r.dual_dropped_per_token, r.device_cpu_neurons_per_token,
                    100.0 * r.dual_clamped_share);
    }
    if (r.device_ffn) {
      absl::FPrintF(out,
                    "%s: device-timed per token: %.3f ms uploads, %.3f ms kernels, %.3f ms "
                    "downloads (critical copies and kernels, waited for or not)%s\n",
                    r.name, r.device_upload_ms_per_token, r.device_compute_ms_per_token,
                    r.device_download_ms_per_token,
                    r.device_load_gb_per_s > 0
                        ? absl::StrFormat("; bundle loads at %.2f GB/s on the background stream",
                                          r.device_load_gb_per_s)
                        : "");
    }
    if (r.stall) {
      absl::FPrintF(out,
                    "%s: where a token's time went (ms): cpu %.3f | gpu %.3f | h2d critical "
                    "%.3f | h2d background %.3f | disk %.3f | other %.3f\n",
                    r.name, r.stall_cpu_ms_per_token, r.stall_gpu_ms_per_token,
                    r.stall_h2d_critical_ms_per_token, r.stall_h2d_background_ms_per_token,
                    r.stall_disk_ms_per_token, r.stall_other_ms_per_token);
    }
    if (r.graph_stall) {
      absl::FPrintF(out,
                    "%s: decode graph per token (ms): cpu %.3f | waiting for gpu %.3f | h2d "
                    "critical %.3f | h2d background %.3f | disk %.3f%s\n",
                    r.name, r.graph_cpu_ms_per_token, r.graph_gpu_ms_per_token,
                    r.graph_h2d_critical_ms_per_token, r.graph_h2d_background_ms_per_token,
                    r.graph_disk_ms_per_token,
                    r.graph_early_signals > 0
                        ? absl::StrFormat(" (%d EARLY SIGNALS: a bug)", r.graph_early_signals)
                        : "");
    }
  }
  for (const TestResult& r : results) {
    if (r.profile.empty()) continue;
    absl::FPrintF(out, "\nper-op time, %s:\n\n", r.name);
    absl::FPrintF(out, "| %-20s | %10s | %11s | %6s |\n", "op", "ms/token", "calls/token", "%");
    absl::FPrintF(out, "| %s | %s: | %s: | %s: |\n", std::string(20, '-'), std::string(9, '-'),
                  std::string(10, '-'), std::string(5, '-'));
    for (const OpTime& op : r.profile) {
      absl::FPrintF(out, "| %-20s | %10.4f | %11.1f | %5.1f%% |\n", op.name, op.ms_per_token,
                    op.calls_per_token, op.percent);
    }
  }
  std::fflush(out);
}

namespace {

// One test as an object: llama-bench's fields in its order, then kairox's (kx_*).
nlohmann::ordered_json TestObject(const RunInfo& run, const TestResult& r) {
  const Summary ns = [&] {
    std::vector<double> v(r.samples_ns.begin(), r.samples_ns.end());
    return Summarize(v);
  }();
  nlohmann::ordered_json j;
  j["cpu_info"] = run.cpu_info;
  j["gpu_info"] = run.gpu_info;
  j["backends"] = run.backend;
  j["model_filename"] = run.model.filename;
  j["model_type"] = run.model.type;
  j["model_size"] = run.model.size_bytes;
  j["model_n_params"] = run.model.n_params;
  j["n_batch"] = run.n_batch;
  j["n_threads"] = r.n_threads;
  j["type_k"] = run.kv_type;
  j["type_v"] = run.kv_type;
  j["n_gpu_layers"] = run.n_gpu_layers;
  j["n_prompt"] = r.n_prompt;
  j["n_gen"] = r.n_gen;
  j["n_depth"] = r.n_depth;
  j["test_time"] = run.test_time;
  j["avg_ns"] = static_cast<int64_t>(std::llround(ns.mean));
  j["stddev_ns"] = static_cast<int64_t>(std::llround(ns.stddev));
  j["avg_ts"] = r.AvgTs();
  j["stddev_ts"] = r.StddevTs();
  j["samples_ns"] = r.samples_ns;
  j["samples_ts"] = r.SamplesTs();
  // kairox's own fields.
  j["kx_version"] = run.version;
  j["kx_test"] = r.name;
  j["kx_isa"] = run.isa;
  j["kx_weights_huge_share"] = run.weights_huge_share;
  j["kx_e2e"] = r.e2e;
  if (r.n_gen > 0 && !r.e2e) {
    j["kx_weight_bytes_per_token"] = r.weight_bytes_per_token;
    j["kx_kv_bytes_per_token"] = r.kv_bytes_per_token;
    j["kx_bw_dram_gbps"] = r.bw_dram_gbps;
    j["kx_bw_cache_gbps"] = r.bw_cache_gbps;
    j["kx_cache_probe_bytes"] = r.cache_probe_bytes;
    j["kx_disk_read_bytes_per_token"] = r.disk_read_bytes_per_token;
    j["kx_ceiling_dram_ts"] = r.CeilingDramTs();
    j["kx_ceiling_cache_ts"] = r.CeilingCacheTs();
    j["kx_fraction_of_ceiling"] = r.FractionOfCeiling();
    j["kx_sparse"] = r.sparse;
    if (r.sparse) {
      j["kx_sparsity"] = r.sparsity;
      j["kx_predicted_fraction"] = r.predicted_fraction;
      j["kx_kept_fraction"] = r.kept_fraction;
    }
    j["kx_graph_parts"] = r.graph_parts;
    j["kx_tiered"] = r.tiered;
    if (r.tiered) {
      j["kx_policy"] = r.policy;
      j["kx_io_backend"] = r.io_backend;
      j["kx_slots_per_layer"] = r.slots_per_layer;
      j["kx_groups_per_layer"] = r.groups_per_layer;
      j["kx_hit_rate"] = r.hit_rate;
      j["kx_needed_fraction"] = r.needed_fraction;
      j["kx_read_bytes_per_token"] = r.read_bytes_per_token;
      j["kx_read_ops_per_token"] = r.read_ops_per_token;
      j["kx_io_wait_ms_per_token"] = r.io_wait_ms_per_token;
      j["kx_ffn_ms_per_token"] = r.ffn_ms_per_token;
      j["kx_lambda_mean"] = r.lambda_mean;
    }
    j["kx_device_ffn"] = r.device_ffn;
    if (r.device_ffn) {
      j["kx_device_policy"] = r.device_policy;
      j["kx_device_slots_per_layer"] = r.device_slots_per_layer;
      j["kx_device_group_share"] = r.device_group_share;
      j["kx_device_neuron_share"] = r.device_neuron_share;
      j["kx_device_loads_per_token"] = r.device_loads_per_token;
      j["kx_device_load_bytes_per_token"] = r.device_load_bytes_per_token;
      j["kx_device_wait_ms_per_token"] = r.device_wait_ms_per_token;
      j["kx_device_cpu_ms_per_token"] = r.device_cpu_ms_per_token;
      j["kx_device_load_wait_ms_per_token"] = r.device_load_wait_ms_per_token;
      j["kx_device_staging_bundles"] = r.device_staging_bundles;
      j["kx_device_staging_wait_ms_per_token"] = r.device_staging_wait_ms_per_token;
      j["kx_device_lambda_mean"] = r.device_lambda_mean;
      j["kx_device_upload_ms_per_token"] = r.device_upload_ms_per_token;
      j["kx_device_compute_ms_per_token"] = r.device_compute_ms_per_token;
      j["kx_device_download_ms_per_token"] = r.device_download_ms_per_token;
      j["kx_device_load_gb_per_s"] = r.device_load_gb_per_s;
      j["kx_device_cpu_neurons_per_token"] = r.device_cpu_neurons_per_token;
      j["kx_dual_threshold"] = r.dual;
      if (r.dual) {
        j["kx_dual_theta_g"] = r.dual_theta_g;
        j["kx_dual_theta_c"] = r.dual_theta_c;
        j["kx_dual_theta"] = r.dual_theta;
        j["kx_dual_gained_per_token"] = r.dual_gained_per_token;
        j["kx_dual_dropped_per_token"] = r.dual_dropped_per_token;
        j["kx_dual_clamped_share"] = r.dual_clamped_share;
      }
    }
    if (r.stall) {
      j["kx_stall_cpu_ms_per_token"] = r.stall_cpu_ms_per_token;
      j["kx_stall_gpu_ms_per_token"] = r.stall_gpu_ms_per_token;
      j["kx_stall_h2d_critical_ms_per_token"] = r.stall_h2d_critical_ms_per_token;
      j["kx_stall_h2d_background_ms_per_token"] = r.stall_h2d_background_ms_per_token;
      j["kx_stall_disk_ms_per_token"] = r.stall_disk_ms_per_token;
      j["kx_stall_other_ms_per_token"] = r.stall_other_ms_per_token;
    }
    if (r.graph_stall) {
      j["kx_graph_cpu_ms_per_token"] = r.graph_cpu_ms_per_token;
      j["kx_graph_wait_gpu_ms_per_token"] = r.graph_gpu_ms_per_token;
      j["kx_graph_wait_h2d_critical_ms_per_token"] = r.graph_h2d_critical_ms_per_token;
      j["kx_graph_wait_h2d_background_ms_per_token"] = r.graph_h2d_background_ms_per_token;
      j["kx_graph_wait_disk_ms_per_token"] = r.graph_disk_ms_per_token;
      j["kx_graph_early_signals"] = r.graph_early_signals;
    }
  }
  if (r.n_prompt > 0) {
    j["kx_flops_per_token"] = r.flops_per_token;
    j["kx_peak_gflops"] = r.peak_gflops;
    j["kx_peak_method"] = r.peak_method.empty() ? run.peak_method : r.peak_method;
    j["kx_ceiling_compute_ts"] = r.CeilingComputeTs();
    j["kx_fraction_of_ceiling"] = r.FractionOfCeiling();
  }
  if (!r.profile.empty()) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const OpTime& op : r.profile) {
      ops.push_back({{"op", op.name},
                     {"ms_per_token", op.ms_per_token},
                     {"calls_per_token", op.calls_per_token},
                     {"percent", op.percent}});
    }
    j["kx_profile"] = ops;
  }
  return j;
}

// A CSV field: quoted, with quotes doubled (RFC 4180); strings as they are, numbers and
// booleans as JSON writes them.
std::string CsvField(const nlohmann::ordered_json& v) {
  const std::string text = v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
  std::string quoted = "\"";
  for (char c : text) {
    quoted += c;
    if (c == '"') quoted += '"';
  }
  return quoted + "\"";
}

}  // namespace

void PrintCsv(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out) {
  std::vector<nlohmann::ordered_json> rows;
  std::vector<std::string> columns;
  for (const TestResult& r : results) {
    rows.push_back(TestObject(run, r));
    for (const auto& [key, value] : rows.back().items()) {
      if (value.is_structured()) continue;  // samples, profile: json and jsonl only
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::string line;
  for (const std::string& c : columns) line += (line.empty() ? "" : ",") + c;
  absl::FPrintF(out, "%s\n", line);
  for (const nlohmann::ordered_json& row : rows) {
    line.clear();
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i > 0) line += ',';
      line += row.contains(columns[i]) ? CsvField(row[columns[i]]) : "\"\"";
    }
    absl::FPrintF(out, "%s\n", line);
  }
  std::fflush(out);
}

void PrintJson(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const TestResult& r : results) all.push_back(TestObject(run, r));
  absl::FPrintF(out, "%s\n", all.dump(2));
  std::fflush(out);
}

void PrintJsonl(const RunInfo& run, const std::vector<TestResult>& results, std::FILE* out) {
  for (const TestResult& r : results) absl::FPrintF(out, "%s\n", TestObject(run, r).dump());
  std::fflush(out);
}

}  // namespace kx::bench
