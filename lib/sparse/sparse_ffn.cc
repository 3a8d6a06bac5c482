// The sparse FFN over bundles (sparse_ffn.h). Two paths:
//  - fused (the table has matvec_runs for the gate/up type): one pool
//    dispatch; the groups are cut into Begin's n_chunks chunks (a count that
//    depends on n_groups and the thread count the SparseFfn was built for,
//    never on the parts of one call), threads take whole chunks, and group by group
//    gate/up, the threshold and the down projection run back to back, the
//    down rows still in L1, into the chunk's partial y. Each thread's bytes
//    stream once, the software prefetch running on along its whole run list
//    (down rows included) while the down projections compute, instead of a
//    second, compute-bound pass over rows fetched earlier to L2. y is the
//    sum of the partials in chunk order. Two chunks per thread: 16 fixed
//    chunks cost ~0.03-0.05x of the dense FFN's time on 2 threads (the
//    partials another core wrote are read back at the end), measured with
//    bench_sparse_ffn -t 2 at 100 % active.
//  - per run (other tables, or gate and up of different types): gate/up/
//    threshold by groups (each thread appends its kept neurons to its own
//    share of the down list), then, after the shares are made contiguous,
//    the down projection by output columns.
#include "sparse/sparse_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "model/llama_ffn_activation.h"

namespace kx::sparse {
namespace {

// Output columns per thread start at a multiple of this: whole quant blocks
// of the down type, and y shares that never split a cache line.
constexpr int64_t kColumnAlign = 32;
// Activation scratch is sized for n_embd rounded up to the largest block.
constexpr int64_t kMaxBlock = 256;

// Bundles are scattered and only ~17 KB each: too short for the hardware
// stream prefetcher to ramp up, so every group would start by waiting on
// DRAM. GateUp prefetches group i+1's rows while it computes group i (with
// SmolLM2's layer from DRAM: 2x faster gate/up than without).
constexpr uint64_t kLine = 64;

// Chunks of the fused path (sparse_ffn.cc's top): two per thread, up to
// kMaxChunks, so that a thread held up elsewhere leaves a share to the
// others; each adds one n_embd partial to reduce. Measured on SmolLM2's
// decode, 2 threads, while the decode graph still ran the next layer's
// predictor as a node beside the FFN (since removed, decode_graph.cc): the
// sparse FFN 1.91 ms/token with one chunk per thread, 1.78 with two, 1.80
// with four (medians of 3 interleaved kairox-bench runs). Not re-measured
// without that node.
constexpr int kChunksPerThread = 2;
constexpr int kMaxChunks = 16;
// The largest group size MakeBundleLayout accepts (bundle.h).
constexpr int kMaxGroupSize = 32;

// Most runs one group adds to a matvec_runs list: alternating bits give
// GS/2 runs of the mask, each once for up, gate and down.
constexpr int64_t RunsPerGroup(int gs) { return 3 * ((gs + 1) / 2); }

uint32_t FullMask(int gs) { return gs >= 32 ? ~0u : (1u << gs) - 1u; }

// Calls fn(start, length) for every run of consecutive set bits of m.
template <class Fn>
void ForEachRun(uint32_t m, const Fn& fn) {
  while (m != 0) {
    const int s = __builtin_ctz(m);
    const uint64_t rest = static_cast<uint64_t>(m) >> s;
    const int len = __builtin_ctzll(~rest);  // ~rest has a zero above bit 31
    fn(s, len);
    m &= ~static_cast<uint32_t>(((uint64_t{1} << len) - 1) << s);
  }
}

// Prefetches rows [s, s + len) of each run of `mask` in one part of a bundle
// (rows of row_bytes starting at part). locality 3: to L1 (read next);
// 2: to L2 (down rows, read after all groups' gate/up).
// A prefetch the compiler must keep: GCC deletes loops whose only effect is
// __builtin_prefetch (they count as side-effect free under -ffinite-loops),
// which silently removed these prefetches. asm volatile cannot be dropped.
template <int kLocality>
inline void PrefetchLine(const uint8_t* p) {
#if defined(__x86_64__)
  if constexpr (kLocality == 3) {
    asm volatile("prefetcht0 %0" : : "m"(*p));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*p));
  }
#else
  __builtin_prefetch(p, 0, kLocality);
#endif
}

