// AVX-512 attention kernels (kernels.h AttnKernels): 16 lanes, masked tails.
//
// Scores: 16 keys at a time are widened once into a float block in L1, then each query head
// runs 16 dot products against it and one transposed reduction turns the 16 accumulators
// into the 16 scores (about 3 instructions a score, where a horizontal sum per score takes
// 8). Values: each row is widened once and added into the accumulators of every head of the
// group, which stay in registers across the rows.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"

namespace kx::cpu::avx512 {
namespace {

constexpr int kLanes = 16;
constexpr int kBlockRows = 16;

constexpr int64_t kPrefetchRows = 32;

// Every cache line of n F16 elements from p, towards L2 (T1): into L1 (T0) the 1-thread pass
// over a 94 MB cache (bench_attention, SmolLM2's shape at depth 4096) took 8.6 ms against
// 7.9-8.1 with T1, at any distance from 4 to 16 KiB; without software prefetch 10.7.
inline void PrefetchRow(const uint16_t* p, int64_t n) {
  const auto* b = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < n * 2; off += 64) _mm_prefetch(b + off, _MM_HINT_T1);
}

__mmask16 TailMask(int64_t left) {
  return left >= kLanes ? static_cast<__mmask16>(0xffff)
         : left <= 0    ? static_cast<__mmask16>(0)
                        : static_cast<__mmask16>((1u << left) - 1);
}

// Sums of 16 accumulators, one per lane: lane r = Σ lanes of a[r]. Four halving steps
// leave lane 4c+i holding input 4i+c, so the inputs go in transposed.
__m512 TransposedSum16(const __m512* a) {
  __m512 in[16];
  for (int p = 0; p < 16; ++p) in[p] = a[(p % 4) * 4 + p / 4];
  __m512 u[8], w[4], y[2];
  for (int k = 0; k < 8; ++k) {
    u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(in[2 * k], in[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(in[2 * k], in[2 * k + 1], 0xEE));
  }
  for (int k = 0; k < 4; ++k) {
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0xDD));
  }
  for (int k = 0; k < 2; ++k) {
    y[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0x44),
                         _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0xEE));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
}

void DotF16(const uint16_t* rows, size_t stride, int64_t n_rows, const float* qs, int n_q,
            int64_t n, float* dst, int64_t dst_stride) {
  const int64_t chunks = (n + kLanes - 1) / kLanes;
  // The 16 keys, widened, packed chunk-major: vector c of row r at (c·16 + r)·16, so the FMAs
  // of one chunk address the 16 rows at constant offsets from one pointer (row-major with a
  // run-time row length cost two integer ops per FMA). Packed: a row stride of 2 KiB would
  // put them in two L1 sets.
  alignas(64) float block[kBlockRows * kAttnMaxHeadDim];
  for (int64_t t0 = 0; t0 < n_rows; t0 += kBlockRows) {
    const int rows_here = static_cast<int>(std::min<int64_t>(kBlockRows, n_rows - t0));
    // Ask for the block kPrefetchRows ahead, past the end of these rows too: a decode thread
    // takes a head's chunks in order (forward.cc RunAttentionPart), so the rows after a
    // chunk are usually its next one, and a prefetch never faults.
    for (int64_t t = t0 + kPrefetchRows; t < t0 + kPrefetchRows + kBlockRows; ++t) {
      PrefetchRow(rows + t * stride, n);
    }
    if (rows_here == kBlockRows && n % kLanes == 0) {
      // Whole rows of whole vectors (every model's head_dim): plain loads, which fold into
      // the conversion, where a masked one costs a mask move and a blend uop on the ports the
      // FMAs need.
      for (int r = 0; r < kBlockRows; ++r) {
        const uint16_t* src = rows + (t0 + r) * stride;
        for (int64_t c = 0; c < chunks; ++c) {
          _mm512_store_ps(&block[(c * kBlockRows + r) * kLanes],
                          _mm512_cvtph_ps(_mm256_loadu_si256(
                              reinterpret_cast<const __m256i*>(src + c * kLanes))));
        }
      }
    } else {
      for (int r = 0; r < kBlockRows; ++r) {
        for (int64_t c = 0; c < chunks; ++c) {
          const __mmask16 m = r < rows_here ? TailMask(n - c * kLanes) : 0;
          const uint16_t* src = rows + (t0 + r) * stride + c * kLanes;
          _mm512_store_ps(&block[(c * kBlockRows + r) * kLanes],
                          _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src)));
        }
      }
    }
    for (int j = 0; j < n_q; ++j) {
      const float* q = qs + j * n;
      __m512 acc[kBlockRows];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t c = 0; c < chunks; ++c) {
        const __m512 qv = _mm512_maskz_loadu_ps(TailMask(n - c * kLanes), q + c * kLanes);
        const float* bc = &block[c * kBlockRows * kLanes];
        for (int r = 0; r < kBlockRows; ++r) {
          acc[r] = _mm512_fmadd_ps(_mm512_load_ps(bc + r * kLanes), qv, acc[r]);
        }
      }
      _mm512_mask_storeu_ps(dst + j * dst_stride + t0, TailMask(rows_here), TransposedSum16(acc));
    }
  }
}

