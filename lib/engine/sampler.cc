#include "engine/sampler.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kx {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Top-p sorts the most likely candidates in chunks that double in size until
// the mass is reached: typical distributions stop within the first chunk, so
// the cost stays O(n) instead of a full O(n log n) sort.
constexpr size_t kTopPFirstChunk = 64;
// 2^-53: maps the top 53 bits of a 64-bit output onto [0, 1) exactly.
constexpr double kTwoPowMinus53 = 1.0 / 9007199254740992.0;
constexpr int kRawBitsDropped = 64 - 53;

}  // namespace

absl::StatusOr<std::vector<LogitBias>> ParseLogitBias(std::string_view spec) {
  std::vector<LogitBias> out;
  if (spec.empty()) return out;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view entry = spec.substr(start, comma - start);
    start = comma + 1;
    const std::string shown(entry);
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit bias '", shown, "': ", absl::string_view(why.data(), why.size()),
                       " (expected ID+BIAS or ID-BIAS, e.g. 15043+1.5 "
                       "or 2-inf)"));
    };
    const size_t sign = entry.find_first_of("+-");
    if (sign == std::string_view::npos || sign == 0) return bad("no token id before + or -");
    int32_t token = 0;
    const auto [id_end, id_err] = std::from_chars(entry.data(), entry.data() + sign, token);
    if (id_err != std::errc() || id_end != entry.data() + sign || token < 0) {
      return bad("the token id is not a non-negative integer");
    }
    // Plain decimals and inf only: strtof alone would also take hex floats and nan.
    const std::string number(entry.substr(sign));
    const std::string_view magnitude = std::string_view(number).substr(1);
    const bool is_inf = magnitude == "inf" || magnitude == "infinity";
    if (magnitude.empty() ||
        (!is_inf && magnitude.find_first_not_of("0123456789.eE+-") != std::string_view::npos)) {
      return bad("the bias is not a number or inf");
    }
    char* end = nullptr;
    errno = 0;
    const float bias = std::strtof(number.c_str(), &end);
    if (end != number.c_str() + number.size() || bias != bias || errno == ERANGE) {
      return bad("the bias is not a number or inf");
    }
    out.push_back({token, bias});
  }
  return out;
}

absl::Status ValidateSamplerParams(const SamplerParams& p) {
  auto bad = [](std::string_view name, double value, std::string_view range) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(name.data(), name.size()), " = ", value,
                     " is out of range (", absl::string_view(range.data(), range.size()), ")"));
  };
  if (!std::isfinite(p.temperature)) {
    return bad("temperature", p.temperature, "a finite number; <= 0 means greedy");
  }
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "0 to 1; 1 = off");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "0 to 1; 0 = off");
  if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f)) {
    return bad("repeat_penalty", p.repeat_penalty, "a finite number > 0; 1 = off");
  }
  if (p.repeat_last_n < -1) {
    return bad("repeat_last_n", p.repeat_last_n, ">= -1; 0 = off, -1 = the whole history");
  }
  if (p.top_k < -1) return bad("top_k", p.top_k, ">= -1; <= 0 = off");
  return absl::OkStatus();
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {}

void Sampler::Reset(uint64_t seed) {
  params_.seed = seed;
  rng_.seed(seed);
}

double Sampler::UniformFromBits(uint64_t bits) {
  return static_cast<double>(bits >> kRawBitsDropped) * kTwoPowMinus53;
}

namespace {
// Strict total order: higher logit first, then lower id. Makes every
// selection's result independent of the library's algorithm.
struct MoreLikely {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};
}  // namespace

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history) {
  KX_CHECK_MSG(!logits.empty(), "Sampler::Sample needs at least one logit");
  KX_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  const size_t n = logits.size();
  vals_.resize(n);
  cands_.reserve(n);  // once: later calls never allocate
  for (size_t i = 0; i < n; ++i) {
    const float v = logits[i];
    vals_[i] = v != v ? kNegInf : v;  // NaN is never sampled
  }
  ApplyLogitBias();
  ApplyRepetitionPenalty(history);
  float max_logit = kNegInf;
  for (float v : vals_) max_logit = v > max_logit ? v : max_logit;
  if (max_logit == kNegInf) return 0;  // every logit NaN or -inf (documented)

  if (params_.temperature <= 0.0f) {
    // The first maximum: the lowest id on ties (+inf included).
    return static_cast<int32_t>(std::find(vals_.begin(), vals_.end(), max_logit) - vals_.begin());
  }
  CollectCandidates(max_logit);
  if (params_.top_p < 1.0f) TopP(params_.top_p);
  return Draw(params_.temperature);
}

void Sampler::ApplyLogitBias() {
  const int64_t n = static_cast<int64_t>(vals_.size());
  for (const LogitBias& b : params_.logit_bias) {
    if (b.token < 0 || b.token >= n || b.bias != b.bias) continue;
    float& logit = vals_[static_cast<size_t>(b.token)];
    const float biased = logit + b.bias;
    // -inf + +inf is NaN: a ban (or a -inf logit) wins over a forcing bias.
    logit = biased != biased ? kNegInf : biased;
  }
}

