// Predictor training: mini-batch Adam on positive-weighted BCE, matmuls on
// oneDNN's sgemm (row-major), element-wise work in plain loops the compiler
// vectorizes.
#include <dlfcn.h>
#include <dnnl.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/timer.h"
#include "sparse/predictor.h"
#include "sparse/predictor_internal.h"

namespace kx::sparse {
namespace internal {
namespace {

// Adam hyper-parameters (the usual defaults).
constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.999f;
constexpr float kAdamEps = 1e-8f;
// The cosine schedule ends at this fraction of the initial learning rate.
constexpr double kFinalLrFraction = 0.1;
// Input features with a smaller standard deviation are treated as constant.
constexpr double kMinStd = 1e-6;
// Clamp on neuron frequencies when initialising b2 to the prior log-odds.
constexpr double kMinFrequency = 1e-4;
// Adam's parameter range is split across threads in multiples of this many
// floats (a cache line), so no two threads write the same line.
constexpr int64_t kParamAlign = 16;

using OmpGetMaxThreadsFn = int (*)();
using OmpSetNumThreadsFn = void (*)(int);

struct OmpApi {
  OmpGetMaxThreadsFn get_max = nullptr;
  OmpSetNumThreadsFn set_num = nullptr;
};

const OmpApi& Omp() {
  static const OmpApi api = [] {
    OmpApi a;
    a.get_max = reinterpret_cast<OmpGetMaxThreadsFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    a.set_num = reinterpret_cast<OmpSetNumThreadsFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (!a.get_max || !a.set_num) a = OmpApi{};
    return a;
  }();
  return api;
}

// splitmix64: a portable generator, so weights and shuffles do not depend on
// the standard library's distributions.
uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1).
float UniformSym(uint64_t& state) {
  return static_cast<float>(static_cast<double>(SplitMix(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// e^x for x in [-87, 88] (clamped), ~5e-6 relative error, branch-free so the
// callers' loops vectorize (no libm call).
inline float FastExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundMagic = 12582912.0f;          // 1.5·2^23: adding it rounds to an integer
  constexpr float kExpMin = -87.0f, kExpMax = 88.0f;  // e^x stays a normal float
  // Clamp with fabs arithmetic, not std::min/max: under the default
  // -ftrapping-math GCC will not if-convert float compares, and the loop would
  // stay scalar. Costs ~4e-6 absolute on x (ulp of 88), harmless for gradients.
  x = 0.5f * (x + kExpMin + std::fabs(x - kExpMin));
  x = 0.5f * (x + kExpMax - std::fabs(x - kExpMax));
  const float t = x * kLog2e;
  const float n = (t + kRoundMagic) - kRoundMagic;
  const float r = (t - n) * 0.693147180559945f;  // |r| ≤ ln2/2
  // Taylor series of e^r to degree 6 (|r| ≤ 0.347: truncation < 2e-7).
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

inline float FastSigmoid(float z) { return 1.0f / (1.0f + FastExp(-z)); }

// log(1 + e^z), stable for any z.
double Softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))); }

void UnpackRow(const uint64_t* bits, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = static_cast<float>((bits[i >> 6] >> (i & 63)) & 1u);
}

}  // namespace

OmpThreadCap::OmpThreadCap(int n_threads) {
  const OmpApi& api = Omp();
  if (!api.set_num) return;
  previous_ = api.get_max();
  api.set_num(std::max(1, n_threads));
}

OmpThreadCap::~OmpThreadCap() {
  if (previous_ > 0) Omp().set_num(previous_);
}

WorkerPool::WorkerPool(int n_threads) : cap_(1), pool_(std::max(1, n_threads)) {
  // Worker threads belong to this pool alone: cap them for good.
  const OmpApi& api = Omp();
  if (!api.set_num) return;
  pool_.Run([&](int ith, int) {
    if (ith > 0) api.set_num(1);
  });
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a,
                                      lda, b, ldb, beta, c, ldc);
  KX_CHECK_MSG(st == dnnl_success, "dnnl_sgemm rejected its arguments");
}

