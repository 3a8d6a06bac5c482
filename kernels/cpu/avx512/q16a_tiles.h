// AVX-512 tiles for quantized weights × BlockQ16A activations (int16), shared
// by every weight type: the type supplies decoders that widen groups of
// weight blocks to int16; this file does the dot products, scaling, tiling.
//
// The float work per block (int32 → float, scale, accumulate) and the
// shuffles compete with vpdpwssd for the vector pipes (the loops are
// compute-bound on Zen 5 at ~35-45 GB/s per core), so the kernels put several
// blocks' partial sums into one vector of int32 lanes and scale them all with
// one FMA:
//  - quad layout (types that provide LoadQuad): blocks b..b+3 as four int16
//    vectors Wk = [elements 8k..8k+7 of block b, b+1, b+2, b+3] (k = 0..3);
//    Σ_k vpdpwssd(Wk, Xk) leaves block b+i's partial sums in int32 lanes
//    4i..4i+3. The activations are rearranged to match (a 4×4 transpose of
//    128-bit chunks, 8 vshufi64x2), once per matvec call or matmul panel
//    into stack scratch (Q16AEntry), or per step when n is too large for it.
//  - pair layout (every type; and the last 1-3 blocks): blocks b, b+1 as
//    lo = [b elements 0-15 | b+1 elements 0-15], hi = [.. 16-31 | .. 16-31],
//    partial sums in lanes 0-7 (b) and 8-15 (b+1).
// Per group: acc += float(Σ) · (d_w·d_x) [+ m · s/L for types with a min,
// L = lanes per block (4 or 8), so m·s is whole after the final horizontal
// sum; s/L is exact: a power of two].
// Range: a lane sums ≤ 8 products |w|·|x| ≤ 128·32767, < 2^25: no overflow;
// vpmaddwd's one overflow case ((-32768)² twice) needs x = -32768, which the
// quantizer never emits.
#pragma once

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx512 {

inline constexpr size_t kActQs = offsetof(BlockQ16A, qs);

// Weights of a pair (or a lone last block) in the pair layout; d (and m for
// types with a min) spread as [block b × 8 lanes | block b+1 × 8 lanes].
struct WidePair {
  __m512i lo, hi;
  __m512 d, m;
};

// Weights of four blocks in the quad layout; d, m as [b × 4 | b+1 × 4 | ...].
struct WideQuad {
  __m512i q[4];
  __m512 d, m;
};

// Activations of one column for a pair / a quad of blocks, matching layouts.
struct ActPair {
  __m512i lo, hi;
  __m512 d, s;  // d_x, and s/8 per lane
};
struct ActQuad {
  __m512i q[4];
  __m512 d, s;  // d_x, and s/4 per lane
};

// [v0 × 4, v2 × 4, v4 × 4, v6 × 4] (first = 0) or [v1 × 4, v3 × 4, ...] (first
// = 1) from 8 floats [d0, m0, d1, m1, d2, m2, d3, m3].
inline __m512i IdxQuad(int first) {
  const int a = first, b = first + 2, c = first + 4, d = first + 6;
  return _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d);
}

template <bool kTwo>
inline ActPair LoadActPair(const uint8_t* a) {
  ActPair x;
  const __m512i x0 = _mm512_loadu_si512(a + kActQs);
  __m128 ds;
  if constexpr (kTwo) {
    const uint8_t* a1 = a + sizeof(BlockQ16A);
    const __m512i x1 = _mm512_loadu_si512(a1 + kActQs);
    x.lo = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(1, 0, 1, 0));
    x.hi = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 2, 3, 2));
    ds = LoadTwoPairsF32(a, a1);
  } else {  // the odd last block: lanes 8-15 stay zero (nothing read past it)
    x.lo = _mm512_zextsi256_si512(_mm512_castsi512_si256(x0));
    x.hi = _mm512_zextsi256_si512(_mm512_extracti64x4_epi64(x0, 1));
    ds = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a)));
  }
  const __m512 dsw = _mm512_castps128_ps512(ds);  // [d0, s0, d1, s1]
  x.d = _mm512_permutexvar_ps(IdxPairHalves(0), dsw);
  x.s = _mm512_mul_ps(_mm512_permutexvar_ps(IdxPairHalves(1), dsw), _mm512_set1_ps(0.125f));
  return x;
}