template <int kLocality>
void PrefetchRows(const uint8_t* part, uint64_t row_bytes, uint32_t mask) {
  ForEachRun(mask, [&](int s, int len) {
    const uint8_t* p = part + static_cast<uint64_t>(s) * row_bytes;
    const uint64_t bytes = static_cast<uint64_t>(len) * row_bytes;
    for (uint64_t b = 0; b < bytes; b += kLine) PrefetchLine<kLocality>(p + b);
  });
}

// The down share of a bundle whose predicted neurons are `mask`, to L2.
void PrefetchDown(const BundleLayout& l, const uint8_t* bundle, uint32_t mask) {
  if (l.down == DownLayout::kBlocks) {
    if (mask == 0) return;
    const uint8_t* p = bundle + l.down_offset();
    for (uint64_t b = 0; b < l.down_bytes; b += kLine) PrefetchLine<2>(p + b);
  } else {
    PrefetchRows<2>(bundle + l.down_offset(), l.down_row_bytes, mask);
  }
}

}  // namespace

float ApplyFfnActivation(FfnActivation act, float g) {
  return ActivatedValue(act, 0.0f, g, 1.0f);
}

SparseFfn::SparseFfn(const cpu::KernelTable& kernels, int64_t n_embd_max, int max_rows,
                     int n_threads)
    : kernels_(kernels),
      n_embd_max_(n_embd_max),
      max_rows_(max_rows),
      n_threads_(std::max(n_threads, 1)) {
  KX_CHECK(n_embd_max > 0 && max_rows > 0);
  const int64_t n_act = (n_embd_max + kMaxBlock - 1) / kMaxBlock * kMaxBlock;
  size_t act_bytes = 0;
  for (const cpu::TypeKernels* k : kernels.types) {
    if (k != nullptr) act_bytes = std::max(act_bytes, k->act_bytes(n_act));
  }
  act_gate_.resize(act_bytes);
  act_up_.resize(act_bytes);
  const auto rows = static_cast<size_t>(max_rows);
  gate_up_.resize(2 * rows);
  // n_groups · RunsPerGroup(GS) = (rows / GS) · 3 · GS / 2 for every even GS.
  runs_.resize(rows / 2 * 3 + static_cast<size_t>(RunsPerGroup(kMaxGroupSize)));
  down_rows_.resize(rows);
  coef_.resize(rows);
  kept_.resize(rows);  // ≥ the number of groups of any group size
  counts_.resize(static_cast<size_t>(n_threads_));
  partial_stride_ = (n_embd_max + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
  partial_.resize(static_cast<size_t>(std::min(kChunksPerThread * n_threads_, kMaxChunks) *
                                     partial_stride_));
}

namespace {

// Runs of consecutive set bits in m.
int RunsInMask(uint32_t m) { return __builtin_popcount(m & ~(m << 1)); }

// Whether a group's up and gate rows are computed whole, as one run (they
// are adjacent, and so are their outputs): when at least half of its neurons
// are predicted. The unpredicted rows' bytes share the run's stream and
// their results are never read (Keep looks at predicted neurons only), while
// splitting a group into short runs leaves the kernel ragged tails. Measured
// on SmolLM2's decode, 2 threads, down-blocks sidecars: at s = 0.5 (75 % of
// the neurons predicted) the sparse FFN took 1.53-1.59 ms/token whole from
// half predicted, 1.67-1.92 from three quarters, 1.89-1.90 only when full;
// at s = 0.15 (98 % predicted) nearly every group is whole either way.
bool WholeGroup(uint32_t m, int gs, const BundleLayout& l) {
  return l.gate_row_bytes == l.up_row_bytes &&
         (m == FullMask(gs) || 2 * __builtin_popcount(m) >= gs);
}

// The number of runs BuildRuns emits for a group with predicted mask m.
int64_t CountRuns(uint32_t m, int gs, const BundleLayout& l) {
  const int64_t down = l.down == DownLayout::kBlocks ? (m != 0 ? 1 : 0) : RunsInMask(m);
  if (WholeGroup(m, gs, l)) return 1 + down;
  return 2 * RunsInMask(m) + down;
}

// Appends the runs of groups [ib, ie) to runs (see GateUp for the order):
// per group its up rows, gate rows (one run for both: WholeGroup), then its
// down rows, to be prefetched only. Returns the number of runs.
int64_t BuildRuns(const SparseFfnArgs& a, int64_t ib, int64_t ie, float* gate_up,
                  cpu::RowRun* runs) {
  const BundleLayout& l = *a.layout;
  const int gs = l.group_size;
  const uint32_t full = FullMask(gs);
  const uint64_t gate_off = l.gate_offset(), down_off = l.down_offset();
  int64_t n = 0;
  for (int64_t i = ib; i < ie; ++i) {
    const uint8_t* b = a.bundles[a.groups[i]];
    float* u = gate_up + i * 2 * gs;
    const uint32_t m = a.masks[i] & full;
    if (WholeGroup(m, gs, l)) {
      runs[n++] = {b, 2 * static_cast<uint64_t>(gs) * l.up_row_bytes, u};
    } else {
      ForEachRun(m, [&](int s, int len) {
        runs[n++] = {b + static_cast<uint64_t>(s) * l.up_row_bytes,
                     static_cast<uint64_t>(len) * l.up_row_bytes, u + s};
      });
      ForEachRun(m, [&](int s, int len) {
        runs[n++] = {b + gate_off + static_cast<uint64_t>(s) * l.gate_row_bytes,
                     static_cast<uint64_t>(len) * l.gate_row_bytes, u + gs + s};
      });
    }
    if (l.down == DownLayout::kBlocks) {
      if (m != 0) runs[n++] = {b + down_off, l.down_bytes, nullptr};
    } else {
      ForEachRun(m, [&](int s, int len) {
        runs[n++] = {b + down_off + static_cast<uint64_t>(s) * l.down_row_bytes,
                     static_cast<uint64_t>(len) * l.down_row_bytes, nullptr};
      });
    }
  }
  return n;
}

}  // namespace

int64_t SparseFfn::Keep(const SparseFfnArgs& a, int64_t ib, int64_t ie) {
  const BundleLayout& l = *a.layout;
  const int gs = l.group_size;
  const uint32_t full = FullMask(gs);
  const uint64_t down_off = l.down_offset();
  const bool blocks = l.down == DownLayout::kBlocks;
  uint32_t* kept = a.kept != nullptr ? a.kept : kept_.data();
  // kRows: one down_rows_/coef_ entry per kept neuron from slot ib·GS on;
  // kBlocks: one down_rows_ entry per group with a kept neuron from slot ib
  // on, with its GS coefficients (0 where not kept) at GS·slot.
  int64_t out = blocks ? ib : ib * gs;
  const int64_t out0 = out;
  for (int64_t i = ib; i < ie; ++i) {
    const uint8_t* b = a.bundles[a.groups[i]];
    float* u = gate_up_.data() + i * 2 * gs;
    float* g = u + gs;
    const uint32_t predicted = a.masks[i] & full;
    // act over the whole group, one vectorizable pass (the slots of
    // unpredicted neurons hold finite leftovers and are never read); then
    // the cut. ReLU family: av == 0 exactly when inactive, so threshold 0 (or
    // t) keeps the rest.
    FfnActivationOnly(a.act, a.act_threshold, g, u, gs);
    uint32_t cut = 0;
    for (int j = 0; j < gs; ++j) cut |= static_cast<uint32_t>(std::fabs(g[j]) > a.threshold) << j;
    const uint32_t keep = predicted & cut;
    kept[i] = keep;
    if (blocks) {
      if (keep == 0) continue;
      down_rows_[static_cast<size_t>(out)] = b + down_off;
      float* c = &coef_[static_cast<size_t>(out * gs)];
      for (int j = 0; j < gs; ++j) c[j] = (keep >> j & 1u) != 0 ? g[j] * u[j] : 0.0f;
      ++out;
      continue;
    }
    for (uint32_t m = keep; m != 0; m &= m - 1) {
      const int j = __builtin_ctz(m);
      down_rows_[static_cast<size_t>(out)] =
          b + down_off + static_cast<uint64_t>(j) * l.down_row_bytes;
      coef_[static_cast<size_t>(out)] = g[j] * u[j];
      ++out;
    }
  }
  return out - out0;
}

void SparseFfn::GateUp(const SparseFfnArgs& a, int ith, int nth) {
  const BundleLayout& l = *a.layout;
  const int gs = l.group_size;
  const cpu::TypeKernels* gate_k = kernels_.For(l.gate_type);
  const cpu::TypeKernels* up_k = kernels_.For(l.up_type);
  const void* act_up = l.up_type == l.gate_type ? act_gate_.data() : act_up_.data();
  const uint64_t gate_off = l.gate_offset();
  const uint32_t full = FullMask(gs);
  int64_t ib, ie;
  ThreadPool::Split(a.n_groups, ith, nth, 1, &ib, &ie);
  if (ib >= ie) {
    counts_[static_cast<size_t>(ith)].n = 0;
    return;
  }
  // The first group has nothing to hide behind: start it now.
  const uint8_t* b0 = a.bundles[a.groups[ib]];
  const uint32_t m0 = a.masks[ib] & full;
  PrefetchRows<3>(b0, l.up_row_bytes, m0);
  PrefetchRows<3>(b0 + gate_off, l.gate_row_bytes, m0);
  PrefetchDown(l, b0, m0);
  for (int64_t i = ib; i < ie; ++i) {
    const uint8_t* b = a.bundles[a.groups[i]];
    // The last group "prefetches" itself with an empty mask (no access).
    const uint8_t* next = i + 1 < ie ? a.bundles[a.groups[i + 1]] : b;
    const uint32_t next_mask = i + 1 < ie ? a.masks[i + 1] & full : 0;
    float* u = gate_up_.data() + i * 2 * gs;
    float* g = u + gs;
    const uint32_t predicted = a.masks[i] & full;
    // The next group's predicted rows, all at once at the start of this one
    // (measured faster than spreading them over this group's kernel calls);
    // down rows to L2: they are read after every group's gate/up.
    PrefetchRows<3>(next, l.up_row_bytes, next_mask);
    PrefetchRows<3>(next + gate_off, l.gate_row_bytes, next_mask);
    PrefetchDown(l, next, next_mask);
    // Up before gate: rows are read in address order. Reading gate first
    // (to skip the up rows of thresholded neurons) jumps backwards inside
    // every bundle, which defeats the hardware stream prefetcher: measured
    // ~3x slower from DRAM than the forward walk on Zen 4.
    ForEachRun(predicted, [&](int s, int len) {
      up_k->matvec(b + static_cast<uint64_t>(s) * l.up_row_bytes, l.up_row_bytes, l.n_embd, len,
                   act_up, u + s);
    });
    ForEachRun(predicted, [&](int s, int len) {
      gate_k->matvec(b + gate_off + static_cast<uint64_t>(s) * l.gate_row_bytes, l.gate_row_bytes,
                     l.n_embd, len, act_gate_.data(), g + s);
    });
  }
  counts_[static_cast<size_t>(ith)].n = Keep(a, ib, ie);
}

void SparseFfn::Fused(const SparseFfnArgs& a, cpu::MatvecRunsFn runs_fn, int n_chunks, int ith,
                      int nth) {
  const BundleLayout& l = *a.layout;
  const int gs = l.group_size;
  int64_t cb, ce;
  ThreadPool::Split(n_chunks, ith, nth, 1, &cb, &ce);
  if (cb >= ce) return;
  auto chunk_begin = [&](int64_t c) { return c * a.n_groups / n_chunks; };
  // The share's whole run list, so that each chunk's call prefetches into
  // the next chunk's rows.
  cpu::RowRun* runs = runs_.data() + chunk_begin(cb) * RunsPerGroup(gs);
  const int64_t n_runs = BuildRuns(a, chunk_begin(cb), chunk_begin(ce), gate_up_.data(), runs);
  // Group by group: its gate/up (prefetching on into the following groups),
  // then its down rows, still in L1, into the chunk's partial. Per group
  // rather than per chunk so that the prefetch stream never waits long
  // behind a down projection.
  int64_t r0 = 0;
  uint64_t prefetched = 0;
  for (int64_t c = cb; c < ce; ++c) {
    float* part = partial_.data() + c * partial_stride_;
    std::fill(part, part + l.n_embd, 0.0f);
    for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
      const int64_t r1 = r0 + CountRuns(a.masks[i] & FullMask(gs), gs, l);
      prefetched = runs_fn(runs + r0, r1 - r0, n_runs - r1, l.up_row_bytes, l.n_embd,
                           act_gate_.data(), prefetched);
      r0 = r1;
      const int64_t n_kept = Keep(a, i, i + 1);
      if (n_kept > 0) Down(l, i, n_kept, 0, l.n_embd, part);
    }
  }
}