// dot_f16_blocked: the keys of a block in the 16 lanes. DotF16 sums key t as lane partials
// P_i = Σ_c K_t[16c + i]·q[16c + i] (one FMA chain per lane i over the chunks c), then
// TransposedSum16's tree over the lanes: Sum(0, 1) with Sum(b, s) = Sum(b, 2s) + Sum(b + s, 2s)
// down to the single lanes (((P0 + P8) + (P4 + P12)) + ...). Here P_i is a vector over 16 keys
// (row i, c of the block: one load and widening, no copy) and the same tree is vertical adds,
// so every key gets DotF16's bits.
template <int J>
struct HeadSums {
  __m512 v[J];
};

template <int J, int I>
inline HeadSums<J> BlockLeaf(const uint16_t* kb, const float* q, int64_t n) {
  HeadSums<J> p;
  for (int j = 0; j < J; ++j) p.v[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < n / kLanes; ++c) {
    const int64_t d = c * kLanes + I;
    const __m512 k = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb + d * kAttnKeyBlock)));
    for (int j = 0; j < J; ++j) p.v[j] = _mm512_fmadd_ps(k, _mm512_set1_ps(q[j * n + d]), p.v[j]);
  }
  return p;
}

template <int J, int B, int S>
inline HeadSums<J> BlockTree(const uint16_t* kb, const float* q, int64_t n) {
  if constexpr (S == kLanes) {
    return BlockLeaf<J, B>(kb, q, n);
  } else {
    HeadSums<J> a = BlockTree<J, B, 2 * S>(kb, q, n);
    const HeadSums<J> b = BlockTree<J, B + S, 2 * S>(kb, q, n);
    for (int j = 0; j < J; ++j) a.v[j] = _mm512_add_ps(a.v[j], b.v[j]);
    return a;
  }
}

// Heads [0, J) of q for keys [key0, key0 + n_keys).
template <int J>
void DotBlockedHeads(const uint16_t* blocks, int64_t key0, int64_t n_keys, const float* q,
                     int64_t n, float* dst, int64_t dst_stride) {
  const int64_t block_elems = kAttnKeyBlock * n, end = key0 + n_keys;
  // About as far ahead as DotF16's kPrefetchRows rows of 64 dimensions.
  const int64_t ahead = std::max<int64_t>(2048, block_elems);
  for (int64_t b = key0 / kAttnKeyBlock; b * kAttnKeyBlock < end; ++b) {
    const uint16_t* kb = blocks + b * block_elems;
    const auto* pf = reinterpret_cast<const char*>(kb + ahead);
    for (int64_t off = 0; off < block_elems * 2; off += 64)
      _mm_prefetch(pf + off, _MM_HINT_T1);  // as PrefetchRow
    const HeadSums<J> s = BlockTree<J, 0, 1>(kb, q, n);
    const int64_t t0 = b * kAttnKeyBlock;
    if (t0 >= key0 && t0 + kAttnKeyBlock <= end) {
      for (int j = 0; j < J; ++j) _mm512_storeu_ps(dst + j * dst_stride + (t0 - key0), s.v[j]);
    } else {  // a first or last block that is not all keys of the run: its keys, packed
      const int lo = static_cast<int>(std::max(key0, t0) - t0);
      const int hi = static_cast<int>(std::min(end, t0 + kAttnKeyBlock) - t0);
      const auto m = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
      for (int j = 0; j < J; ++j) {
        _mm512_mask_compressstoreu_ps(dst + j * dst_stride + (t0 + lo - key0), m, s.v[j]);
      }
    }
  }
}

void DotF16Blocked(const uint16_t* blocks, int64_t key0, int64_t n_keys, const float* qs, int n_q,
                   int64_t n, float* dst, int64_t dst_stride) {
  constexpr int kMaxJ = 4;  // 4 heads · (4 pending sums + a leaf) + a key and a broadcast
  for (int j0 = 0; j0 < n_q; j0 += kMaxJ) {
    const float* q = qs + j0 * n;
    float* d = dst + j0 * dst_stride;
    switch (std::min(kMaxJ, n_q - j0)) {
      case 1:
        DotBlockedHeads<1>(blocks, key0, n_keys, q, n, d, dst_stride);
        break;
      case 2:
        DotBlockedHeads<2>(blocks, key0, n_keys, q, n, d, dst_stride);
        break;
      case 3:
        DotBlockedHeads<3>(blocks, key0, n_keys, q, n, d, dst_stride);
        break;
      default:
        DotBlockedHeads<4>(blocks, key0, n_keys, q, n, d, dst_stride);
        break;
    }
  }
}

