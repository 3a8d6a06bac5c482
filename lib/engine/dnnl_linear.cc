#include "engine/dnnl_linear.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/kernels.h"

namespace kx {
namespace {

using dt = dnnl::memory::data_type;

// Rows per unit when splitting weight conversion and source rounding
// across threads (whole cache lines of bf16 for typical widths).
constexpr int64_t kConvertRowAlign = 4;
// The probe shape for Supported(): small, but large enough that oneDNN
// offers its optimized bf16 kernels rather than only the reference one.
constexpr int64_t kProbeM = 32, kProbeK = 256, kProbeN = 256;
// Scratch buffers are aligned for oneDNN's vector loads.
constexpr size_t kScratchAlign = 64;
// Output rows per unit when a group's rows are split across threads: whole
// 16-float vectors of the f32 destination, as oneDNN's kernels store them.
constexpr int64_t kMatmulRowAlign = 16;
// Jobs per group (forward.cc: Q/K/V is the largest).
constexpr int kMaxJobs = 4;

// libgomp's per-thread thread-count ICV, looked up at run time in the
// OpenMP runtime that libdnnl already loaded: no link-time OpenMP
// dependency, and nothing to do for a oneDNN built on another runtime.
struct OmpApi {
  int (*get_max_threads)() = nullptr;
  void (*set_num_threads)(int) = nullptr;
};

const OmpApi& Omp() {
  static const OmpApi api = [] {
    OmpApi a;
    a.get_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    a.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (a.get_max_threads == nullptr || a.set_num_threads == nullptr) a = OmpApi{};
    return a;
  }();
  return api;
}

// Caps OpenMP at one thread for the calling thread while alive (oneDNN
// reads the cap both when it creates a primitive and when it runs one),
// so oneDNN runs inline and never starts spinning OpenMP workers. libgomp
// keeps the cap per thread (a non-OpenMP thread gets its own copy on first
// write), so other threads and later oneDNN users are unaffected.
class SingleThreadedOmp {
 public:
  SingleThreadedOmp() {
    if (Omp().set_num_threads == nullptr) return;
    saved_ = Omp().get_max_threads();
    if (saved_ != 1) Omp().set_num_threads(1);
  }
  ~SingleThreadedOmp() {
    if (saved_ > 1) Omp().set_num_threads(saved_);
  }
  SingleThreadedOmp(const SingleThreadedOmp&) = delete;
  SingleThreadedOmp& operator=(const SingleThreadedOmp&) = delete;

 private:
  int saved_ = 0;
};

dnnl::engine& CpuEngine() {
  static dnnl::engine* eng = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  return *eng;
}

// dst[m × n] (row stride ldd, f32) = src[m × k] (bf16, dense) · W^T with W
// n rows of k bf16 (dense): oneDNN's B is k × n with strides {1, k}.
// With `accumulate`, dst += instead (a sum post-op): the split source's
// second half.
dnnl::matmul::primitive_desc MatmulDesc(int64_t m, int64_t k, int64_t n, int64_t ldd,
                                        bool accumulate) {
  const dnnl::memory::desc src_md({m, k}, dt::bf16, dnnl::memory::dims{k, 1});
  const dnnl::memory::desc w_md({k, n}, dt::bf16, dnnl::memory::dims{1, k});
  const dnnl::memory::desc dst_md({m, n}, dt::f32, dnnl::memory::dims{ldd, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, w_md, dst_md), attr, CpuEngine());
}

// One cached primitive with its memory objects (data handles set per call).
struct Cached {
  dnnl::primitive prim;
  dnnl::memory src, weights, dst, scratch;
  size_t scratch_bytes = 0;
};

using MatmulKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;  // m, k, n, ldd, +=
using ReorderKey = std::tuple<int64_t, int64_t, int64_t>;                // rows, k, src_ld
using WeightKey =
    std::tuple<const uint8_t*, GgmlType, int64_t, int64_t>;  // data, type, n_in, n_out

// Per pool thread: its own primitives, stream and scratchpad, so Matmul
// needs no lock.
struct ThreadState {
  std::unique_ptr<dnnl::stream> stream;
  absl::flat_hash_map<MatmulKey, Cached> matmuls;
  absl::flat_hash_map<ReorderKey, Cached> reorders;
  std::vector<uint8_t> scratch;
  std::vector<float> row;  // one dequantized weight row
  std::string error;       // first oneDNN error of this thread
};

}  // namespace

uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

struct DnnlLinear::Impl {
  std::vector<ThreadState> threads;
  // By the weight's bytes and shape: a different matrix at a reused address
  // (which the contract rules out) at least never reads past a copy's end.
  absl::flat_hash_map<WeightKey, std::unique_ptr<uint16_t[]>> weights;
  uint64_t weight_bytes = 0;
  std::vector<uint16_t> src;  // the prepared bf16 source, m × k dense
  int64_t src_m = 0, src_k = 0;
  bool split_src = false;

