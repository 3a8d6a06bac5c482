// Decode-time predictor: F16 weights through the CPU kernel table.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "sparse/predictor.h"

namespace kx::sparse {
namespace {

constexpr size_t kHalfBytes = sizeof(uint16_t);

const cpu::TypeKernels& F16Kernels(const cpu::KernelTable& kernels, int64_t n) {
  const cpu::TypeKernels* tk = kernels.For(GgmlType::kF16);
  KX_CHECK_MSG(tk != nullptr, "the kernel table has no F16 kernels");
  // F16 kernels take plain F32 activations (quantize_act is a copy), which
  // lets RunPredictor use x and hidden in place without a scratch buffer.
  KX_CHECK_MSG(tk->act_bytes(n) == static_cast<size_t>(n) * sizeof(float),
               "F16 activations are expected to be plain F32");
  return *tk;
}

}  // namespace

PredictorView PredictorF16::View() const {
  PredictorView v;
  v.n_in = n_in;
  v.rank = rank;
  v.n_out = n_out;
  v.w1 = w1.data();
  v.b1 = b1.data();
  v.w2 = w2.data();
  v.b2 = b2.data();
  v.threshold = threshold;
  return v;
}

int64_t PredictorF16::WeightBytes() const {
  return static_cast<int64_t>(w1.size() + w2.size()) * static_cast<int64_t>(kHalfBytes) +
         static_cast<int64_t>(b1.size() + b2.size()) * static_cast<int64_t>(sizeof(float));
}

std::vector<uint16_t> ToF16(const std::vector<float>& src) {
  std::vector<uint16_t> dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = cpu::FloatToHalf(src[i]);
  return dst;
}

PredictorF16 ToF16Predictor(const Predictor& p) {
  PredictorF16 h;
  h.n_in = p.n_in;
  h.rank = p.rank;
  h.n_out = p.n_out;
  h.w1 = ToF16(p.w1);
  h.w2 = ToF16(p.w2);
  h.b1 = p.b1;
  h.b2 = p.b2;
  h.threshold = p.threshold;
  return h;
}

Predictor RoundedToF16(const Predictor& p) {
  Predictor r = p;
  for (float& w : r.w1) w = cpu::HalfToFloat(cpu::FloatToHalf(w));
  for (float& w : r.w2) w = cpu::HalfToFloat(cpu::FloatToHalf(w));
  return r;
}

void RunPredictorHidden(const PredictorView& p, const cpu::KernelTable& kernels, const float* x,
                        float* hidden) {
  const cpu::TypeKernels& tk = F16Kernels(kernels, p.n_in);
  tk.matvec(p.w1, static_cast<size_t>(p.n_in) * kHalfBytes, p.n_in, p.rank, x, hidden);
  for (int j = 0; j < p.rank; ++j) hidden[j] = std::max(hidden[j] + p.b1[j], 0.0f);
}

void RunPredictorRows(const PredictorView& p, const cpu::KernelTable& kernels, const float* hidden,
                      int row_begin, int row_end, float* logits) {
  KX_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= p.n_out);
  if (row_begin == row_end) return;
  if (p.w2t != nullptr) {
    std::copy(p.b2 + row_begin, p.b2 + row_end, logits + row_begin);
    kernels.vec.axpy_f16_rows(hidden, p.w2t + row_begin, static_cast<size_t>(p.n_out), p.rank,
                              logits + row_begin, row_end - row_begin);
    return;
  }
  const cpu::TypeKernels& tk = F16Kernels(kernels, p.rank);
  const size_t row_bytes = static_cast<size_t>(p.rank) * kHalfBytes;
  tk.matvec(p.w2 + static_cast<int64_t>(row_begin) * p.rank, row_bytes, p.rank, row_end - row_begin,
            hidden, logits + row_begin);
  for (int n = row_begin; n < row_end; ++n) logits[n] += p.b2[n];
}

void RunPredictor(const PredictorView& p, const cpu::KernelTable& kernels, const float* x,
                  float* hidden, float* logits) {
  RunPredictorHidden(p, kernels, x, hidden);
  RunPredictorRows(p, kernels, hidden, 0, p.n_out, logits);
}

float ThresholdLogit(float threshold) {
  if (threshold <= 0.0f) return -std::numeric_limits<float>::infinity();
  if (threshold >= 1.0f) return std::numeric_limits<float>::infinity();
  return static_cast<float>(std::log(static_cast<double>(threshold)) -
                            std::log1p(-static_cast<double>(threshold)));
}

int LogitsToMask(const float* logits, int n_out, float threshold, uint64_t* mask) {
  const float tl = ThresholdLogit(threshold);
  int count = 0;
  for (int w = 0; w * 64 < n_out; ++w) {
    uint64_t bits = 0;
    const int end = std::min(64, n_out - w * 64);
    for (int i = 0; i < end; ++i) bits |= static_cast<uint64_t>(logits[w * 64 + i] >= tl) << i;
    mask[w] = bits;
    count += __builtin_popcountll(bits);
  }
  return count;
}

int LogitsToActiveList(const float* logits, int n_out, float threshold, int32_t* active) {
  const float tl = ThresholdLogit(threshold);
  int count = 0;
  for (int n = 0; n < n_out; ++n) {
    active[count] = n;
    count += logits[n] >= tl;  // branch-free: the slot is overwritten unless kept
  }
  return count;
}

}  // namespace kx::sparse