void SparseFfn::Down(const BundleLayout& l, int64_t first, int64_t n, int64_t i0, int64_t i1,
                     float* y) {
  if (l.down == DownLayout::kBlocks) {
    const auto f = static_cast<size_t>(first);
    call_.down_blocks(&down_rows_[f], &coef_[f * static_cast<size_t>(l.group_size)], n, i0, i1, y);
  } else {
    const auto f = static_cast<size_t>(first * l.group_size);
    call_.axpy(&down_rows_[f], &coef_[f], n, i0, i1, y);
  }
}

void SparseFfn::Run(const SparseFfnArgs& a, ThreadPool& pool) {
  Begin(a, pool.size());
  for (int phase = 0; phase < 2; ++phase) {
    if (HasPhase(phase)) pool.Run([&](int ith, int nth) { RunPart(phase, ith, nth); });
    if (phase == 0) Between();
  }
  Finish();
}

void SparseFfn::Begin(const SparseFfnArgs& a, int n_parts) {
  KX_CHECK(a.layout != nullptr && a.x != nullptr && a.y != nullptr);
  const BundleLayout& l = *a.layout;
  KX_CHECK_MSG(l.n_embd <= n_embd_max_, "SparseFfn: n_embd exceeds the scratch");
  KX_CHECK_MSG(static_cast<int64_t>(l.n_groups) * l.group_size <= max_rows_,
               "SparseFfn: n_ff exceeds the scratch");
  KX_CHECK(a.n_groups >= 0 && a.n_groups <= l.n_groups);
  KX_CHECK(a.n_groups == 0 || (a.bundles != nullptr && a.groups != nullptr && a.masks != nullptr));
  KX_CHECK_MSG(n_parts >= 1 && (n_parts <= n_threads_ || IsFused(l)),
               "SparseFfn: more parts than the scratch has threads");
  const cpu::TypeKernels* gate_k = kernels_.For(l.gate_type);
  const cpu::TypeKernels* up_k = kernels_.For(l.up_type);
  const bool blocks = l.down == DownLayout::kBlocks;
  const cpu::AxpyRowsFn axpy = blocks ? nullptr : kernels_.AxpyRows(l.down_type);
  const cpu::DownBlocksFn down_blocks = blocks ? kernels_.DownBlocks(l.down_type) : nullptr;
  KX_CHECK_MSG(gate_k != nullptr && up_k != nullptr && (axpy != nullptr || down_blocks != nullptr),
               "SparseFfn: no kernels for the layout's types");

  gate_k->quantize_act(a.x, l.n_embd, act_gate_.data());
  if (l.up_type != l.gate_type) up_k->quantize_act(a.x, l.n_embd, act_up_.data());

  call_ = Call{};
  call_.args = a;
  call_.n_parts = n_parts;
  call_.axpy = axpy;
  call_.down_blocks = down_blocks;
  call_.runs_fn = l.up_type == l.gate_type ? kernels_.MatvecRuns(l.up_type) : nullptr;
  if (call_.runs_fn != nullptr) call_.n_chunks = std::min({a.n_groups, kChunksPerThread * n_threads_, kMaxChunks});
}

