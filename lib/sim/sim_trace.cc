#include "sim/sim_trace.h"

#include <algorithm>
#include <bit>
#include <numeric>

#include "policy/policy.h"
#include "sparse/trace.h"

namespace kx::sim {
namespace {

// Records arrive in any order (a batched prompt writes a layer for every token
// of the batch before the next layer), so they are collected, then sorted.
struct RecordRef {
  uint32_t step = 0;
  uint32_t layer = 0;
  size_t offset = 0;  // into the collected counts
  sparse::LayerStats stats;
};

// Set bits of `bits` in [begin, end).
int CountBits(const std::vector<uint64_t>& bits, uint32_t begin, uint32_t end) {
  int n = 0;
  for (uint32_t i = begin; i < end;) {
    const uint32_t word = i >> 6, shift = i & 63;
    const uint32_t take = std::min<uint32_t>(64 - shift, end - i);
    uint64_t w = bits[word] >> shift;
    if (take < 64) w &= (uint64_t{1} << take) - 1;
    n += std::popcount(w);
    i += take;
  }
  return n;
}

}  // namespace

int SimTrace::group_neurons(int layer, int g) const {
  const int64_t begin = static_cast<int64_t>(g) * group_size;
  const int64_t end = std::min<int64_t>(begin + group_size, n_ff[static_cast<size_t>(layer)]);
  return end > begin ? static_cast<int>(end - begin) : 0;
}

std::vector<float> SimTrace::MeanIntensity() const {
  std::vector<double> sum(static_cast<size_t>(n_layer) * n_groups, 0.0);
  for (int s = 0; s < n_steps; ++s) {
    for (int l = 0; l < n_layer; ++l) {
      const uint16_t* c = counts(s, l);
      for (int g = 0; g < n_groups; ++g) sum[static_cast<size_t>(l) * n_groups + g] += c[g];
    }
  }
  std::vector<float> mean(sum.size(), 0.0f);
  const double denom = static_cast<double>(n_steps) * group_size;
  for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / denom);
  return mean;
}

absl::StatusOr<SimTrace> LoadSimTrace(const std::string& path, const SimTraceOptions& options) {
  KX_ASSIGN_OR_RETURN(sparse::TraceReader reader, sparse::TraceReader::Open(path));
  const sparse::TraceHeader& h = reader.header();
  SimTrace t;
  t.path = path;
  t.model_sha256 = h.model_sha256;
  t.metadata_json = h.metadata_json;
  t.n_layer = h.n_layer();
  t.trace_group_size = static_cast<int>(h.group_size);
  const uint32_t gs = options.group_size > 0 ? options.group_size : h.group_size;
  t.group_size = static_cast<int>(gs);
  t.n_ff = h.n_ff;
  for (uint32_t n : h.n_ff) {
    const int groups = static_cast<int>((n + gs - 1) / gs);
    if (groups > policy::kMaxGroupsPerLayer) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a layer of %u neurons in groups of %u has %d groups; the policies take at most %d",
          path, n, gs, groups, policy::kMaxGroupsPerLayer));
    }
    t.groups_in_layer.push_back(groups);
    t.n_groups = std::max(t.n_groups, groups);
  }

  std::vector<RecordRef> refs;
  std::vector<uint16_t> collected;
  sparse::TraceRecord rec;
  for (;;) {
    KX_ASSIGN_OR_RETURN(bool more, reader.Next(&rec));
    if (!more) break;
    if (rec.step < options.first_step) continue;
    const std::vector<uint64_t>* bits = nullptr;
    if (options.use_actual) {
      if (!rec.has_actual) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: step %u layer %u has no actual neuron set to plan with", path,
                            rec.step, rec.layer));
      }
      bits = &rec.actual;
    } else if (rec.has_predicted) {
      bits = &rec.predicted;
    } else if (rec.has_actual && options.allow_actual) {
      bits = &rec.actual;
      ++t.records_from_actual;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: step %u layer %u has no predicted neuron set%s", path, rec.step, rec.layer,
          rec.has_actual ? " (only an actual set, and actual sets are not allowed)" : ""));
    }
    const uint32_t n_ff = h.n_ff[rec.layer];
    refs.push_back({rec.step, rec.layer, collected.size(), rec.stats});
    collected.resize(collected.size() + static_cast<size_t>(t.n_groups), 0);
    uint16_t* c = collected.data() + refs.back().offset;
    for (int g = 0; g < t.groups_in_layer[rec.layer]; ++g) {
      const uint32_t begin = static_cast<uint32_t>(g) * gs;
      c[g] = static_cast<uint16_t>(CountBits(*bits, begin, std::min(begin + gs, n_ff)));
    }
  }
  std::stable_sort(refs.begin(), refs.end(), [](const RecordRef& a, const RecordRef& b) {
    return a.step != b.step ? a.step < b.step : a.layer < b.layer;
  });

  // Group the sorted records by step; every replayed step needs each layer once.
  const size_t per_step = static_cast<size_t>(t.n_layer) * t.n_groups;
  for (size_t i = 0; i < refs.size();) {
    const uint32_t step = refs[i].step;
    if (options.max_steps > 0 && t.step_ids.size() >= options.max_steps) break;
    size_t j = i;
    while (j < refs.size() && refs[j].step == step) ++j;
    for (size_t k = i; k < j; ++k) {
      if (k > i && refs[k].layer == refs[k - 1].layer) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: step %u layer %u is recorded twice", path, step, refs[k].layer));
      }
    }
    if (j - i != static_cast<size_t>(t.n_layer)) {
      uint32_t missing = 0;
      while (missing < j - i && refs[i + missing].layer == missing) ++missing;
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: step %u has no record for layer %u (%zu of %d layers recorded)",
                          path, step, missing, j - i, t.n_layer));
    }
    const size_t base = t.active.size();
    t.active.resize(base + per_step);
    const size_t stats_base = t.recorded.size();
    t.recorded.resize(stats_base + static_cast<size_t>(t.n_layer));
    for (size_t k = i; k < j; ++k) {
      t.recorded[stats_base + refs[k].layer] = refs[k].stats;
      std::copy_n(collected.data() + refs[k].offset, t.n_groups,
                  t.active.data() + base + static_cast<size_t>(refs[k].layer) * t.n_groups);
    }
    t.step_ids.push_back(step);
    i = j;
  }
  t.n_steps = static_cast<int>(t.step_ids.size());
  if (t.n_steps == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: no step to replay (%llu records; first step %u)", path,
                        static_cast<unsigned long long>(reader.records()), options.first_step));
  }
  return t;
}

}  // namespace kx::sim
