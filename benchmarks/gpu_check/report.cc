#include "benchmarks/gpu_check/report.h"

#include <algorithm>
#include <cstdio>

namespace kx::gpu_check {
namespace {

constexpr double kMicro = 1e6;
constexpr double kGiga = 1e9;

double BytesPerSecond(const CheckRow& r) {
  return r.seconds > 0.0 ? static_cast<double>(r.bytes_moved) / r.seconds : 0.0;
}

std::string Format(const char* fmt, double v) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, v);
  return text;
}

std::string ToleranceText(const Tolerance& t) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1e+%.1e", t.abs, t.rel);
  return text;
}

// JSON string contents: the names here are plain ASCII, but a device name or a failure
// detail could carry a quote or a backslash.
std::string Escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

void PrintProgress(const CheckRow& row) {
  std::fprintf(stderr, "  %-8s %-18s %-26s %-9s emu %6.2f s  %s%s%s\n", row.model.c_str(),
               row.op.c_str(), row.shape.c_str(), row.type.c_str(), row.emu_seconds,
               row.cmp.pass ? "pass" : "FAIL", row.cmp.detail.empty() ? "" : ": ",
               row.cmp.detail.c_str());
}

void PrintTable(const std::vector<CheckRow>& rows, const DeviceSummary& device,
                bool emulator_only) {
  if (emulator_only) {
    std::printf("device: none (--emulator-only: each case run twice under the emulator)\n");
  } else {
    std::printf("device: %s (sm_%d%d, %d SMs), module %s\n", device.name.c_str(), device.cc_major,
                device.cc_minor, device.sm_count, device.module_path.c_str());
    std::printf("copy bandwidth (device-to-device, read + write): %.1f GB/s\n",
                device.copy_bytes_per_second / kGiga);
  }
  size_t w_op = 2;
  size_t w_shape = 5;
  size_t w_type = 4;
  for (const CheckRow& r : rows) {
    w_op = std::max(w_op, r.op.size());
    w_shape = std::max(w_shape, r.shape.size());
    w_type = std::max(w_type, r.type.size());
  }
  const int wo = static_cast<int>(w_op);
  const int ws = static_cast<int>(w_shape);
  const int wt = static_cast<int>(w_type);
  std::printf("%-8s  %-*s  %-*s  %-*s  %9s  %9s  %-15s  %-4s  %9s  %8s  %6s\n", "model", wo, "op",
              ws, "shape", wt, "type", "max abs", "max rel", "tol abs+rel", "ok", "us", "GB/s",
              "%copy");
  for (const CheckRow& r : rows) {
    const double bps = BytesPerSecond(r);
    const bool timed = r.seconds > 0.0;
    const std::string us = timed ? Format("%.2f", r.seconds * kMicro) : "-";
    const std::string gbs = timed ? Format("%.1f", bps / kGiga) : "-";
    const std::string pct = timed && device.copy_bytes_per_second > 0.0
                                ? Format("%.1f", 100.0 * bps / device.copy_bytes_per_second)
                                : "-";
    std::printf("%-8s  %-*s  %-*s  %-*s  %9.2e  %9.2e  %-15s  %-4s  %9s  %8s  %6s\n",
                r.model.c_str(), wo, r.op.c_str(), ws, r.shape.c_str(), wt, r.type.c_str(),
                r.cmp.max_abs, r.cmp.max_rel, ToleranceText(r.tol).c_str(),
                r.cmp.pass ? "pass" : "FAIL", us.c_str(), gbs.c_str(), pct.c_str());
  }
  for (const CheckRow& r : rows) {
    if (!r.cmp.pass) {
      std::printf("FAIL: %s %s %s: %s\n", r.model.c_str(), r.op.c_str(), r.shape.c_str(),
                  r.cmp.detail.c_str());
    }
  }
}

bool WriteJson(const std::string& path, const std::vector<CheckRow>& rows,
               const DeviceSummary& device, uint64_t seed) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"copy_gb_per_s\": %.3f,\n  \"seed\": %llu,\n",
               Escape(device.name).c_str(), device.copy_bytes_per_second / kGiga,
               static_cast<unsigned long long>(seed));
  std::fprintf(f, "  \"cases\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const CheckRow& r = rows[i];
    const double bps = BytesPerSecond(r);
    std::fprintf(
        f,
        "    {\"model\": \"%s\", \"op\": \"%s\", \"shape\": \"%s\", \"type\": \"%s\", "
        "\"max_abs_err\": %.6g, \"max_rel_err\": %.6g, \"tol_abs\": %.6g, "
        "\"tol_rel\": %.6g, \"pass\": %s, \"compared\": %lld, \"us\": %.4f, "
        "\"gb_per_s\": %.3f, \"pct_copy\": %.2f, \"detail\": \"%s\"}%s\n",
        Escape(r.model).c_str(), Escape(r.op).c_str(), Escape(r.shape).c_str(),
        Escape(r.type).c_str(), r.cmp.max_abs, r.cmp.max_rel, r.tol.abs, r.tol.rel,
        r.cmp.pass ? "true" : "false", static_cast<long long>(r.cmp.compared), r.seconds * kMicro,
        bps / kGiga,
        device.copy_bytes_per_second > 0.0 ? 100.0 * bps / device.copy_bytes_per_second : 0.0,
        Escape(r.cmp.detail).c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  return std::fclose(f) == 0;
}

}  // namespace kx::gpu_check