inline ActQuad LoadActQuad(const uint8_t* a) {
  constexpr size_t kB = sizeof(BlockQ16A);
  const __m512i x0 = _mm512_loadu_si512(a + kActQs);
  const __m512i x1 = _mm512_loadu_si512(a + kB + kActQs);
  const __m512i x2 = _mm512_loadu_si512(a + 2 * kB + kActQs);
  const __m512i x3 = _mm512_loadu_si512(a + 3 * kB + kActQs);
  // 128-bit chunk c of block i is elements 8c..8c+7; Xk = [x0.ck, x1.ck, x2.ck, x3.ck].
  const __m512i p =
      _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));  // x0.c0 x0.c2 x1.c0 x1.c2
  const __m512i q =
      _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));  // x0.c1 x0.c3 x1.c1 x1.c3
  const __m512i r = _mm512_shuffle_i64x2(x2, x3, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i s = _mm512_shuffle_i64x2(x2, x3, _MM_SHUFFLE(3, 1, 3, 1));
  ActQuad x;
  x.q[0] = _mm512_shuffle_i64x2(p, r, _MM_SHUFFLE(2, 0, 2, 0));
  x.q[1] = _mm512_shuffle_i64x2(q, s, _MM_SHUFFLE(2, 0, 2, 0));
  x.q[2] = _mm512_shuffle_i64x2(p, r, _MM_SHUFFLE(3, 1, 3, 1));
  x.q[3] = _mm512_shuffle_i64x2(q, s, _MM_SHUFFLE(3, 1, 3, 1));
  const __m256 ds = _mm256_insertf128_ps(_mm256_castps128_ps256(LoadTwoPairsF32(a, a + kB)),
                                         LoadTwoPairsF32(a + 2 * kB, a + 3 * kB), 1);
  const __m512 dsw = _mm512_castps256_ps512(ds);  // [d0, s0, d1, s1, d2, s2, d3, s3]
  x.d = _mm512_permutexvar_ps(IdxQuad(0), dsw);
  x.s = _mm512_mul_ps(_mm512_permutexvar_ps(IdxQuad(1), dsw), _mm512_set1_ps(0.25f));
  return x;
}

// Σ over pairs of int16 products into 16 int32 lanes.
template <bool kVnni>
inline __m512i Dot16(__m512i acc, __m512i w, __m512i x) {
  if constexpr (kVnni) {
    return _mm512_dpwssd_epi32(acc, w, x);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x));
  }
}

// W: the weight decoder, with
//   static constexpr size_t kBlockBytes; static constexpr bool kHasMin, kHasQuad;
//   template <bool kTwo> static WidePair LoadPair(const uint8_t* p);
//   static WideQuad LoadQuad(const uint8_t* p);  // if kHasQuad
template <class W, bool kVnni>
struct Q16ATiles {
  // Software prefetch: R rows stream at once (R short streams, which the
  // hardware prefetcher follows poorly), and the tile's R rows are one
  // contiguous range; so each row prefetches the same offset kPrefetchTiles
  // tiles ahead (row r + k·R): the next tiles' bytes arrive while this one
  // computes. Past the matrix end this touches nothing (prefetches never
  // fault) and costs a few wasted line fills.
#ifdef KX_Q16A_PREFETCH_TILES  // tuning experiments only
  static constexpr int kPrefetchTiles = KX_Q16A_PREFETCH_TILES;
#else
  static constexpr int kPrefetchTiles = 2;
#endif
  static constexpr int kLine = 64;

  template <int R>
  [[gnu::always_inline]] static inline void Prefetch(const TileArgs& t, const uint8_t* p,
                                                     size_t bytes) {
    const char* f = reinterpret_cast<const char*>(p) + kPrefetchTiles * R * t.row_bytes;
    // Towards L2 (T1), not L1: a T0 prefetch holds one of the few L1 fill buffers for the
    // whole DRAM latency, which capped one thread below the read bandwidth (2026-11-27,
    // kairox-bench tg, 1 thread, alternating: Qwen 1.5B 11.3-12.6 → 12.7-12.8 t/s, Gemma 3
    // 270M +6 %, SmolLM2 +4-8 %).
    for (size_t o = 0; o < bytes; o += kLine) _mm_prefetch(f + o, _MM_HINT_T1);
  }