absl::Status ValidateTrainInputs(const float* x, int64_t n_tokens, int n_in,
                                 const ActivityMatrix& labels) {
  if (n_tokens <= 0)
    return absl::InvalidArgumentError("predictor training needs tokens (n_tokens ≤ 0)");
  if (x == nullptr) return absl::InvalidArgumentError("predictor training: x is null");
  if (n_in <= 0)
    return absl::InvalidArgumentError(absl::StrCat("predictor n_in must be > 0, got ", n_in));
  if (labels.n_tokens() != n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("predictor labels have ", labels.n_tokens(), " tokens but x has ", n_tokens));
  }
  if (labels.n_neurons() <= 0)
    return absl::InvalidArgumentError("predictor labels have no neurons");
  return absl::OkStatus();
}

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  if (o.rank <= 0)
    return absl::InvalidArgumentError(absl::StrCat("predictor rank must be > 0, got ", o.rank));
  if (o.epochs <= 0)
    return absl::InvalidArgumentError(absl::StrCat("predictor epochs must be > 0, got ", o.epochs));
  if (o.batch <= 0)
    return absl::InvalidArgumentError(absl::StrCat("predictor batch must be > 0, got ", o.batch));
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr))
    return absl::InvalidArgumentError("predictor lr must be a positive number");
  if (!(o.pos_weight > 0.0f) || !std::isfinite(o.pos_weight)) {
    return absl::InvalidArgumentError("predictor pos_weight must be a positive number");
  }
  if (o.n_threads <= 0) return absl::InvalidArgumentError("predictor n_threads must be > 0");
  return absl::OkStatus();
}

TrainData PrepareTrainData(const float* x, int64_t n_tokens, int n_in, const ActivityMatrix& labels,
                           bool standardize) {
  TrainData d;
  d.n_tokens = n_tokens;
  d.n_in = n_in;
  d.n_out = labels.n_neurons();
  d.labels = &labels;
  d.mean.assign(n_in, 0.0f);
  d.inv_std.assign(n_in, 1.0f);
  if (standardize) {
    std::vector<double> sum(n_in, 0.0), sum_sq(n_in, 0.0);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* row = x + t * n_in;
      for (int i = 0; i < n_in; ++i) {
        sum[i] += row[i];
        sum_sq[i] += static_cast<double>(row[i]) * row[i];
      }
    }
    for (int i = 0; i < n_in; ++i) {
      const double mean = sum[i] / static_cast<double>(n_tokens);
      const double var = std::max(0.0, sum_sq[i] / static_cast<double>(n_tokens) - mean * mean);
      const double sd = std::sqrt(var);
      d.mean[i] = static_cast<float>(mean);
      d.inv_std[i] = sd < kMinStd ? 0.0f : static_cast<float>(1.0 / sd);
    }
  }
  d.xs.resize(static_cast<size_t>(n_tokens) * n_in);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* src = x + t * n_in;
    float* dst = d.xs.data() + t * n_in;
    for (int i = 0; i < n_in; ++i) dst[i] = (src[i] - d.mean[i]) * d.inv_std[i];
  }
  std::vector<int64_t> count(d.n_out, 0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const uint64_t* row = labels.Row(t);
    for (int w = 0; w < labels.words_per_row(); ++w) {
      for (uint64_t bits = row[w]; bits != 0; bits &= bits - 1) {
        ++count[w * 64 + __builtin_ctzll(bits)];
      }
    }
  }
  d.frequency.resize(d.n_out);
  for (int n = 0; n < d.n_out; ++n) {
    d.frequency[n] = static_cast<double>(count[n]) / static_cast<double>(n_tokens);
  }
  return d;
}

Trainer::Trainer(const TrainData& data, const TrainOptions& opts, WorkerPool& workers)
    : data_(data), workers_(workers), opts_(opts), rank_(opts.rank) {
  const int64_t n_in = data.n_in, n_out = data.n_out, r = rank_;
  off_b1_ = r * n_in;
  off_w2_ = off_b1_ + r;
  off_b2_ = off_w2_ + n_out * r;
  const int64_t n_params = off_b2_ + n_out;
  params_.assign(n_params, 0.0f);
  m_.assign(n_params, 0.0f);
  v_.assign(n_params, 0.0f);

  // He-uniform W1 for the ReLU layer; W2 uniform with variance 1/(3r); b2 at
  // each neuron's weighted prior log-odds, so training starts from the best
  // constant predictor instead of spending epochs learning the base rates.
  uint64_t rng = opts.seed * 0x2545F4914F6CDD1Dull + 1;
  const float a1 = std::sqrt(6.0f / static_cast<float>(n_in));
  for (int64_t i = 0; i < off_b1_; ++i) params_[i] = a1 * UniformSym(rng);
  const float a2 = 1.0f / std::sqrt(static_cast<float>(r));
  for (int64_t i = off_w2_; i < off_b2_; ++i) params_[i] = a2 * UniformSym(rng);
  for (int64_t n = 0; n < n_out; ++n) {
    const double f = std::clamp(data.frequency[n], kMinFrequency, 1.0 - kMinFrequency);
    params_[off_b2_ + n] = static_cast<float>(std::log(opts.pos_weight * f / (1.0 - f)));
  }
  const int64_t steps_per_epoch = (data.n_tokens + opts.batch - 1) / opts.batch;
  total_steps_ = steps_per_epoch * opts.epochs;
  const int nth = workers.size();
  // A thread's share of a batch is at most ceil(batch / nth) rows.
  const int64_t b = std::min<int64_t>((opts.batch + nth - 1) / nth, data.n_tokens);
  work_.resize(nth);
  for (Workspace& ws : work_) {
    ws.xb.resize(b * n_in);
    ws.yb.resize(b * n_out);
    ws.h.resize(b * r);
    ws.z.resize(b * n_out);
    ws.dh.resize(b * r);
    ws.grads.resize(n_params);
  }
}

