#include "sim/sim_report.h"

#include "nlohmann/json.hpp"

namespace kx::sim {
namespace {

constexpr double kMicro = 1e6;
constexpr double kKilo = 1e3;
constexpr double kPercent = 100.0;
constexpr int kJsonIndent = 2;

// Seconds over the replay → µs per token.
double UsPerToken(double seconds, const SimResult& r) {
  return r.tokens > 0 ? seconds * kMicro / r.tokens : 0.0;
}

}  // namespace

std::string FormatMarkdown(const std::vector<SimResult>& rows) {
  std::string out =
      "| hardware | policy | budget | tok/s | reload KB/tok | hit % | GPU neurons % | GPU µs/tok "
      "| CPU µs/tok | H2D crit µs/tok | H2D bg µs/tok | other µs/tok | λ |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const SimResult& r : rows) {
    absl::StrAppendFormat(
        &out, "| %s | %s | %.0f %% | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
        r.hardware, r.policy, r.budget * kPercent, r.tokens_per_s, r.reload_bytes_per_token / kKilo,
        r.hit_rate * kPercent, r.gpu_neuron_share * kPercent, UsPerToken(r.stalls.gpu_s, r),
        UsPerToken(r.stalls.cpu_s, r), UsPerToken(r.stalls.h2d_critical_s, r),
        UsPerToken(r.stalls.h2d_background_s, r), UsPerToken(r.stalls.other_s, r),
        r.mean_lambda > 0 ? absl::StrFormat("%.3f", r.mean_lambda) : std::string("-"));
  }
  return out;
}

std::string FormatCsv(const std::vector<SimResult>& rows) {
  std::string out =
      "hardware,policy,budget,slots_per_layer,tokens,seconds,tokens_per_s,loads,evictions,"
      "reload_bytes,reload_bytes_per_token,groups_needed,hits,late,hit_rate,gpu_neuron_share,"
      "gpu_s,cpu_s,h2d_critical_s,h2d_background_s,other_s,cpu_busy_s,gpu_busy_s,"
      "reload_link_s,mean_lambda,staging_s\n";
  for (const SimResult& r : rows) {
    absl::StrAppendFormat(&out, "%s,%s,%.6g,%d,%d,%.9g,%.9g,%u,%u,%u,%.9g,%u,%u,%u,%.9g,%.9g,",
                          r.hardware, r.policy, r.budget, r.slots_per_layer, r.tokens, r.seconds,
                          r.tokens_per_s, r.loads, r.evictions, r.reload_bytes,
                          r.reload_bytes_per_token, r.groups_needed, r.hits, r.late, r.hit_rate,
                          r.gpu_neuron_share);
    absl::StrAppendFormat(&out, "%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n",
                          r.stalls.gpu_s, r.stalls.cpu_s, r.stalls.h2d_critical_s,
                          r.stalls.h2d_background_s, r.stalls.other_s, r.cpu_busy_s, r.gpu_busy_s,
                          r.reload_link_s, r.mean_lambda, r.staging_s);
  }
  return out;
}

std::string FormatJson(const std::vector<SimResult>& rows, const std::string& extra_json) {
  nlohmann::json j = nlohmann::json::object();
  if (!extra_json.empty()) {
    nlohmann::json extra = nlohmann::json::parse(extra_json, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object()) j.update(extra);
  }
  nlohmann::json list = nlohmann::json::array();
  for (const SimResult& r : rows) {
    list.push_back({{"hardware", r.hardware},
                    {"policy", r.policy},
                    {"budget", r.budget},
                    {"slots_per_layer", r.slots_per_layer},
                    {"tokens", r.tokens},
                    {"seconds", r.seconds},
                    {"tokens_per_s", r.tokens_per_s},
                    {"loads", r.loads},
                    {"evictions", r.evictions},
                    {"reload_bytes", r.reload_bytes},
                    {"reload_bytes_per_token", r.reload_bytes_per_token},
                    {"groups_needed", r.groups_needed},
                    {"hits", r.hits},
                    {"late", r.late},
                    {"hit_rate", r.hit_rate},
                    {"gpu_neuron_share", r.gpu_neuron_share},
                    {"gpu_s", r.stalls.gpu_s},
                    {"cpu_s", r.stalls.cpu_s},
                    {"h2d_critical_s", r.stalls.h2d_critical_s},
                    {"h2d_background_s", r.stalls.h2d_background_s},
                    {"other_s", r.stalls.other_s},
                    {"cpu_busy_s", r.cpu_busy_s},
                    {"gpu_busy_s", r.gpu_busy_s},
                    {"reload_link_s", r.reload_link_s},
                    {"mean_lambda", r.mean_lambda},
                    {"staging_s", r.staging_s}});
  }
  j["results"] = std::move(list);
  return j.dump(kJsonIndent) + "\n";
}

}  // namespace kx::sim
