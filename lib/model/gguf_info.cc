#include "model/gguf_info.h"

#include <algorithm>
#include <map>

namespace kx {
namespace {

// Tensors listed when not all are asked for: enough to see the naming scheme.
constexpr size_t kDefaultTensorRows = 12;
constexpr size_t kValueChars = 80;
constexpr size_t kMinKeyColumn = 40;
constexpr size_t kMinNameColumn = 28;

std::string HumanBytes(uint64_t n) {
  constexpr double kKiB = 1024.0;
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  size_t u = 0;
  while (v >= kKiB && u + 1 < std::size(units)) {
    v /= kKiB;
    ++u;
  }
  return u == 0 ? absl::StrCat(n, " B") : absl::StrFormat("%.2f %s", v, units[u]);
}

std::string Shape(const GgufTensorInfo& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) absl::StrAppend(&s, d ? ", " : "", t.ne[d]);
  return s + "]";
}

}  // namespace

std::string DescribeGguf(const GgufFile& f, bool all_tensors) {
  std::string out =
      absl::StrFormat("GGUF v%u, %s (%u bytes), alignment %u, data section at %u\n", f.version(),
                      HumanBytes(f.file_size()), f.file_size(), f.alignment(), f.data_offset());

  size_t key_col = kMinKeyColumn;
  for (size_t i = 0; i < f.num_kv(); ++i) key_col = std::max(key_col, f.KeyAt(i).size());
  absl::StrAppend(&out, "metadata: ", f.num_kv(), " keys\n");
  for (size_t i = 0; i < f.num_kv(); ++i) {
    absl::StrAppendFormat(&out, "  %-*s %-6s %s\n", static_cast<int>(key_col), f.KeyAt(i),
                          GgufTypeName(f.TypeAt(i)), f.ValueToString(i, kValueChars));
  }

  const auto& tensors = f.tensors();
  size_t name_col = kMinNameColumn;
  for (const auto& t : tensors) name_col = std::max(name_col, t.name.size());
  const size_t rows = all_tensors ? tensors.size() : std::min(tensors.size(), kDefaultTensorRows);
  absl::StrAppend(&out, "tensors: ", tensors.size(), "\n");
  if (!tensors.empty()) {
    absl::StrAppendFormat(&out, "  %-*s %-8s %-24s %14s %14s\n", static_cast<int>(name_col), "name",
                          "type", "shape", "bytes", "offset");
  }
  for (size_t i = 0; i < rows; ++i) {
    const GgufTensorInfo& t = tensors[i];
    absl::StrAppendFormat(&out, "  %-*s %-8s %-24s %14u %14u\n", static_cast<int>(name_col), t.name,
                          TypeName(t.type), Shape(t), t.size_bytes, t.offset);
  }
  if (rows < tensors.size()) {
    absl::StrAppend(&out, "  ... ", tensors.size() - rows, " more\n");
  }

  // Per-type totals, in ggml id order.
  struct Total {
    uint64_t count = 0;
    uint64_t bytes = 0;
  };
  std::map<uint32_t, Total> by_type;
  uint64_t total_bytes = 0;
  for (const auto& t : tensors) {
    Total& s = by_type[static_cast<uint32_t>(t.type)];
    ++s.count;
    s.bytes += t.size_bytes;
    total_bytes += t.size_bytes;
  }
  absl::StrAppend(&out, "summary: ", tensors.size(), " tensors, ", HumanBytes(total_bytes),
                  " of tensor data\n");
  for (const auto& [id, s] : by_type) {
    absl::StrAppendFormat(&out, "  %-8s %6u tensors %12s\n", TypeName(static_cast<GgmlType>(id)),
                          s.count, HumanBytes(s.bytes));
  }
  return out;
}

}  // namespace kx
