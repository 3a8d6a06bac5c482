#include "prepare/profile.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "engine/engine.h"

namespace kx {

MagnitudeHistogram::MagnitudeHistogram(int n_layer, int n_ff)
    : n_ff_(n_ff),
      bins_(n_layer, std::vector<uint64_t>(kBins, 0)),
      zeros_(n_layer, 0),
      totals_(n_layer, 0) {}

void MagnitudeHistogram::OnActivations(int layer, int n, float* act) {
  std::vector<uint64_t>& bins = bins_[layer];
  const int64_t count = static_cast<int64_t>(n) * n_ff_;
  for (int64_t i = 0; i < count; ++i) {
    const float a = std::fabs(act[i]);
    if (!(a > 0.0f)) {
      ++zeros_[layer];
      continue;
    }
    const double bin = (std::log2(static_cast<double>(a)) - kLogMin) * kBinsPerOctave;
    if (bin < 0) {
      ++zeros_[layer];
    } else {
      ++bins[std::min<int64_t>(static_cast<int64_t>(bin), kBins - 1)];
    }
  }
  totals_[layer] += count;
}

std::vector<float> MagnitudeHistogram::Thresholds(double s) const {
  KX_CHECK(s >= 0.0 && s < 1.0);
  std::vector<float> out(bins_.size(), 0.0f);
  for (size_t l = 0; l < bins_.size(); ++l) {
    const double want = s * static_cast<double>(totals_[l]);
    double cum = static_cast<double>(zeros_[l]);
    if (cum >= want) continue;  // t = 0: enough exact zeros
    for (int b = 0; b < kBins; ++b) {
      const double c = static_cast<double>(bins_[l][b]);
      if (cum + c >= want) {
        const double frac = c > 0 ? (want - cum) / c : 0.0;
        const double lg = kLogMin + (b + frac) / kBinsPerOctave;
        out[l] = static_cast<float>(std::exp2(lg));
        break;
      }
      cum += c;
    }
  }
  return out;
}

double MagnitudeHistogram::FractionAtOrBelow(int layer, float t) const {
  if (totals_[layer] == 0) return 0.0;
  double cum = static_cast<double>(zeros_[layer]);
  if (t > 0.0f) {
    const double bin = (std::log2(static_cast<double>(t)) - kLogMin) * kBinsPerOctave;
    const int64_t full = std::clamp<int64_t>(static_cast<int64_t>(bin), 0, kBins);
    for (int64_t b = 0; b < full; ++b) cum += static_cast<double>(bins_[layer][b]);
  }
  return cum / static_cast<double>(totals_[layer]);
}

ActivityRecorder::ActivityRecorder(int n_layer, int n_embd, int n_ff, int64_t n_tokens,
                                   std::vector<float> thresholds)
    : n_embd_(n_embd), n_ff_(n_ff), capacity_(n_tokens), thresholds_(std::move(thresholds)) {
  KX_CHECK(static_cast<int>(thresholds_.size()) == n_layer);
  activity_.reserve(n_layer);
  inputs_.reserve(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    activity_.emplace_back(n_tokens, n_ff);
    inputs_.emplace_back(static_cast<size_t>(n_tokens) * n_embd, 0.0f);
    max_abs_.emplace_back(n_ff, 0.0f);
  }
}

void ActivityRecorder::OnFfnInput(int layer, int n, const float* x) {
  if (layer == 0) {
    batch_start_ = next_;
    next_ += n;
    KX_CHECK(next_ <= capacity_);
  }
  std::memcpy(&inputs_[layer][static_cast<size_t>(batch_start_) * n_embd_], x,
              sizeof(float) * static_cast<size_t>(n) * n_embd_);
}

void ActivityRecorder::OnActivations(int layer, int n, float* act) {
  const float t = thresholds_[layer];
  sparse::ActivityMatrix& a = activity_[layer];
  float* mx = max_abs_[layer].data();
  for (int b = 0; b < n; ++b) {
    uint64_t* row = a.MutableRow(batch_start_ + b);
    const float* v = act + static_cast<size_t>(b) * n_ff_;
    for (int i = 0; i < n_ff_; ++i) {
      const float m = std::fabs(v[i]);
      if (m > t) row[i >> 6] |= uint64_t{1} << (i & 63);
      mx[i] = std::max(mx[i], m);
    }
  }
}

absl::Status RunCalibration(Engine& engine, const CalibrationSet& set, FfnHook* hook,
                            const std::function<void(int64_t, int64_t)>& progress) {
  engine.SetFfnHook(hook);
  int64_t done = 0;
  absl::Status st;
  for (const std::vector<int32_t>& seq : set.sequences) {
    engine.TruncateKv(0);
    st = engine.Eval(seq);
    if (!st.ok()) break;
    done += static_cast<int64_t>(seq.size());
    if (progress) progress(done, set.n_tokens);
  }
  engine.SetFfnHook(nullptr);
  engine.TruncateKv(0);
  return st;
}

}  // namespace kx