void Trainer::RunEpochs(int k, TrainStats* stats) {
  const int64_t n = data_.n_tokens;
  std::vector<int64_t> order(n);
  const int end_epoch = std::min(opts_.epochs, epochs_done_ + k);
  for (; epochs_done_ < end_epoch; ++epochs_done_) {
    // The shuffle of epoch e depends only on (seed, e): resumable.
    uint64_t rng = (opts_.seed + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(epochs_done_);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(SplitMix(rng) % static_cast<uint64_t>(i + 1));
      std::swap(order[i], order[j]);
    }
    double loss_sum = 0;
    for (int64_t begin = 0; begin < n; begin += opts_.batch) {
      const int64_t rows = std::min<int64_t>(opts_.batch, n - begin);
      Step(order.data() + begin, rows, stats != nullptr);
      for (const Workspace& ws : work_) loss_sum += ws.loss;
    }
    if (stats) {
      stats->epoch_loss.push_back(loss_sum / (static_cast<double>(n) * data_.n_out));
    }
  }
}

void Trainer::Step(const int64_t* rows, int64_t bsz, bool want_loss) {
  workers_.pool().Run([&](int ith, int nth) {
    int64_t begin = 0, end = 0;
    ThreadPool::Split(bsz, ith, nth, 1, &begin, &end);
    ComputeGrads(rows + begin, end - begin, bsz, want_loss, work_[ith]);
  });
  ++step_;
  const double progress =
      std::min(1.0, static_cast<double>(step_ - 1) / static_cast<double>(total_steps_));
  const double lr = opts_.lr * (kFinalLrFraction +
                                (1.0 - kFinalLrFraction) * 0.5 * (1.0 + std::cos(M_PI * progress)));
  const double bc1 = 1.0 - std::pow(static_cast<double>(kBeta1), static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(kBeta2), static_cast<double>(step_));
  const auto step_size = static_cast<float>(lr / bc1);
  const auto inv_bc2 = static_cast<float>(1.0 / bc2);
  const auto n_params = static_cast<int64_t>(params_.size());
  workers_.pool().Run([&](int ith, int nth) {
    int64_t begin = 0, end = 0;
    ThreadPool::Split(n_params, ith, nth, kParamAlign, &begin, &end);
    AdamUpdate(begin, end, step_size, inv_bc2);
  });
}