void Sampler::ApplyRepetitionPenalty(std::span<const int32_t> history) {
  const float penalty = params_.repeat_penalty;
  if (!(penalty > 0.0f) || penalty == 1.0f || params_.repeat_last_n == 0 || history.empty()) {
    return;  // off (a penalty <= 0 would flip or blow up logits)
  }
  size_t window = history.size();
  if (params_.repeat_last_n > 0) {
    window = std::min(window, static_cast<size_t>(params_.repeat_last_n));
  }
  // Each distinct token is penalised once, however often it repeats.
  penalized_.assign(history.end() - static_cast<std::ptrdiff_t>(window), history.end());
  std::sort(penalized_.begin(), penalized_.end());
  penalized_.erase(std::unique(penalized_.begin(), penalized_.end()), penalized_.end());
  const int64_t n = static_cast<int64_t>(vals_.size());
  for (int32_t id : penalized_) {
    if (id < 0 || id >= n) continue;
    float& logit = vals_[static_cast<size_t>(id)];
    logit = logit > 0.0f ? logit / penalty : logit * penalty;
  }
}

void Sampler::CollectCandidates(float max_logit) {
  cands_.clear();
  const size_t n = vals_.size();
  const size_t k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : n;
  if (max_logit == std::numeric_limits<float>::infinity()) {
    // The softmax limit: all mass shared equally by the +inf tokens.
    for (size_t i = 0; i < n; ++i) {
      if (vals_[i] == max_logit) cands_.push_back({0.0f, static_cast<int32_t>(i)});
    }
    in_id_order_ = true;
    TopK(k);
    return;
  }
  // Min-p's cutoff depends only on the top logit, which top-k keeps, so
  // applying it while gathering is exact: p_i >= min_p · p_max  <=>
  // logit_i >= max_logit + log(min_p). -inf never passes.
  float cutoff = std::numeric_limits<float>::lowest();
  if (params_.min_p > 0.0f) cutoff = std::max(cutoff, max_logit + std::log(params_.min_p));
  // The top token always survives (min_p <= 1 is validated; this keeps the draw memory-safe
  // for a caller that skipped ValidateSamplerParams).
  cutoff = std::min(cutoff, max_logit);
  if (k >= n) {
    for (size_t i = 0; i < n; ++i) {
      if (vals_[i] >= cutoff) cands_.push_back({vals_[i], static_cast<int32_t>(i)});
    }
    in_id_order_ = true;
    return;
  }
  // Top-k by a k-entry heap whose front is the least likely kept token: most
  // tokens cost one compare against it.
  const MoreLikely more_likely;
  for (size_t i = 0; i < n; ++i) {
    if (!(vals_[i] >= cutoff)) continue;
    const Candidate c{vals_[i], static_cast<int32_t>(i)};
    if (cands_.size() < k) {
      cands_.push_back(c);
      std::push_heap(cands_.begin(), cands_.end(), more_likely);
    } else if (more_likely(c, cands_.front())) {
      std::pop_heap(cands_.begin(), cands_.end(), more_likely);
      cands_.back() = c;
      std::push_heap(cands_.begin(), cands_.end(), more_likely);
    }
  }
  in_id_order_ = false;
}

void Sampler::TopK(size_t k) {
  if (k >= cands_.size()) return;
  std::nth_element(cands_.begin(), cands_.begin() + static_cast<std::ptrdiff_t>(k), cands_.end(),
                   MoreLikely{});
  cands_.resize(k);
  in_id_order_ = false;
}

void Sampler::TopP(float top_p) {
  const size_t n = cands_.size();
  if (n <= 1) return;
  float max_logit = kNegInf;
  for (const Candidate& c : cands_) max_logit = std::max(max_logit, c.logit);
  double total = 0.0;
  for (const Candidate& c : cands_) total += std::exp(static_cast<double>(c.logit - max_logit));
  const double target = static_cast<double>(top_p) * total;

  auto begin = cands_.begin();
  double mass = 0.0;
  size_t sorted_end = 0;
  size_t chunk = kTopPFirstChunk;
  while (sorted_end < n) {
    const size_t end = std::min(n, sorted_end + chunk);
    if (end < n) {
      std::nth_element(begin + static_cast<std::ptrdiff_t>(sorted_end),
                       begin + static_cast<std::ptrdiff_t>(end), cands_.end(), MoreLikely{});
    }
    std::sort(begin + static_cast<std::ptrdiff_t>(sorted_end),
              begin + static_cast<std::ptrdiff_t>(end), MoreLikely{});
    in_id_order_ = false;
    for (size_t i = sorted_end; i < end; ++i) {
      mass += std::exp(static_cast<double>(cands_[i].logit - max_logit));
      // The smallest prefix whose mass reaches p; at least one token.
      if (mass >= target) {
        cands_.resize(i + 1);
        return;
      }
    }
    sorted_end = end;
    chunk *= 2;
  }
}

int32_t Sampler::Draw(float temperature) {
  // The draw walks candidates in id order so that the token a given uniform
  // variate selects does not depend on how the filters permuted them.
  if (!in_id_order_) {
    std::sort(cands_.begin(), cands_.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    in_id_order_ = true;
  }
  float max_logit = kNegInf;
  for (const Candidate& c : cands_) max_logit = std::max(max_logit, c.logit);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  weights_.resize(cands_.size());
  double total = 0.0;
  for (size_t i = 0; i < cands_.size(); ++i) {
    weights_[i] = std::exp(static_cast<double>(cands_[i].logit - max_logit) * inv_t);
    total += weights_[i];
  }
  const double target = UniformFromBits(rng_()) * total;
  double cum = 0.0;
  for (size_t i = 0; i < cands_.size(); ++i) {
    cum += weights_[i];
    if (target < cum) return cands_[i].id;
  }
  // Rounding left target at or above the running sum: the last token with
  // any weight (the maximum has weight 1, so one exists).
  for (size_t i = cands_.size(); i-- > 0;) {
    if (weights_[i] > 0.0) return cands_[i].id;
  }
  return cands_.back().id;
}

}  // namespace kx
