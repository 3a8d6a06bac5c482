// AVX2+FMA+F16C attention kernels (kernels.h AttnKernels): 8 lanes.
//
// As the AVX-512 ones (avx512/attention.cc): 8 keys at a time are widened once into a float
// block in L1, each query head runs 8 dot products against it and one transposed reduction
// (vhaddps) gives the 8 scores; each value row is widened once for every head of the group.
// Head dims that are not a multiple of 8 take a zero-padded copy (scores) or scalar columns
// (values).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/avx2/simd.h"

namespace kx::cpu::avx2 {
namespace {

constexpr int kLanes = 8;
constexpr int kBlockRows = 8;

// Software prefetch distance in rows, as in avx512/attention.cc: past the end of the rows too
// (a decode thread takes a head's chunks in order, so the rows after a chunk are usually its
// next one; a prefetch never faults).
constexpr int64_t kPrefetchRows = 32;

// Every cache line of n F16 elements from p.
inline void PrefetchRow(const uint16_t* p, int64_t n) {
  const auto* b = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < n * 2; off += 64) _mm_prefetch(b + off, _MM_HINT_T0);
}

__m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Lane r = Σ lanes of a[r], r < 8.
__m256 TransposedSum8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

void DotF16(const uint16_t* rows, size_t stride, int64_t n_rows, const float* qs, int n_q,
            int64_t n, float* dst, int64_t dst_stride) {
  const int64_t full = n / kLanes, width = (n + kLanes - 1) / kLanes * kLanes;
  // The 8 keys, widened, packed chunk-major: vector c of row r at (c·8 + r)·8, so the FMAs of
  // one chunk address the 8 rows at constant offsets from one pointer.
  alignas(32) float block[kBlockRows * kAttnMaxHeadDim];
  alignas(32) float q_pad[kAttnMaxHeadDim];  // a query whose n is not 8·k
  alignas(32) float sums[kBlockRows];
  for (int64_t t0 = 0; t0 < n_rows; t0 += kBlockRows) {
    const int rows_here = static_cast<int>(std::min<int64_t>(kBlockRows, n_rows - t0));
    for (int64_t t = t0 + kPrefetchRows; t < t0 + kPrefetchRows + kBlockRows; ++t) {
      PrefetchRow(rows + t * stride, n);
    }
    for (int r = 0; r < kBlockRows; ++r) {
      float* b = &block[r * kLanes];  // chunk c at b + c·kBlockRows·kLanes
      if (r >= rows_here) {
        for (int64_t i = 0; i < width; i += kLanes)
          _mm256_store_ps(b + i * kBlockRows, _mm256_setzero_ps());
        continue;
      }
      const uint16_t* src = rows + (t0 + r) * stride;
      for (int64_t c = 0; c < full; ++c)
        _mm256_store_ps(b + c * kBlockRows * kLanes, LoadHalf8(src + c * kLanes));
      for (int64_t i = full * kLanes; i < width; ++i) {
        b[full * kBlockRows * kLanes + (i - full * kLanes)] = i < n ? HalfToFloat(src[i]) : 0.0f;
      }
    }
    for (int j = 0; j < n_q; ++j) {
      const float* q = qs + j * n;
      if (width != n) {
        std::memcpy(q_pad, q, sizeof(float) * n);
        std::memset(q_pad + n, 0, sizeof(float) * (width - n));
        q = q_pad;
      }
      __m256 acc[kBlockRows];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int64_t i = 0; i < width; i += kLanes) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        const float* bc = &block[i * kBlockRows];
        for (int r = 0; r < kBlockRows; ++r) {
          acc[r] = _mm256_fmadd_ps(_mm256_load_ps(bc + r * kLanes), qv, acc[r]);
        }
      }
      _mm256_store_ps(sums, TransposedSum8(acc));
      std::memcpy(dst + j * dst_stride + t0, sums, sizeof(float) * rows_here);
    }
  }
}

// dot_f16_blocked: a 16-key block as two halves of 8 keys in the lanes. DotF16 sums key t as
// lane partials P_i = Σ_c K_t[8c + i]·q[8c + i] (an FMA chain per lane i over the chunks c),
// then TransposedSum8's ((P0 + P1) + (P2 + P3)) + ((P4 + P5) + (P6 + P7)). Here P_i is a vector
// over 8 keys and the tree is vertical adds: DotF16's bits, without the widened copy or vhaddps.
template <int J>
struct HeadSums {
  __m256 v[J];
};

