// A binary token × neuron activity matrix: bit (t, n) says neuron n of one
// FFN layer was active for token t. It is what profiling records and what
// grouping (co-activation), predictor training (labels) and their held-out
// evaluations read. Rows are packed 64 neurons per word so a 16k-token
// profile of a 1536-neuron layer is 3 MB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/check.h"

namespace kx::sparse {

// The most neuron groups one layer may have (the runtime's per-layer group
// tables; KAIROX caps it at 1024 too).
inline constexpr int kMaxGroupsPerLayer = 1024;

class ActivityMatrix {
 public:
  ActivityMatrix() = default;
  ActivityMatrix(int64_t n_tokens, int n_neurons)
      : n_tokens_(n_tokens),
        n_neurons_(n_neurons),
        words_per_row_((n_neurons + 63) / 64),
        bits_(static_cast<size_t>(n_tokens) * static_cast<size_t>((n_neurons + 63) / 64), 0) {
    KX_CHECK(n_tokens >= 0 && n_neurons >= 0);
  }

  int64_t n_tokens() const { return n_tokens_; }
  int n_neurons() const { return n_neurons_; }
  int words_per_row() const { return words_per_row_; }

  bool Get(int64_t t, int n) const {
    return (Row(t)[n >> 6] >> (n & 63)) & 1u;
  }
  void Set(int64_t t, int n, bool on) {
    uint64_t& word = MutableRow(t)[n >> 6];
    const uint64_t bit = uint64_t{1} << (n & 63);
    word = on ? (word | bit) : (word & ~bit);
  }
  const uint64_t* Row(int64_t t) const {
    return bits_.data() + static_cast<size_t>(t) * words_per_row_;
  }
  uint64_t* MutableRow(int64_t t) {
    return bits_.data() + static_cast<size_t>(t) * words_per_row_;
  }
  // Active neurons of token t.
  int CountRow(int64_t t) const {
    int c = 0;
    const uint64_t* r = Row(t);
    for (int w = 0; w < words_per_row_; ++w) c += __builtin_popcountll(r[w]);
    return c;
  }
  // Tokens [begin, end) as a new matrix (held-out splits).
  ActivityMatrix Slice(int64_t begin, int64_t end) const {
    KX_CHECK(begin >= 0 && begin <= end && end <= n_tokens_);
    ActivityMatrix out(end - begin, n_neurons_);
    for (int64_t t = begin; t < end; ++t) {
      const uint64_t* src = Row(t);
      uint64_t* dst = out.MutableRow(t - begin);
      for (int w = 0; w < words_per_row_; ++w) dst[w] = src[w];
    }
    return out;
  }

 private:
  int64_t n_tokens_ = 0;
  int n_neurons_ = 0;
  int words_per_row_ = 0;
  std::vector<uint64_t> bits_;
};

}  // namespace kx::sparse
