// SummarizeTrace: per-layer predicted/actual densities and prediction
// quality, computed in one streaming pass over a trace.
#include <algorithm>
#include <bit>

#include "sparse/trace.h"

namespace kx::sparse {
namespace {

uint64_t CountBits(const std::vector<uint64_t>& bits) {
  uint64_t c = 0;
  for (uint64_t w : bits) c += static_cast<uint64_t>(std::popcount(w));
  return c;
}

uint64_t CountBoth(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  uint64_t c = 0;
  for (size_t i = 0; i < a.size(); ++i) c += static_cast<uint64_t>(std::popcount(a[i] & b[i]));
  return c;
}

// Groups (of `group_size` consecutive neurons) with at least one set bit.
uint64_t CountGroups(const std::vector<uint64_t>& bits, uint32_t group_size) {
  uint64_t groups = 0;
  int64_t last_group = -1;
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      const uint64_t neuron = w * 64 + static_cast<uint64_t>(std::countr_zero(word));
      const auto group = static_cast<int64_t>(neuron / group_size);
      if (group != last_group) {  // bits come in increasing order
        ++groups;
        last_group = group;
      }
    }
  }
  return groups;
}

// Running sums for one layer.
struct LayerAccumulator {
  uint64_t records = 0, with_predicted = 0, with_actual = 0, with_both = 0;
  double predicted_fraction_sum = 0, actual_fraction_sum = 0, actual_group_fraction_sum = 0;
  uint64_t both_predicted = 0, both_actual = 0, both_hits = 0;
};

}  // namespace

absl::StatusOr<TraceSummary> SummarizeTrace(const std::string& path) {
  KX_ASSIGN_OR_RETURN(TraceReader reader, TraceReader::Open(path));
  TraceSummary summary;
  summary.header = reader.header();
  const TraceHeader& h = summary.header;
  std::vector<LayerAccumulator> acc(h.n_ff.size());
  TraceRecord rec;
  for (;;) {
    KX_ASSIGN_OR_RETURN(const bool more, reader.Next(&rec));
    if (!more) break;
    ++summary.records;
    summary.steps = std::max(summary.steps, rec.step + 1);
    LayerAccumulator& a = acc[rec.layer];
    const double n_ff = h.n_ff[rec.layer];
    const double n_groups =
        static_cast<double>((h.n_ff[rec.layer] + h.group_size - 1) / h.group_size);
    ++a.records;
    uint64_t n_pred = 0, n_act = 0;
    if (rec.has_predicted) {
      n_pred = CountBits(rec.predicted);
      ++a.with_predicted;
      a.predicted_fraction_sum += static_cast<double>(n_pred) / n_ff;
    }
    if (rec.has_actual) {
      n_act = CountBits(rec.actual);
      ++a.with_actual;
      a.actual_fraction_sum += static_cast<double>(n_act) / n_ff;
      a.actual_group_fraction_sum +=
          static_cast<double>(CountGroups(rec.actual, h.group_size)) / n_groups;
    }
    if (rec.has_predicted && rec.has_actual) {
      ++a.with_both;
      a.both_predicted += n_pred;
      a.both_actual += n_act;
      a.both_hits += CountBoth(rec.predicted, rec.actual);
    }
  }
  summary.layers.resize(acc.size());
  for (size_t l = 0; l < acc.size(); ++l) {
    const LayerAccumulator& a = acc[l];
    TraceLayerSummary& s = summary.layers[l];
    s.records = a.records;
    s.records_with_both = a.with_both;
    auto mean = [](double sum, uint64_t n) { return n == 0 ? 0.0 : sum / static_cast<double>(n); };
    s.mean_predicted_fraction = mean(a.predicted_fraction_sum, a.with_predicted);
    s.mean_actual_fraction = mean(a.actual_fraction_sum, a.with_actual);
    s.mean_actual_group_fraction = mean(a.actual_group_fraction_sum, a.with_actual);
    // Nothing to miss / nothing predicted wrongly: perfect by convention.
    s.recall = a.both_actual == 0 ? 1.0 : static_cast<double>(a.both_hits) / a.both_actual;
    s.precision = a.both_predicted == 0 ? 1.0 : static_cast<double>(a.both_hits) / a.both_predicted;
  }
  return summary;
}

std::string FormatTraceSummary(const TraceSummary& summary) {
  const TraceHeader& h = summary.header;
  std::string out = absl::StrFormat(
      "trace v%d.%d: %d layers, group size %u, %u steps, %u records, model %s\n", h.version_major,
      h.version_minor, h.n_layer(), h.group_size, summary.steps, summary.records,
      h.model_sha256.empty() ? "(unknown)" : h.model_sha256.substr(0, 16));
  out += "layer  n_ff  records  predicted  actual  act.groups  recall  precision\n";
  double recall_sum = 0, precision_sum = 0;
  int layers_with_both = 0;
  for (size_t l = 0; l < summary.layers.size(); ++l) {
    const TraceLayerSummary& s = summary.layers[l];
    absl::StrAppendFormat(&out, "%5zu %5u %8u %9.3f %7.3f %11.3f %7.3f %10.3f\n", l, h.n_ff[l],
                          s.records, s.mean_predicted_fraction, s.mean_actual_fraction,
                          s.mean_actual_group_fraction, s.recall, s.precision);
    if (s.records_with_both > 0) {
      recall_sum += s.recall;
      precision_sum += s.precision;
      ++layers_with_both;
    }
  }
  if (layers_with_both > 0) {
    absl::StrAppendFormat(&out, "mean over %d layers: recall %.3f, precision %.3f\n",
                          layers_with_both, recall_sum / layers_with_both,
                          precision_sum / layers_with_both);
  }
  return out;
}

}  // namespace kx::sparse