  // kPrep: the activation quads come rearranged from t.prep (loaded as
  // memory operands, no registers held per column); otherwise they are
  // rearranged here. Same operations in the same order either way, so the
  // results are bit-identical.
  template <bool kPrep, int R, int C>
  [[gnu::always_inline]] static inline void StepQuad(const TileArgs& t, int64_t r0, int64_t c0,
                                                     int64_t b, __m512 (&acc)[R][C]) {
    ActQuad xr[kPrep ? 1 : C];
    if constexpr (!kPrep) {
      for (int c = 0; c < C; ++c) {
        xr[c] = LoadActQuad(t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ16A));
      }
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = t.w + (r0 + r) * t.row_bytes + b * W::kBlockBytes;
      Prefetch<R>(t, p, 4 * W::kBlockBytes);
      const WideQuad w = W::LoadQuad(p);
      for (int c = 0; c < C; ++c) {
        const ActQuad* x =
            kPrep ? reinterpret_cast<const ActQuad*>(t.prep + (c0 + c) * t.prep_stride) + b / 4
                  : &xr[c];
        __m512i sum = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) sum = Dot16<kVnni>(sum, w.q[k], x->q[k]);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.d, x->d), acc[r][c]);
        if constexpr (W::kHasMin) acc[r][c] = _mm512_fmadd_ps(w.m, x->s, acc[r][c]);
      }
    }
  }

  template <bool kTwo, int R, int C>
  [[gnu::always_inline]] static inline void StepPair(const TileArgs& t, int64_t r0, int64_t c0,
                                                     int64_t b, __m512 (&acc)[R][C]) {
    ActPair x[C];
    for (int c = 0; c < C; ++c) {
      x[c] = LoadActPair<kTwo>(t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ16A));
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = t.w + (r0 + r) * t.row_bytes + b * W::kBlockBytes;
      if (kTwo) Prefetch<R>(t, p, 2 * W::kBlockBytes);
      const WidePair w = W::template LoadPair<kTwo>(p);
      for (int c = 0; c < C; ++c) {
        const __m512i sum =
            Dot16<kVnni>(Dot16<kVnni>(_mm512_setzero_si512(), w.lo, x[c].lo), w.hi, x[c].hi);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.d, x[c].d), acc[r][c]);
        if constexpr (W::kHasMin) acc[r][c] = _mm512_fmadd_ps(w.m, x[c].s, acc[r][c]);
      }
    }
  }

  template <int R, int C>
  static void Tile(const TileArgs& args, int64_t r0, int64_t c0) {
    const TileArgs t = args;  // a local copy: no reloads through the reference
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = t.n / kQK;
    int64_t b = 0;
    if constexpr (W::kHasQuad) {
      if (t.prep != nullptr) {
        for (; b + 4 <= nb; b += 4) StepQuad<true, R, C>(t, r0, c0, b, acc);
      } else {
        for (; b + 4 <= nb; b += 4) StepQuad<false, R, C>(t, r0, c0, b, acc);
      }
    }
    for (; b + 2 <= nb; b += 2) StepPair<true, R, C>(t, r0, c0, b, acc);
    if (b < nb) StepPair<false, R, C>(t, r0, c0, b, acc);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
};

