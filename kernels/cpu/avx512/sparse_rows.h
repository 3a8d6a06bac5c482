// AVX-512 matvec_runs (kernels.h): the sparse FFN's gate/up rows over a list
// of runs. What one matvec call per run lacked was not compute (in cache
// both take the same time) but memory-level parallelism: each ~6 KB run
// started with DRAM waits, as the dense kernel's prefetch (two tiles ahead
// inside one matrix) stops at the run's end and the hardware prefetcher
// does not follow jumps between bundles. Here the software prefetch runs a
// fixed byte distance ahead along the whole list, across runs (down runs
// included, to L2), and across calls (SparseFfn calls once per group, with
// the down projection in between). The activations are rearranged once per
// call. Per row the arithmetic is Q16ATiles' (q16a_tiles.h) prepared-quad
// path, operation for operation, so results equal TypeKernels::matvec bit
// for bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx512/q16a_tiles.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::avx512 {

// Bytes of the run list kept in flight ahead of the computation (down
// runs included). Measured on SmolLM2's layer from DRAM (Zen 4, one
// thread, bench_sparse_ffn): gate/up alone at 100% active 86 µs with 4 KB,
// 68 with 8 KB, ~65 with 16-48 KB; none (hardware prefetch only) 89. L1 and
// L2 hints measured alike for the computed runs; down runs go to L2 (they
// are read after the group's gate/up, and L1 is 48 KB).
#ifdef KX_SPARSE_PREFETCH_BYTES  // tuning experiments only
inline constexpr uint64_t kRunsPrefetchBytes = 16384;
#else
inline constexpr uint64_t kRunsPrefetchBytes = 16384;
#endif
// Rows per register tile: 4, 6 and 8 measured alike in cache (compute-bound
// at ~40 GB/s); 8 tiles a full group's 2·16 rows without tails.
#ifdef KX_SPARSE_TILE_ROWS  // tuning experiments only
inline constexpr int kRunsTileRows = 8;
#else
inline constexpr int kRunsTileRows = 8;
#endif
// Rearranged activations on the stack: up to 16384 elements (larger inputs
// take the dense matvec per run).
inline constexpr int64_t kRunsMaxQuads = 128;

// Walks the run list's bytes ahead of the computation, issuing one prefetch
// per cache line: to L1 for runs that are computed, to L2 for the others.
class RunPrefetcher {
 public:
  RunPrefetcher(const RowRun* runs, int64_t n_runs) : runs_(runs), n_runs_(n_runs) {}

  // Counts the first `bytes` of the list as prefetched (by an earlier call).
  void SkipTo(uint64_t bytes) { Walk<false>(bytes); }
  // Prefetches until `target` bytes of the list (from its start) are covered.
  [[gnu::always_inline]] inline void AdvanceTo(uint64_t target) { Walk<true>(target); }
  uint64_t pos() const { return pos_; }

 private:
  template <bool kIssue>
  [[gnu::always_inline]] inline void Walk(uint64_t target) {
    while (pos_ < target && run_ < n_runs_) {
      const RowRun& r = runs_[run_];
      const uint64_t take = std::min(r.bytes - off_, target - pos_);
      const uintptr_t first = reinterpret_cast<uintptr_t>(r.w + off_) & ~uintptr_t{kLine - 1};
      const uintptr_t last = reinterpret_cast<uintptr_t>(r.w + off_ + take - 1);
      if (!kIssue) {
        // counted only
      } else if (r.y != nullptr) {
        for (uintptr_t a = first; a <= last; a += kLine) {
          _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
        }
      } else {
        for (uintptr_t a = first; a <= last; a += kLine) {
          _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T1);
        }
      }
      pos_ += take;
      off_ += take;
      if (off_ == r.bytes) {
        ++run_;
        off_ = 0;
      }
    }
  }

  static constexpr uintptr_t kLine = 64;
  const RowRun* runs_;
  int64_t n_runs_;
  int64_t run_ = 0;
  uint64_t off_ = 0;  // bytes of runs_[run_] already prefetched
  uint64_t pos_ = 0;  // bytes of the list already prefetched
};

