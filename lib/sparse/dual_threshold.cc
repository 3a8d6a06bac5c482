#include "sparse/dual_threshold.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace kx::sparse {
namespace {

double Sigmoid(float z) { return 1.0 / (1.0 + std::exp(-static_cast<double>(z))); }

uint32_t CompareGroup(const float* lg, int gs, float t) {
  uint32_t m = 0;
  for (int j = 0; j < gs; ++j) m |= static_cast<uint32_t>(lg[j] >= t) << j;
  return m;
}

}  // namespace

float ThresholdProbability(float logit) { return static_cast<float>(Sigmoid(logit)); }

SplitBottleneck ClassifySplit(int64_t device_wait_ns, int64_t cpu_ns, double device_wait_share) {
  return static_cast<double>(device_wait_ns) > device_wait_share * static_cast<double>(cpu_ns)
             ? SplitBottleneck::kDevice
             : SplitBottleneck::kCpu;
}

DualMaskStep BuildDualMasks(const float* logits, int n_groups, int gs, float logit, float logit_g,
                            float logit_c, const uint8_t* on_device, uint32_t* masks,
                            bool debug_no_clamp) {
  KX_CHECK_MSG(gs >= 1 && gs <= 32, "BuildDualMasks: group size must be in [1, 32]");
  KX_CHECK_MSG(logit_g <= logit && logit <= logit_c, "BuildDualMasks: needs T_g <= T <= T_c");
  DualMaskStep s;
  const bool single = logit_g == logit && logit_c == logit;
  for (int g = 0; g < n_groups; ++g) {
    const float* lg = logits + static_cast<size_t>(g) * gs;
    const bool dev = on_device[g] != 0;
    const uint32_t m = CompareGroup(lg, gs, dev ? logit_g : logit_c);
    masks[g] = m;
    s.predicted += __builtin_popcount(m);
    if (single || (dev ? logit_g : logit_c) == logit) continue;
    // The band: bits where this side's threshold and the single one disagree (a superset of
    // the single mask on the device's groups, a subset on the CPU's).
    uint32_t band = m ^ CompareGroup(lg, gs, logit);
    while (band != 0) {
      const int j = __builtin_ctz(band);
      band &= band - 1;
      const double p = Sigmoid(lg[j]);
      if (dev) {
        ++s.gained;
        s.gain_mass += p;
      } else {
        ++s.dropped;
        s.loss_mass += p;
      }
    }
  }
  if (s.loss_mass > s.gain_mass && !debug_no_clamp) {
    // The bound would not hold: put the CPU's band back group by group (in group order) until
    // it does, so the device's gain still buys what it can. Measured on SmolLM2 with 10 % of
    // the groups on the device, putting the whole band back left no CPU neuron skipped at all:
    // the CPU's band (90 % of the groups) always outweighed the device's.
    for (int g = 0; g < n_groups && s.loss_mass > s.gain_mass; ++g) {
      if (on_device[g] != 0) continue;
      const float* lg = logits + static_cast<size_t>(g) * gs;
      const uint32_t base = CompareGroup(lg, gs, logit);
      uint32_t band = base ^ masks[g];
      if (band == 0) continue;
      masks[g] = base;
      s.predicted += __builtin_popcount(band);
      s.dropped -= __builtin_popcount(band);
      while (band != 0) {
        const int j = __builtin_ctz(band);
        band &= band - 1;
        s.loss_mass -= Sigmoid(lg[j]);
      }
    }
    if (s.dropped == 0) s.loss_mass = 0.0;  // nothing of the band left: exactly 0, not rounding
    s.clamped = true;
  }
  return s;
}

double SkippedMass(const float* logits, int n_groups, int gs, const uint32_t* masks) {
  double e = 0.0;
  for (int g = 0; g < n_groups; ++g) {
    for (int j = 0; j < gs; ++j) {
      if (((masks[g] >> j) & 1u) == 0) e += Sigmoid(logits[static_cast<size_t>(g) * gs + j]);
    }
  }
  return e;
}

DualThreshold::DualThreshold(int n_layer, const DualThresholdOptions& options)
    : options_(options), offset_g_(n_layer, 0.0f), offset_c_(n_layer, 0.0f), clamped_(n_layer, 0) {}

void DualThreshold::Record(int layer, const DualMaskStep& step, float logit) {
  clamped_[layer] = step.clamped ? 1 : 0;
  stats_.steps += 1;
  stats_.gained += step.gained;
  stats_.dropped += step.dropped;
  stats_.clamped += step.clamped ? 1 : 0;
  stats_.gain_mass += step.gain_mass;
  stats_.loss_mass += step.loss_mass;
  stats_.theta_g_sum += Sigmoid(logit_g(layer, logit));
  stats_.theta_c_sum += Sigmoid(logit_c(layer, logit));
  stats_.theta_sum += Sigmoid(logit);
}

void DualThreshold::Feedback(int layer, SplitBottleneck bottleneck) {
  const float step = options_.step_logit, hi = options_.max_offset_logit;
  const bool device = bottleneck == SplitBottleneck::kDevice;
  float& g = offset_g_[layer];
  float& c = offset_c_[layer];
  g = device ? std::max(g - step, 0.0f) : std::min(g + step, hi);
  // A clamped step spent more of the CPU's band than the device's bought: back off.
  c = device || clamped_[layer] != 0 ? std::max(c - step, 0.0f) : std::min(c + step, hi);
}

}  // namespace kx::sparse
