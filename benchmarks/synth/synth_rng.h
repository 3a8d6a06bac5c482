// A counter-based random stream for kairox-synth: every row of every tensor
// has its own generator, seeded from (seed, stream, layer, row), so the file
// is the same whatever the number of threads or the order rows are made in.
// xoshiro256** seeded through splitmix64 (both public-domain algorithms,
// written here from their published definitions).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kx::synth {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t RowSeed(uint64_t seed, uint64_t stream, int64_t layer, int64_t row) {
  uint64_t s = seed;
  uint64_t h = SplitMix64(s) ^ (stream * 0xD6E8FEB86659FD93ull);
  h = SplitMix64(h) ^ static_cast<uint64_t>(layer);
  h = SplitMix64(h) ^ static_cast<uint64_t>(row);
  return SplitMix64(h);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) w = SplitMix64(seed);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform on [-√3·σ, √3·σ]: mean 0, standard deviation σ. The weights only
  // need a scale, and this is several times cheaper than a normal draw.
  double Symmetric(double sigma) { return (2.0 * Uniform() - 1.0) * 1.7320508075688772 * sigma; }
  // [0, n), n > 0 (the modulo bias is below 2^-40 for the sizes used here).
  uint64_t Below(uint64_t n) { return Next() % n; }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(i)]);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace kx::synth
