#include "synth/synth_stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sparse/trace.h"

namespace kx::synth {

StatsAccumulator::StatsAccumulator(std::vector<uint32_t> n_ff, double hot_fraction)
    : n_ff_(std::move(n_ff)), hot_fraction_(hot_fraction), layers_(n_ff_.size()) {
  for (size_t l = 0; l < n_ff_.size(); ++l) {
    layers_[l].count.assign(n_ff_[l], 0);
    layers_[l].prev.assign((n_ff_[l] + 63) / 64, 0);
  }
}

absl::Status StatsAccumulator::Add(int64_t step, int layer, const uint64_t* bits) {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " out of range"));
  }
  Layer& L = layers_[layer];
  if (step <= L.prev_step) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, ": step ", step, " after step ", L.prev_step));
  }
  const bool consecutive = step == L.prev_step + 1;
  int64_t active = 0, kept = 0;
  for (size_t w = 0; w < L.prev.size(); ++w) {
    uint64_t word = bits[w];
    active += std::popcount(word);
    if (consecutive) kept += std::popcount(word & L.prev[w]);
    L.prev[w] = word;
    while (word != 0) {
      ++L.count[w * 64 + static_cast<size_t>(std::countr_zero(word))];
      word &= word - 1;
    }
  }
  // Reuse's denominator is |A_t| of the earlier step of each pair.
  if (consecutive) {
    L.kept += kept;
    L.pair_base += L.last_active;
  }
  L.last_active = active;
  L.active += active;
  ++L.steps;
  L.prev_step = step;
  return absl::OkStatus();
}

RealisedStats StatsAccumulator::Finish() const {
  RealisedStats r;
  int64_t kept = 0, base = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const double n = n_ff_[l];
    r.sparsity.push_back(L.steps > 0 ? 1.0 - L.active / (n * L.steps) : 0.0);
    std::vector<uint32_t> sorted = L.count;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const auto n_hot = static_cast<size_t>(std::ceil(hot_fraction_ * n - 1e-9));
    uint64_t top = 0;
    for (size_t i = 0; i < n_hot && i < sorted.size(); ++i) top += sorted[i];
    r.hot_share.push_back(L.active > 0 ? static_cast<double>(top) / L.active : 0.0);
    kept += L.kept;
    base += L.pair_base;
  }
  if (!layers_.empty()) {
    r.steps = layers_[0].steps;
    for (size_t l = 0; l < layers_.size(); ++l) {
      r.sparsity_mean += r.sparsity[l] / layers_.size();
      r.hot_share_mean += r.hot_share[l] / layers_.size();
    }
  }
  r.reuse = base > 0 ? static_cast<double>(kept) / base : 0.0;
  return r;
}

absl::StatusOr<RealisedStats> MeasureTrace(const std::string& path, double hot_fraction,
                                           int64_t first_step) {
  KX_ASSIGN_OR_RETURN(sparse::TraceReader reader, sparse::TraceReader::Open(path));
  StatsAccumulator acc(reader.header().n_ff, hot_fraction);
  sparse::TraceRecord rec;
  for (;;) {
    KX_ASSIGN_OR_RETURN(bool more, reader.Next(&rec));
    if (!more) break;
    if (rec.step < first_step) continue;
    const std::vector<uint64_t>* set = rec.has_actual      ? &rec.actual
                                       : rec.has_predicted ? &rec.predicted
                                                           : nullptr;
    if (set == nullptr) continue;
    absl::Status st = acc.Add(rec.step, static_cast<int>(rec.layer), set->data());
    if (!st.ok()) return absl::DataLossError(absl::StrCat(path, ": ", st.message()));
  }
  RealisedStats r = acc.Finish();
  if (r.steps == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": no record with a neuron set from step ", first_step, " on"));
  }
  return r;
}

absl::Status CheckRealised(const RealisedStats& got, const SynthSpec& spec,
                           const SynthDerived& derived, const Tolerance& tol) {
  double want_sparsity = 0;
  for (double dl : derived.density) want_sparsity += (1.0 - dl) / derived.density.size();
  std::string bad;
  auto check = [&bad](const char* what, double g, double w, double t) {
    if (!(std::fabs(g - w) <= t)) {
      absl::StrAppend(&bad, bad.empty() ? "" : "; ",
                      absl::StrFormat("%s %.4f, asked %.4f (tolerance %.3f)", what, g, w, t));
    }
  };
  check("sparsity", got.sparsity_mean, want_sparsity, tol.sparsity);
  check("hot share", got.hot_share_mean, spec.hot_share, tol.hot_share);
  check("reuse", got.reuse, spec.reuse, tol.reuse);
  if (bad.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("realised statistics differ: ", bad));
}

std::string FormatRealised(const RealisedStats& got) {
  std::string s = absl::StrFormat(
      "steps %d  sparsity %.4f  hot share %.4f  reuse %.4f\nlayer  sparsity  hot_share\n",
      got.steps, got.sparsity_mean, got.hot_share_mean, got.reuse);
  for (size_t l = 0; l < got.sparsity.size(); ++l) {
    absl::StrAppendFormat(&s, "%5d  %8.4f  %9.4f\n", l, got.sparsity[l], got.hot_share[l]);
  }
  return s;
}

}  // namespace kx::synth
