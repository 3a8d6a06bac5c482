#include "disk_mode.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "sim/disk_tier.h"

namespace kx::sim_cli {
namespace {

constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;
constexpr double kMilli = 1e3;     // seconds → ms
constexpr double kMega = 1048576;  // bytes → MiB
constexpr double kPercent = 100.0;
// Slots are floor(budget · groups), as the engine's share of the sidecar's bundle bytes
// divided into whole slots gives; this keeps 0.3 · 10 from rounding to 2.
constexpr double kBudgetSlack = 1e-9;

// The replay against the trace's own tier records: layer steps whose reads, bytes and
// resident groups all equal the engine's, of those recorded.
struct RecordCheck {
  int64_t recorded = 0, equal = 0;
  double recorded_bytes = 0, recorded_stall_s = 0;  // over the timed steps
  std::string first_difference;
};

}  // namespace

int RunDiskMode(const DiskModeArgs& args, const sim::SimTrace& trace, const ModelShape& shape,
                const sim::CpuModel& cpu) {
  if (shape.bundle_stride == 0) {
    std::fprintf(stderr, "kairox-sim: error: --ram-budget needs the trace's sidecar (--sidecar)\n");
    return 1;
  }
  if (!args.trace_placement && shape.group_frequency.empty()) {
    std::fprintf(stderr, "kairox-sim: error: no sidecar calibration frequency to place with\n");
    return 1;
  }
  if (!(args.disk_gb_per_s > 0) || !(args.disk_latency_us >= 0) || !(args.copy_gb_per_s >= 0)) {
    std::fprintf(stderr,
                 "kairox-sim: error: --disk-gb-per-s must be > 0, --disk-latency-us and "
                 "--copy-gb-per-s >= 0\n");
    return 1;
  }
  sim::DiskLink disk{args.disk_gb_per_s * kGiga, args.disk_latency_us * kMicro};
  sim::BundleFile file;
  file.stride = shape.bundle_stride;
  file.lead = shape.bundle_lead;
  if (args.csv) {
    std::puts(
        "policy,budget,slots,tokens,tokens_per_s,mib_read_per_token,reads_per_token,ffn_ms,"
        "io_wait_ms,copy_ms,other_ms,recorded_steps,equal_steps,recorded_mib_per_token,"
        "recorded_stall_ms");
  } else {
    std::printf(
        "kairox-sim (RAM tier): %s, %d steps replayed, timed from step %u; disk %.3f GB/s + %.1f "
        "µs a read; "
        "bundle %llu B; CPU: layer %.1f µs + %.4f µs/ctx, head %.1f µs, FFN %.2f GB/s at "
        "97 %%\n\n",
        trace.path.c_str(), trace.n_steps, args.time_from_step, args.disk_gb_per_s,
        args.disk_latency_us, static_cast<unsigned long long>(file.stride), cpu.layer_s / kMicro,
        cpu.layer_s_per_ctx / kMicro, cpu.token_s / kMicro, cpu.FfnBytesPerS(0.97) / kGiga);
    std::puts(
        "| policy | budget | slots | timed tokens | tok/s | MiB read/tok | reads/tok | FFN ms/tok "
        "| I/O wait "
        "ms/tok | copy ms/tok | other ms/tok | steps equal to the engine's | engine MiB/tok | "
        "engine stall ms/tok |");
    std::puts(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |");
  }
  for (const std::string& policy : args.policies) {
    for (double budget : args.budgets) {
      sim::DiskTierConfig config;
      config.policy = policy;
      config.slots = static_cast<int>(std::floor(budget * trace.n_groups + kBudgetSlack));
      config.prefetch = args.prefetch;
      config.speculate_layer0 = args.speculate;
      config.timed_from_step = args.time_from_step;
      config.copy_bytes_per_s = args.copy_gb_per_s * kGiga;
      if (!args.trace_placement) config.placement_frequency = shape.group_frequency;
      RecordCheck check;
      config.on_step = [&](const sim::DiskStepEvent& e) {
        const sparse::LayerStats& rec = trace.recorded_stats(e.step, e.layer);
        constexpr uint32_t kNeed = sparse::LayerStats::kReads | sparse::LayerStats::kBytesRead |
                                   sparse::LayerStats::kResidentGroups;
        if ((rec.present & kNeed) != kNeed) return;
        ++check.recorded;
        const bool equal = rec.reads == static_cast<uint64_t>(e.read_ops) &&
                           rec.bytes_read == static_cast<uint64_t>(e.bytes_read) &&
                           rec.resident_groups == static_cast<uint64_t>(e.resident_groups);
        check.equal += equal;
        if (!equal && check.first_difference.empty()) {
          check.first_difference = absl::StrFormat(
              "step %u layer %d: engine %llu reads %llu B %llu resident; replay %lld reads "
              "%lld B %d resident",
              trace.step_ids[static_cast<size_t>(e.step)], e.layer,
              static_cast<unsigned long long>(rec.reads),
              static_cast<unsigned long long>(rec.bytes_read),
              static_cast<unsigned long long>(rec.resident_groups),
              static_cast<long long>(e.read_ops), static_cast<long long>(e.bytes_read),
              e.resident_groups);
        }
        if (trace.step_ids[static_cast<size_t>(e.step)] >= args.time_from_step) {
          check.recorded_bytes += static_cast<double>(rec.bytes_read);
          if (rec.present & sparse::LayerStats::kStallNs)
            check.recorded_stall_s += static_cast<double>(rec.stall_ns) * 1e-9;
        }
      };
      auto r = sim::SimulateDiskTier(trace, disk, cpu, shape.neuron_bytes, file, config);
      if (!r.ok()) {
        std::fprintf(stderr, "kairox-sim: error: %s\n", r.status().ToString().c_str());
        return 1;
      }
      const double n = r->tokens;
      const double rec_mib = check.recorded_bytes / kMega / n;
      const double rec_stall = check.recorded_stall_s * kMilli / n;
      if (args.csv) {
        std::printf("%s,%g,%d,%d,%.3f,%.4f,%.2f,%.4f,%.4f,%.4f,%.4f,%lld,%lld,%.4f,%.4f\n",
                    r->policy.c_str(), budget * kPercent, r->slots, r->tokens, r->tokens_per_s,
                    r->bytes_per_token / kMega, r->reads_per_token, r->ffn_s * kMilli / n,
                    r->io_wait_s * kMilli / n, r->copy_s * kMilli / n, r->other_s * kMilli / n,
                    static_cast<long long>(check.recorded), static_cast<long long>(check.equal),
                    rec_mib, rec_stall);
      } else {
        std::printf(
            "| %s | %g %% | %d | %d | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %lld of "
            "%lld "
            "| %s | %s |\n",
            r->policy.c_str(), budget * kPercent, r->slots, r->tokens, r->tokens_per_s,
            r->bytes_per_token / kMega, r->reads_per_token, r->ffn_s * kMilli / n,
            r->io_wait_s * kMilli / n, r->copy_s * kMilli / n, r->other_s * kMilli / n,
            static_cast<long long>(check.equal), static_cast<long long>(check.recorded),
            check.recorded > 0 ? absl::StrFormat("%.2f", rec_mib).c_str() : "-",
            check.recorded > 0 ? absl::StrFormat("%.2f", rec_stall).c_str() : "-");
      }
      if (!check.first_difference.empty())
        std::fprintf(stderr, "kairox-sim: first difference from the trace's records: %s\n",
                     check.first_difference.c_str());
    }
  }
  return 0;
}

}  // namespace kx::sim_cli