template <class W, bool kVnni>
struct RowRunsKernel {
  // R rows from w (row_bytes apart) into y: nq prepared quads, then pairs
  // and a lone last block from the raw activations.
  template <int R>
  [[gnu::always_inline]] static inline void Tile(const uint8_t* w, size_t row_bytes, int64_t nq,
                                                 int64_t nb, const ActQuad* prep,
                                                 const uint8_t* act, float* y) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    if constexpr (W::kHasQuad) {
      for (int64_t q = 0; q < nq; ++q, b += 4) {
        const ActQuad* x = prep + q;
        for (int r = 0; r < R; ++r) {
          const WideQuad wq = W::LoadQuad(w + r * row_bytes + b * W::kBlockBytes);
          __m512i sum = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) sum = Dot16<kVnni>(sum, wq.q[k], x->q[k]);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wq.d, x->d), acc[r]);
          if constexpr (W::kHasMin) acc[r] = _mm512_fmadd_ps(wq.m, x->s, acc[r]);
        }
      }
    }
    for (; b + 2 <= nb; b += 2) PairStep<true, R>(w, row_bytes, b, act, acc);
    if (b < nb) PairStep<false, R>(w, row_bytes, b, act, acc);
    for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
  }

  template <bool kTwo, int R>
  [[gnu::always_inline]] static inline void PairStep(const uint8_t* w, size_t row_bytes, int64_t b,
                                                     const uint8_t* act, __m512 (&acc)[R]) {
    const ActPair x = LoadActPair<kTwo>(act + b * sizeof(BlockQ16A));
    for (int r = 0; r < R; ++r) {
      const WidePair wp = W::template LoadPair<kTwo>(w + r * row_bytes + b * W::kBlockBytes);
      const __m512i sum =
          Dot16<kVnni>(Dot16<kVnni>(_mm512_setzero_si512(), wp.lo, x.lo), wp.hi, x.hi);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wp.d, x.d), acc[r]);
      if constexpr (W::kHasMin) acc[r] = _mm512_fmadd_ps(wp.m, x.s, acc[r]);
    }
  }

  // The last rows of a run (fewer than kRunsTileRows).
  static void TileTail(int rows, const uint8_t* w, size_t row_bytes, int64_t nq, int64_t nb,
                       const ActQuad* prep, const uint8_t* act, float* y) {
    if constexpr (kRunsTileRows > 4) {
      if (rows >= 4) {
        Tile<4>(w, row_bytes, nq, nb, prep, act, y);
        w += 4 * row_bytes;
        y += 4;
        rows -= 4;
      }
    }
    if (rows >= 2) {
      Tile<2>(w, row_bytes, nq, nb, prep, act, y);
      w += 2 * row_bytes;
      y += 2;
      rows -= 2;
    }
    if (rows >= 1) Tile<1>(w, row_bytes, nq, nb, prep, act, y);
  }

  static uint64_t MatvecRuns(const RowRun* runs, int64_t n_runs, int64_t n_ahead,
                             size_t row_bytes, int64_t n, const void* act_v, uint64_t prefetched) {
    if (n_runs <= 0) return prefetched;
    const auto* act = static_cast<const uint8_t*>(act_v);
    const int64_t nb = n / kQK;
    const int64_t nq = W::kHasQuad ? nb / 4 : 0;
    if (nq > kRunsMaxQuads) {  // beyond the stack scratch: the dense kernel per run
      for (int64_t i = 0; i < n_runs; ++i) {
        if (runs[i].y == nullptr) continue;
        Q16AEntry<W, kVnni>::Matvec(runs[i].w, row_bytes, n,
                                    static_cast<int64_t>(runs[i].bytes / row_bytes), act_v,
                                    runs[i].y);
      }
      return 0;
    }
    alignas(64) ActQuad prep[W::kHasQuad ? kRunsMaxQuads : 1];
    for (int64_t q = 0; q < nq; ++q) prep[q] = LoadActQuad(act + 4 * q * sizeof(BlockQ16A));

    RunPrefetcher pf(runs, n_runs + n_ahead);
    uint64_t pos = 0;  // bytes of the list consumed
    pf.SkipTo(prefetched);
    pf.AdvanceTo(kRunsPrefetchBytes);
    const uint64_t tile_bytes = kRunsTileRows * row_bytes;
    for (int64_t i = 0; i < n_runs; ++i) {
      const RowRun& run = runs[i];
      if (run.y == nullptr) {
        pos += run.bytes;
        continue;
      }
      const uint8_t* w = run.w;
      float* y = run.y;
      int64_t rows = static_cast<int64_t>(run.bytes / row_bytes);
      for (; rows >= kRunsTileRows; rows -= kRunsTileRows) {
        pos += tile_bytes;
        pf.AdvanceTo(pos + kRunsPrefetchBytes);
        Tile<kRunsTileRows>(w, row_bytes, nq, nb, prep, act, y);
        w += tile_bytes;
        y += kRunsTileRows;
      }
      if (rows > 0) {
        pos += static_cast<uint64_t>(rows) * row_bytes;
        pf.AdvanceTo(pos + kRunsPrefetchBytes);
        TileTail(static_cast<int>(rows), w, row_bytes, nq, nb, prep, act, y);
      }
    }
    pf.AdvanceTo(pos + kRunsPrefetchBytes);  // trailing prefetch-only runs moved pos
    return pf.pos() > pos ? pf.pos() - pos : 0;
  }
};

}  // namespace kx::cpu::avx512
