// Planted-rule data (see predictor_synthetic.h).
#include "sparse/predictor_synthetic.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/check.h"

namespace kx::sparse {
namespace {
// Every kOutlierEvery-th input feature is an outlier channel kOutlierScale
// times larger than the rest, with a mean offset: what standardization is for.
constexpr int kOutlierEvery = 64;
constexpr float kOutlierScale = 20.0f;
// Neuron activation frequencies: kMinFreq + kFreqSpan·u³, u uniform.
constexpr double kMinFreq = 0.02;
constexpr double kFreqSpan = 0.5;
}  // namespace

PlantedData MakePlantedData(int64_t n_tokens, int n_in, int n_out, int planted_rank, uint64_t seed,
                            double label_noise) {
  KX_CHECK(n_tokens > 0 && n_in > 0 && n_out > 0 && planted_rank > 0);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  PlantedData d;
  d.n_tokens = n_tokens;
  d.n_in = n_in;
  d.n_out = n_out;
  std::vector<float> scale(n_in), shift(n_in);
  for (int i = 0; i < n_in; ++i) {
    const bool outlier = i % kOutlierEvery == 0;
    scale[i] = (outlier ? kOutlierScale : 1.0f) * static_cast<float>(0.5 + uniform(rng));
    shift[i] = outlier ? kOutlierScale * normal(rng) : 0.2f * normal(rng);
  }
  std::vector<float> u(static_cast<size_t>(planted_rank) * n_in),
      v(static_cast<size_t>(n_out) * planted_rank);
  const float u_scale = 1.0f / std::sqrt(static_cast<float>(n_in));
  for (float& w : u) w = normal(rng) * u_scale;
  for (float& w : v) w = normal(rng);
  d.x.resize(static_cast<size_t>(n_tokens) * n_in);
  std::vector<float> z(static_cast<size_t>(n_tokens) * n_out);
  std::vector<float> std_x(n_in), h(planted_rank);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < n_in; ++i) {
      std_x[i] = normal(rng);
      d.x[t * n_in + i] = std_x[i] * scale[i] + shift[i];
    }
    // The rule reads the standardized features, so outliers do not dominate it.
    for (int k = 0; k < planted_rank; ++k) {
      float acc = 0;
      for (int i = 0; i < n_in; ++i) acc += u[k * n_in + i] * std_x[i];
      h[k] = std::max(acc, 0.0f);
    }
    for (int n = 0; n < n_out; ++n) {
      float acc = 0;
      for (int k = 0; k < planted_rank; ++k) acc += v[n * planted_rank + k] * h[k];
      z[t * n_out + n] = acc;
    }
  }
  d.labels = ActivityMatrix(n_tokens, n_out);
  std::vector<float> column(n_tokens);
  for (int n = 0; n < n_out; ++n) {
    const double f = kMinFreq + kFreqSpan * std::pow(uniform(rng), 3.0);
    for (int64_t t = 0; t < n_tokens; ++t) column[t] = z[t * n_out + n];
    const auto k = std::min<int64_t>(n_tokens - 1, static_cast<int64_t>((1.0 - f) * n_tokens));
    std::nth_element(column.begin(), column.begin() + k, column.end());
    const float c = column[k];
    for (int64_t t = 0; t < n_tokens; ++t) {
      bool on = z[t * n_out + n] > c;
      if (label_noise > 0 && uniform(rng) < label_noise) on = !on;
      d.labels.Set(t, n, on);
    }
  }
  return d;
}

}  // namespace kx::sparse