bool SparseFfn::HasPhase(int phase) const {
  if (call_.runs_fn != nullptr) return phase == 0 && call_.n_chunks > 0;
  return phase == 1 || call_.args.n_groups > 0;
}

void SparseFfn::RunPart(int phase, int part, int n_parts) {
  KX_CHECK(n_parts == call_.n_parts);
  if (!HasPhase(phase)) return;
  const SparseFfnArgs& a = call_.args;
  if (call_.runs_fn != nullptr) {
    Fused(a, call_.runs_fn, call_.n_chunks, part, n_parts);
    return;
  }
  if (phase == 0) {
    GateUp(a, part, n_parts);
    return;
  }
  int64_t c0, c1;
  ThreadPool::Split(a.layout->n_embd, part, n_parts, kColumnAlign, &c0, &c1);
  if (c1 <= c0) return;
  std::fill(a.y + c0, a.y + c1, 0.0f);
  if (call_.total > 0) Down(*a.layout, 0, call_.total, c0, c1, a.y);
}

void SparseFfn::Between() {
  const SparseFfnArgs& a = call_.args;
  if (call_.runs_fn != nullptr || a.n_groups == 0) return;
  // Close the gaps between the threads' shares (slot order is kept, so
  // the down list, and y, are the same for any thread count).
  const int nth = call_.n_parts;
  int64_t total = 0;
  for (int t = 0; t < nth; ++t) {
    int64_t ib, ie;
    ThreadPool::Split(a.n_groups, t, nth, 1, &ib, &ie);
    // Entries per slot of down_rows_ and of coef_ (Keep says why).
    const bool blocks = a.layout->down == DownLayout::kBlocks;
    const int64_t per_coef = blocks ? a.layout->group_size : 1;
    const int64_t begin = blocks ? ib : ib * a.layout->group_size;
    const int64_t n = counts_[static_cast<size_t>(t)].n;
    if (begin != total && n > 0) {
      std::memmove(&down_rows_[static_cast<size_t>(total)], &down_rows_[static_cast<size_t>(begin)],
                   static_cast<size_t>(n) * sizeof(down_rows_[0]));
      std::memmove(&coef_[static_cast<size_t>(total * per_coef)],
                   &coef_[static_cast<size_t>(begin * per_coef)],
                   static_cast<size_t>(n * per_coef) * sizeof(coef_[0]));
    }
    total += n;
  }
  call_.total = total;
}

void SparseFfn::Finish() {
  const SparseFfnArgs& a = call_.args;
  if (call_.runs_fn == nullptr) return;  // the down phase wrote y
  const int64_t n_embd = a.layout->n_embd;
  if (call_.n_chunks == 0) {
    std::fill(a.y, a.y + n_embd, 0.0f);
    return;
  }
  // The partials in chunk order (O(chunks · n_embd): small beside the FFN).
  std::copy(partial_.data(), partial_.data() + n_embd, a.y);
  for (int c = 1; c < call_.n_chunks; ++c) {
    const float* part = partial_.data() + c * partial_stride_;
    for (int64_t e = 0; e < n_embd; ++e) a.y[e] += part[e];
  }
}

}  // namespace kx::sparse