  dnnl::stream& Stream(ThreadState& t) {
    if (!t.stream) t.stream = std::make_unique<dnnl::stream>(CpuEngine());
    return *t.stream;
  }
  // dst (+)= src · w^T with the thread's cached primitive for the shape.
  void Execute(ThreadState& t, const uint16_t* src_rows, const uint16_t* w, int64_t rows, int64_t k,
               int64_t m_rows, float* dst, int64_t ldd, bool accumulate) {
    const MatmulKey key{m_rows, k, rows, ldd, accumulate};
    auto it = t.matmuls.find(key);
    if (it == t.matmuls.end()) {
      const dnnl::matmul::primitive_desc pd = MatmulDesc(m_rows, k, rows, ldd, accumulate);
      Cached c;
      c.prim = dnnl::matmul(pd);
      c.src = dnnl::memory(pd.src_desc(), CpuEngine(), DNNL_MEMORY_NONE);
      c.weights = dnnl::memory(pd.weights_desc(), CpuEngine(), DNNL_MEMORY_NONE);
      c.dst = dnnl::memory(pd.dst_desc(), CpuEngine(), DNNL_MEMORY_NONE);
      c.scratch = dnnl::memory(pd.scratchpad_desc(), CpuEngine(), DNNL_MEMORY_NONE);
      c.scratch_bytes = pd.scratchpad_desc().get_size();
      it = t.matmuls.emplace(key, std::move(c)).first;
    }
    Cached& c = it->second;
    c.src.set_data_handle(const_cast<uint16_t*>(src_rows));
    c.weights.set_data_handle(const_cast<uint16_t*>(w));
    c.dst.set_data_handle(dst);
    c.scratch.set_data_handle(Scratch(t, c.scratch_bytes));
    c.prim.execute(Stream(t), {{DNNL_ARG_SRC, c.src},
                               {DNNL_ARG_WEIGHTS, c.weights},
                               {DNNL_ARG_DST, c.dst},
                               {DNNL_ARG_SCRATCHPAD, c.scratch}});
    Stream(t).wait();
  }
  // A pointer into t.scratch with `bytes` usable at kScratchAlign.
  void* Scratch(ThreadState& t, size_t bytes) {
    if (t.scratch.size() < bytes + kScratchAlign) t.scratch.resize(bytes + kScratchAlign);
    auto p = reinterpret_cast<uintptr_t>(t.scratch.data());
    return reinterpret_cast<void*>((p + kScratchAlign - 1) & ~(uintptr_t{kScratchAlign} - 1));
  }
};

DnnlLinear::DnnlLinear(int n_threads, bool split_src) : impl_(std::make_unique<Impl>()) {
  impl_->split_src = split_src;
  impl_->threads.resize(static_cast<size_t>(std::max(1, n_threads)));
}

DnnlLinear::~DnnlLinear() = default;

bool DnnlLinear::Supported() {
  static const bool supported = [] {
    const std::string impl = ImplName(kProbeM, kProbeK, kProbeN);
    return !impl.empty() && impl.rfind("ref", 0) != 0;
  }();
  return supported;
}

std::string DnnlLinear::ImplName(int64_t m, int64_t k, int64_t n) {
  SingleThreadedOmp cap;
  try {
    return MatmulDesc(m, k, n, n, false).impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

const uint16_t* DnnlLinear::Weights(const WeightRef& w, ThreadPool& pool) {
  Impl& m = *impl_;
  const WeightKey key{w.data, w.type, w.n_in, w.n_out};
  if (auto it = m.weights.find(key); it != m.weights.end()) return it->second.get();
  const cpu::TypeKernels* tk = cpu::Kernels().For(w.type);
  if (tk == nullptr || tk->dequantize == nullptr) return nullptr;
  const int64_t k = w.n_in;
  auto bf16 = std::unique_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(k * w.n_out)]);
  uint16_t* dst = bf16.get();
  pool.Run([&](int ith, int nth) {
    int64_t begin, end;
    ThreadPool::Split(w.n_out, ith, nth, kConvertRowAlign, &begin, &end);
    std::vector<float>& row = m.threads[static_cast<size_t>(ith)].row;
    row.resize(static_cast<size_t>(k));
    for (int64_t r = begin; r < end; ++r) {
      tk->dequantize(w.row(r), row.data(), k);
      for (int64_t i = 0; i < k; ++i) dst[r * k + i] = F32ToBf16(row[static_cast<size_t>(i)]);
    }
  });
  m.weight_bytes += static_cast<uint64_t>(k) * static_cast<uint64_t>(w.n_out) * sizeof(uint16_t);
  return m.weights.emplace(key, std::move(bf16)).first->second.get();
}

uint64_t DnnlLinear::weight_bytes() const { return impl_->weight_bytes; }

void DnnlLinear::PrepareSrc(const float* src, int64_t src_ld, int64_t m_rows, int64_t k,
                            ThreadPool& pool) {
  Impl& m = *impl_;
  m.src.resize(static_cast<size_t>(m_rows * k * (m.split_src ? 2 : 1)));
  m.src_m = m_rows;
  m.src_k = k;
  if (m.split_src) {
    // x = hi + lo: hi is x truncated to bf16 (its top 16 bits), so x − hi is
    // exact in f32 and |x − hi| < 2^-7·|x|; lo rounds that to bf16, leaving
    // |x − hi − lo| <= 2^-8·|x − hi| < 2^-15·|x|. Branch-free so it vectorizes.
    uint16_t* hi = m.src.data();
    uint16_t* lo = m.src.data() + m_rows * k;
    pool.Run([&](int ith, int nth) {
      int64_t begin, end;
      ThreadPool::Split(m_rows, ith, nth, 1, &begin, &end);
      for (int64_t b = begin; b < end; ++b) {
        const float* x = src + b * src_ld;
        uint16_t* h = hi + b * k;
        uint16_t* l = lo + b * k;
        for (int64_t i = 0; i < k; ++i) {
          uint32_t u;
          std::memcpy(&u, &x[i], sizeof u);
          const uint32_t top = u & 0xffff0000u;
          float t;
          std::memcpy(&t, &top, sizeof t);
          const float rest = x[i] - t;
          uint32_t r;
          std::memcpy(&r, &rest, sizeof r);
          r += 0x7fffu + ((r >> 16) & 1u);
          h[i] = static_cast<uint16_t>(u >> 16);
          l[i] = static_cast<uint16_t>(r >> 16);
        }
      }
    });
    return;
  }
  pool.Run([&](int ith, int nth) {
    int64_t begin, end;
    ThreadPool::Split(m_rows, ith, nth, 1, &begin, &end);
    if (begin >= end) return;
    ThreadState& t = m.threads[static_cast<size_t>(ith)];
    if (!t.error.empty()) return;
    SingleThreadedOmp cap;
    try {
      // oneDNN's jitted reorder rounds to nearest even like F32ToBf16, with
      // AVX-512 instead of a scalar loop.
      const ReorderKey key{end - begin, k, src_ld};
      auto it = t.reorders.find(key);
      if (it == t.reorders.end()) {
        const dnnl::memory::desc s_md({end - begin, k}, dt::f32, dnnl::memory::dims{src_ld, 1});
        const dnnl::memory::desc d_md({end - begin, k}, dt::bf16, dnnl::memory::dims{k, 1});
        dnnl::reorder::primitive_desc pd(CpuEngine(), s_md, CpuEngine(), d_md);
        Cached c;
        c.prim = dnnl::reorder(pd);
        c.src = dnnl::memory(s_md, CpuEngine(), DNNL_MEMORY_NONE);
        c.dst = dnnl::memory(d_md, CpuEngine(), DNNL_MEMORY_NONE);
        it = t.reorders.emplace(key, std::move(c)).first;
      }
      Cached& c = it->second;
      c.src.set_data_handle(const_cast<float*>(src + begin * src_ld));
      c.dst.set_data_handle(m.src.data() + begin * k);
      c.prim.execute(m.Stream(t), {{DNNL_ARG_SRC, c.src}, {DNNL_ARG_DST, c.dst}});
      m.Stream(t).wait();
    } catch (const dnnl::error& e) {
      t.error = absl::StrCat("oneDNN bf16 reorder ", end - begin, "x", k, ": ", e.what());
    }
  });
}

void DnnlLinear::Matmul(int ith, const uint16_t* w, int64_t rows, int64_t k, int64_t m_rows,
                        float* dst, int64_t ldd) {
  Impl& m = *impl_;
  KX_CHECK(ith >= 0 && ith < static_cast<int>(m.threads.size()));
  KX_CHECK_MSG(m_rows == m.src_m && k == m.src_k, "Matmul shape differs from PrepareSrc's");
  ThreadState& t = m.threads[static_cast<size_t>(ith)];
  if (!t.error.empty() || rows <= 0 || m_rows <= 0) return;
  SingleThreadedOmp cap;
  try {
    m.Execute(t, m.src.data(), w, rows, k, m_rows, dst, ldd, false);
    if (m.split_src) m.Execute(t, m.src.data() + m_rows * k, w, rows, k, m_rows, dst, ldd, true);
  } catch (const dnnl::error& e) {
    t.error = absl::StrCat("oneDNN bf16 matmul ", m_rows, "x", k, "x", rows, ": ", e.what());
  }
}

bool DnnlLinear::RunGroup(const float* src, int64_t src_ld, int n_tokens, const Job* jobs,
                          int n_jobs, ThreadPool& pool) {
  KX_CHECK(n_jobs > 0 && n_jobs <= kMaxJobs);
  const int64_t k = jobs[0].w->n_in;
  const uint16_t* wb[kMaxJobs];
  int64_t total_rows = 0;
  for (int j = 0; j < n_jobs; ++j) {
    KX_CHECK(jobs[j].w->n_in == k);
    wb[j] = Weights(*jobs[j].w, pool);
    if (wb[j] == nullptr) return false;
    total_rows += jobs[j].w->n_out;
  }
  PrepareSrc(src, src_ld, n_tokens, k, pool);
  if (!ok()) return false;
  pool.Run([&](int ith, int nth) {
    int64_t begin, end;
    ThreadPool::Split(total_rows, ith, nth, kMatmulRowAlign, &begin, &end);
    int64_t base = 0;
    for (int j = 0; j < n_jobs && begin < end; ++j) {
      const int64_t n_out = jobs[j].w->n_out;
      const int64_t lo = std::max(begin, base), hi = std::min(end, base + n_out);
      if (lo < hi) {
        const int64_t r0 = lo - base;
        Matmul(ith, wb[j] + r0 * k, hi - lo, k, n_tokens, jobs[j].dst + r0, jobs[j].ldd);
      }
      base += n_out;
    }
  });
  return ok();
}

bool DnnlLinear::ok() const {
  for (const ThreadState& t : impl_->threads) {
    if (!t.error.empty()) return false;
  }
  return true;
}

std::string DnnlLinear::error() const {
  for (const ThreadState& t : impl_->threads) {
    if (!t.error.empty()) return t.error;
  }
  return "";
}

void DnnlLinear::ClearError() {
  for (ThreadState& t : impl_->threads) t.error.clear();
}

}  // namespace kx