template <int J, int I>
inline HeadSums<J> HalfLeaf(const uint16_t* kh, const float* q, int64_t n) {
  HeadSums<J> p;
  for (int j = 0; j < J; ++j) p.v[j] = _mm256_setzero_ps();
  for (int64_t c = 0; c < n / kLanes; ++c) {
    const int64_t d = c * kLanes + I;
    const __m256 k = LoadHalf8(kh + d * kAttnKeyBlock);
    for (int j = 0; j < J; ++j) {
      p.v[j] = _mm256_fmadd_ps(k, _mm256_broadcast_ss(&q[j * n + d]), p.v[j]);
    }
  }
  return p;
}

template <int J, int B, int W>  // the lanes [B, B + W) of TransposedSum8's tree
inline HeadSums<J> HalfTree(const uint16_t* kh, const float* q, int64_t n) {
  if constexpr (W == 1) {
    return HalfLeaf<J, B>(kh, q, n);
  } else {
    HeadSums<J> a = HalfTree<J, B, W / 2>(kh, q, n);
    const HeadSums<J> b = HalfTree<J, B + W / 2, W / 2>(kh, q, n);
    for (int j = 0; j < J; ++j) a.v[j] = _mm256_add_ps(a.v[j], b.v[j]);
    return a;
  }
}

template <int J>
void DotBlockedHeads(const uint16_t* blocks, int64_t key0, int64_t n_keys, const float* q,
                     int64_t n, float* dst, int64_t dst_stride) {
  const int64_t block_elems = kAttnKeyBlock * n, end = key0 + n_keys;
  const int64_t ahead = std::max<int64_t>(2048, block_elems);  // as DotF16's kPrefetchRows
  for (int64_t b = key0 / kAttnKeyBlock; b * kAttnKeyBlock < end; ++b) {
    const uint16_t* kb = blocks + b * block_elems;
    const auto* pf = reinterpret_cast<const char*>(kb + ahead);
    for (int64_t off = 0; off < block_elems * 2; off += 64) _mm_prefetch(pf + off, _MM_HINT_T0);
    for (int h = 0; h < 2; ++h) {
      const int64_t t0 = b * kAttnKeyBlock + h * kLanes;
      if (t0 + kLanes <= key0 || t0 >= end) continue;
      const HeadSums<J> s = HalfTree<J, 0, kLanes>(kb + h * kLanes, q, n);
      if (t0 >= key0 && t0 + kLanes <= end) {
        for (int j = 0; j < J; ++j) _mm256_storeu_ps(dst + j * dst_stride + (t0 - key0), s.v[j]);
        continue;
      }
      // A half the run starts or ends in: its keys only.
      const int64_t lo = std::max(key0, t0), hi = std::min(end, t0 + kLanes);
      alignas(32) float sums[kLanes];
      for (int j = 0; j < J; ++j) {
        _mm256_store_ps(sums, s.v[j]);
        std::memcpy(dst + j * dst_stride + (lo - key0), sums + (lo - t0),
                    sizeof(float) * static_cast<size_t>(hi - lo));
      }
    }
  }
}

void DotF16Blocked(const uint16_t* blocks, int64_t key0, int64_t n_keys, const float* qs, int n_q,
                   int64_t n, float* dst, int64_t dst_stride) {
  constexpr int kMaxJ = 3;  // 3 heads · (3 pending sums + a leaf) + a key and a broadcast: 14
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
      default:
        DotBlockedHeads<3>(blocks, key0, n_keys, q, n, d, dst_stride);
        break;
    }
  }
}