// Matvec: kMatvecRows rows share each activation load. Matmul: a rows ×
// columns register tile, so each decoded weight group serves kMatmulCols
// columns. For quad types the activations are rearranged once per call
// (matvec) or per panel of columns (matmul) into kPrepBytes of stack, so the
// inner loop reads them as memory operands: no shuffles and no registers held
// per column, which leaves the registers to the accumulators.
#ifdef KX_Q16A_MATVEC_ROWS  // tuning experiments only
inline constexpr int kMatvecRows = KX_Q16A_MATVEC_ROWS;
#else
inline constexpr int kMatvecRows = 6;
#endif
#ifdef KX_Q16A_MATMUL_ROWS  // tuning experiments only
inline constexpr int kMatmulRows = KX_Q16A_MATMUL_ROWS;
inline constexpr int kMatmulCols = KX_Q16A_MATMUL_COLS;
#else
inline constexpr int kMatmulRows = 6;  // 6 × 4 measured best of 2-8 × 2-8 on Zen 5
inline constexpr int kMatmulCols = 4;
#endif
// Types without quads keep each column's activation pair in registers.
inline constexpr int kMatmulColsPair = 3;
// Stack scratch for rearranged activations: 384 bytes per 128 elements, so
// one column of up to 16384 elements (larger inputs use the unprepared path),
// and 8 columns of 1536 per matmul panel.
inline constexpr size_t kPrepBytes = 48 * 1024;
inline constexpr int64_t kMaxPanelCols = 16;

template <class W, bool kVnni>
struct Q16AEntry {
  using K = Q16ATiles<W, kVnni>;
  static constexpr int kCols = W::kHasQuad ? kMatmulCols : kMatmulColsPair;

  // Rearranges the whole quads of `cols` columns into prep (stride bytes apart).
  static void Prepare(const uint8_t* act, size_t act_stride, int64_t cols, int64_t nq,
                      uint8_t* prep, size_t stride) {
    for (int64_t c = 0; c < cols; ++c) {
      auto* dst = reinterpret_cast<ActQuad*>(prep + c * stride);
      const uint8_t* a = act + c * act_stride;
      for (int64_t q = 0; q < nq; ++q) dst[q] = LoadActQuad(a + 4 * q * sizeof(BlockQ16A));
    }
  }

  static void Matvec(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     float* y) {
    TileArgs a{
        static_cast<const uint8_t*>(w), row_bytes, n, static_cast<const uint8_t*>(act), 0, y, 0};
    const int64_t nq = n / kQK / 4;
    const size_t col_bytes = static_cast<size_t>(nq) * sizeof(ActQuad);
    alignas(64) uint8_t prep[W::kHasQuad ? kPrepBytes : 64];
    if (W::kHasQuad && nq > 0 && col_bytes <= kPrepBytes) {
      Prepare(a.act, 0, 1, nq, prep, col_bytes);
      a.prep = prep;
      a.prep_stride = col_bytes;
    }
    TileDriver<K, kMatvecRows, 1>::Run(a, rows, 1);
  }

  static void Matmul(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                     size_t act_stride, int64_t ncols, float* y, int64_t ldy) {
    const auto* ap = static_cast<const uint8_t*>(act);
    const auto* wp = static_cast<const uint8_t*>(w);
    const int64_t nq = n / kQK / 4;
    const size_t col_bytes = static_cast<size_t>(nq) * sizeof(ActQuad);
    int64_t panel = col_bytes > 0 ? static_cast<int64_t>(kPrepBytes / col_bytes) : 0;
    panel = std::min(panel, kMaxPanelCols);
    if (panel >= kCols) panel -= panel % kCols;  // whole column tiles
    if (!W::kHasQuad || nq == 0 || panel == 0) {
      const TileArgs a{wp, row_bytes, n, ap, act_stride, y, ldy};
      TileDriver<K, kMatmulRows, kCols>::Run(a, rows, ncols);
      return;
    }
    // Column panels outermost: each panel streams the weights once more, but
    // after the first they come from L2 (a matrix is at most a few MB), and
    // the panel's rearranged activations stay in L1.
    alignas(64) uint8_t prep[W::kHasQuad ? kPrepBytes : 64];
    for (int64_t c0 = 0; c0 < ncols; c0 += panel) {
      const int64_t pc = std::min(panel, ncols - c0);
      Prepare(ap + c0 * act_stride, act_stride, pc, nq, prep, col_bytes);
      TileArgs a{wp, row_bytes, n, ap + c0 * act_stride, act_stride, y + c0 * ldy, ldy};
      a.prep = prep;
      a.prep_stride = col_bytes;
      TileDriver<K, kMatmulRows, kCols>::Run(a, rows, pc);
    }
  }
};

}  // namespace kx::cpu::avx512