// Heads [j0, j0 + J) over the 64 columns from i0: J·4 accumulators in registers. kWhole: all
// 64 columns exist, so the rows take plain loads (as DotF16's).
template <int J, bool kWhole>
void AxpyHeads(const float* p, int64_t p_stride, const uint16_t* rows, size_t stride,
               int64_t n_rows, int64_t n, int64_t i0, float* ys, int64_t y_stride) {
  constexpr int kC = 4;
  __mmask16 m[kC];
  for (int c = 0; c < kC; ++c) m[c] = TailMask(n - i0 - c * kLanes);
  __m512 acc[J][kC];
  for (int j = 0; j < J; ++j) {
    for (int c = 0; c < kC; ++c)
      acc[j][c] = _mm512_maskz_loadu_ps(m[c], ys + j * y_stride + i0 + c * kLanes);
  }
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint16_t* v = rows + t * stride + i0;
    PrefetchRow(v + kPrefetchRows * stride, std::min<int64_t>(n - i0, 4 * kLanes));
    __m512 vc[kC];
    for (int c = 0; c < kC; ++c) {
      vc[c] = kWhole ? _mm512_cvtph_ps(
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c * kLanes)))
                     : _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[c], v + c * kLanes));
    }
    for (int j = 0; j < J; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j * p_stride + t]);
      for (int c = 0; c < kC; ++c) acc[j][c] = _mm512_fmadd_ps(pj, vc[c], acc[j][c]);
    }
  }
  for (int j = 0; j < J; ++j) {
    for (int c = 0; c < kC; ++c)
      _mm512_mask_storeu_ps(ys + j * y_stride + i0 + c * kLanes, m[c], acc[j][c]);
  }
}

// AxpyHeads<J> for J in [1, 6].
template <bool kWhole>
void AxpyGroup(int J, const float* p, int64_t p_stride, const uint16_t* rows, size_t stride,
               int64_t n_rows, int64_t n, int64_t i0, float* ys, int64_t y_stride) {
  switch (J) {
    case 1:
      return AxpyHeads<1, kWhole>(p, p_stride, rows, stride, n_rows, n, i0, ys, y_stride);
    case 2:
      return AxpyHeads<2, kWhole>(p, p_stride, rows, stride, n_rows, n, i0, ys, y_stride);
    case 3:
      return AxpyHeads<3, kWhole>(p, p_stride, rows, stride, n_rows, n, i0, ys, y_stride);
    case 4:
      return AxpyHeads<4, kWhole>(p, p_stride, rows, stride, n_rows, n, i0, ys, y_stride);
    case 5:
      return AxpyHeads<5, kWhole>(p, p_stride, rows, stride, n_rows, n, i0, ys, y_stride);
    default:
      return AxpyHeads<6, kWhole>(p, p_stride, rows, stride, n_rows, n, i0, ys, y_stride);
  }
}

void AxpyF16(const float* p, int64_t p_stride, const uint16_t* rows, size_t stride, int64_t n_rows,
             int n_y, int64_t n, float* ys, int64_t y_stride) {
  constexpr int kMaxJ = 6;  // 24 accumulators + 4 widened rows + a broadcast
  for (int64_t i0 = 0; i0 < n; i0 += 4 * kLanes) {
    for (int j0 = 0; j0 < n_y; j0 += kMaxJ) {
      const float* pj = p + j0 * p_stride;
      float* yj = ys + j0 * y_stride;
      if (n - i0 >= 4 * kLanes) {
        AxpyGroup<true>(std::min(kMaxJ, n_y - j0), pj, p_stride, rows, stride, n_rows, n, i0, yj,
                        y_stride);
      } else {
        AxpyGroup<false>(std::min(kMaxJ, n_y - j0), pj, p_stride, rows, stride, n_rows, n, i0, yj,
                         y_stride);
      }
    }
  }
}

// e^x for x ≤ 88.7 (the scores after the max is subtracted are ≤ 0): x = k·ln2 + r with
// |r| ≤ ln2/2 (ln2 in two parts, so r is exact to float), e^r by its degree-7 Taylor
// polynomial (truncation < 6e-9 relative), 2^k applied by vscalefps, which also gives 0 for
// the arguments below −104 that are clamped there.
__m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 e = _mm512_set1_ps(1.0f / 5040.0f);
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 720.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 120.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 24.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 6.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, k);
}

float ExpShifted(float* x, int64_t n, float scale, float* max) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 vm = _mm512_set1_ps(-INFINITY);
  for (int64_t t = 0; t < n; t += kLanes) {
    const __mmask16 m = TailMask(n - t);
    const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + t), vs);
    _mm512_mask_storeu_ps(x + t, m, s);
    vm = _mm512_mask_max_ps(vm, m, vm, s);
  }
  const float mx = _mm512_reduce_max_ps(vm);
  vm = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; t += kLanes) {
    const __mmask16 m = TailMask(n - t);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + t), vm));
    _mm512_mask_storeu_ps(x + t, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  *max = mx;
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

const AttnKernels kAttn = {&DotF16, &AxpyF16, &DotF16Blocked, &ExpShifted};

}  // namespace kx::cpu::avx512