// Heads [j0, j0 + J) over the 16 columns from i0: J·2 accumulators in registers.
template <int J>
void AxpyHeads(const float* p, int64_t p_stride, const uint16_t* rows, size_t stride,
               int64_t n_rows, int64_t n, int64_t i0, float* ys, int64_t y_stride) {
  __m256 acc[J][2];
  for (int j = 0; j < J; ++j) {
    for (int c = 0; c < 2; ++c) acc[j][c] = _mm256_loadu_ps(ys + j * y_stride + i0 + c * kLanes);
  }
  for (int64_t t = 0; t < n_rows; ++t) {
    const uint16_t* v = rows + t * stride + i0;
    // Its first pass over the columns brings the rows in; the later ones find them in L1.
    if (i0 == 0) PrefetchRow(v + kPrefetchRows * stride, n);
    const __m256 v0 = LoadHalf8(v), v1 = LoadHalf8(v + kLanes);
    for (int j = 0; j < J; ++j) {
      const __m256 pj = _mm256_broadcast_ss(&p[j * p_stride + t]);
      acc[j][0] = _mm256_fmadd_ps(pj, v0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(pj, v1, acc[j][1]);
    }
  }
  for (int j = 0; j < J; ++j) {
    for (int c = 0; c < 2; ++c) _mm256_storeu_ps(ys + j * y_stride + i0 + c * kLanes, acc[j][c]);
  }
}

void AxpyF16(const float* p, int64_t p_stride, const uint16_t* rows, size_t stride, int64_t n_rows,
             int n_y, int64_t n, float* ys, int64_t y_stride) {
  constexpr int kMaxJ = 4;  // 8 accumulators + 2 widened rows + a broadcast of 16 registers
  const int64_t cols = n / (2 * kLanes) * (2 * kLanes);
  for (int64_t i0 = 0; i0 < cols; i0 += 2 * kLanes) {
    for (int j0 = 0; j0 < n_y; j0 += kMaxJ) {
      const float* pj = p + j0 * p_stride;
      float* yj = ys + j0 * y_stride;
      switch (std::min(kMaxJ, n_y - j0)) {
        case 1:
          AxpyHeads<1>(pj, p_stride, rows, stride, n_rows, n, i0, yj, y_stride);
          break;
        case 2:
          AxpyHeads<2>(pj, p_stride, rows, stride, n_rows, n, i0, yj, y_stride);
          break;
        case 3:
          AxpyHeads<3>(pj, p_stride, rows, stride, n_rows, n, i0, yj, y_stride);
          break;
        default:
          AxpyHeads<4>(pj, p_stride, rows, stride, n_rows, n, i0, yj, y_stride);
          break;
      }
    }
  }
  for (int j = 0; j < n_y && cols < n; ++j) {  // the last n mod 16 columns
    for (int64_t t = 0; t < n_rows; ++t) {
      const float c = p[j * p_stride + t];
      for (int64_t i = cols; i < n; ++i)
        ys[j * y_stride + i] += c * HalfToFloat(rows[t * stride + i]);
    }
  }
}

// e^x as the AVX-512 kernel computes it (degree-7 Taylor on |r| ≤ ln2/2), with 2^k built in
// the exponent bits: x is clamped to [−87, 88] so k stays a normal exponent (e^−87 ≈ 1.6e−38
// is as good as 0 beside the softmax's largest term, which is 1).
__m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 e = _mm256_set1_ps(1.0f / 5040.0f);
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 720.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 120.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 24.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 6.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
}

__m256i TailMask(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(left, kLanes))),
                            idx);
}

float ExpShifted(float* x, int64_t n, float scale, float* max) {
  const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
  __m256 vm = ninf;
  for (int64_t t = 0; t < n; t += kLanes) {
    const __m256i m = TailMask(n - t);
    const __m256 s = _mm256_mul_ps(_mm256_maskload_ps(x + t, m), vs);
    _mm256_maskstore_ps(x + t, m, s);
    vm = _mm256_max_ps(vm, _mm256_blendv_ps(ninf, s, _mm256_castsi256_ps(m)));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float mx = _mm_cvtss_f32(m4);
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t t = 0; t < n; t += kLanes) {
    const __m256i m = TailMask(n - t);
    const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + t, m), vmx)),
                                   _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + t, m, e);
    sum = _mm256_add_ps(sum, e);
  }
  *max = mx;
  return HSum(sum);
}

}  // namespace

const AttnKernels kAttn = {&DotF16, &AxpyF16, &DotF16Blocked, &ExpShifted};

}  // namespace kx::cpu::avx2