void Trainer::ComputeGrads(const int64_t* rows, int64_t bsz, int64_t batch_rows, bool want_loss,
                           Workspace& ws) {
  const int64_t n_in = data_.n_in, n_out = data_.n_out, r = rank_;
  const float pw = opts_.pos_weight;
  ws.loss = 0;
  if (bsz == 0) {
    std::fill(ws.grads.begin(), ws.grads.end(), 0.0f);
    return;
  }
  const float* w1 = params_.data();
  const float* b1 = params_.data() + off_b1_;
  const float* w2 = params_.data() + off_w2_;
  const float* b2 = params_.data() + off_b2_;
  for (int64_t i = 0; i < bsz; ++i) {
    std::memcpy(ws.xb.data() + i * n_in, data_.xs.data() + rows[i] * n_in, n_in * sizeof(float));
    UnpackRow(data_.labels->Row(rows[i]), static_cast<int>(n_out), ws.yb.data() + i * n_out);
  }
  // Forward: H = relu(X·W1ᵀ + b1), Z = H·W2ᵀ + b2.
  Gemm(false, true, bsz, r, n_in, ws.xb.data(), n_in, w1, n_in, 0.0f, ws.h.data(), r);
  for (int64_t i = 0; i < bsz; ++i) {
    float* h = ws.h.data() + i * r;
    for (int64_t j = 0; j < r; ++j) h[j] = std::max(h[j] + b1[j], 0.0f);
  }
  Gemm(false, true, bsz, n_out, r, ws.h.data(), r, w2, r, 0.0f, ws.z.data(), n_out);
  // dL/dz of pw·y·softplus(−z) + (1−y)·softplus(z) is σ(z)·(1 + (pw−1)·y) − pw·y.
  // The loss is a mean over the batch's tokens (sum over neurons); Adam is
  // insensitive to its scale.
  const float inv_b = 1.0f / static_cast<float>(batch_rows);
  double loss = 0;
  for (int64_t i = 0; i < bsz; ++i) {
    float* z = ws.z.data() + i * n_out;
    const float* y = ws.yb.data() + i * n_out;
    for (int64_t n = 0; n < n_out; ++n) z[n] += b2[n];
    if (want_loss) {
      for (int64_t n = 0; n < n_out; ++n) {
        loss += y[n] > 0.5f ? pw * Softplus(-z[n]) : Softplus(z[n]);
      }
    }
    for (int64_t n = 0; n < n_out; ++n) {
      const float p = FastSigmoid(z[n]);
      z[n] = (p * (1.0f + (pw - 1.0f) * y[n]) - pw * y[n]) * inv_b;
    }
  }
  ws.loss = loss;
  const float* g = ws.z.data();  // now dL/dZ
  float* gw1 = ws.grads.data();
  float* gb1 = ws.grads.data() + off_b1_;
  float* gw2 = ws.grads.data() + off_w2_;
  float* gb2 = ws.grads.data() + off_b2_;
  std::fill(gb2, gb2 + n_out, 0.0f);
  for (int64_t i = 0; i < bsz; ++i) {
    for (int64_t n = 0; n < n_out; ++n) gb2[n] += g[i * n_out + n];
  }
  // dW2 = Gᵀ·H, dH = G·W2 masked by the ReLU, dW1 = dHᵀ·X.
  Gemm(true, false, n_out, r, bsz, g, n_out, ws.h.data(), r, 0.0f, gw2, r);
  Gemm(false, false, bsz, r, n_out, g, n_out, w2, r, 0.0f, ws.dh.data(), r);
  std::fill(gb1, gb1 + r, 0.0f);
  for (int64_t i = 0; i < bsz; ++i) {
    float* dh = ws.dh.data() + i * r;
    const float* h = ws.h.data() + i * r;
    for (int64_t j = 0; j < r; ++j) {
      dh[j] = h[j] > 0.0f ? dh[j] : 0.0f;
      gb1[j] += dh[j];
    }
  }
  Gemm(true, false, r, n_in, bsz, ws.dh.data(), r, ws.xb.data(), n_in, 0.0f, gw1, n_in);
}

void Trainer::AdamUpdate(int64_t begin, int64_t end, float step_size, float inv_bc2) {
  float* p = params_.data();
  float* m = m_.data();
  float* v = v_.data();
  const float* g0 = work_[0].grads.data();
  for (int64_t i = begin; i < end; ++i) {
    float g = g0[i];
    for (size_t t = 1; t < work_.size(); ++t)
      g += work_[t].grads[i];  // thread order: deterministic
    m[i] = kBeta1 * m[i] + (1.0f - kBeta1) * g;
    v[i] = kBeta2 * v[i] + (1.0f - kBeta2) * g * g;
    p[i] -= step_size * m[i] / (std::sqrt(v[i] * inv_bc2) + kAdamEps);
  }
}

Predictor Trainer::Export() const {
  Predictor p;
  p.n_in = data_.n_in;
  p.rank = rank_;
  p.n_out = data_.n_out;
  const int64_t n_in = data_.n_in;
  p.w1.resize(rank_ * n_in);
  p.b1.resize(rank_);
  // W1·((x − μ)·s) + b1 = (W1·diag(s))·x + (b1 − (W1·diag(s))·μ).
  for (int64_t j = 0; j < rank_; ++j) {
    double bias = params_[off_b1_ + j];
    for (int64_t i = 0; i < n_in; ++i) {
      const float w = params_[j * n_in + i] * data_.inv_std[i];
      p.w1[j * n_in + i] = w;
      bias -= static_cast<double>(w) * data_.mean[i];
    }
    p.b1[j] = static_cast<float>(bias);
  }
  p.w2.assign(params_.begin() + off_w2_, params_.begin() + off_b2_);
  p.b2.assign(params_.begin() + off_b2_, params_.end());
  p.threshold = 0.5f;
  return p;
}

}  // namespace internal

absl::StatusOr<Predictor> TrainPredictor(const float* x, int64_t n_tokens, int n_in,
                                         const ActivityMatrix& labels, const TrainOptions& opts,
                                         TrainStats* stats) {
  KX_RETURN_IF_ERROR(internal::ValidateTrainInputs(x, n_tokens, n_in, labels));
  KX_RETURN_IF_ERROR(internal::ValidateTrainOptions(opts));
  Stopwatch timer;
  internal::WorkerPool workers(opts.n_threads);
  const internal::TrainData data =
      internal::PrepareTrainData(x, n_tokens, n_in, labels, opts.standardize);
  internal::Trainer trainer(data, opts, workers);
  trainer.RunEpochs(opts.epochs, stats);
  if (stats) stats->seconds = timer.ElapsedSeconds();
  return trainer.Export();
}

}  // namespace kx::sparse
