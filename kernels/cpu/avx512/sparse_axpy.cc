// AVX-512 axpy_rows (kernels.h) for Q8_0 and Q4_1, the sparse FFN's down
// projection. Rows are walked once each, front to back (a stream the
// prefetcher can follow; the rows sit in scattered bundles, so the next rows
// are also prefetched by hand), kRowsPerStep at a time against a window of y
// that stays in L1. An earlier version kept column chunks in registers and
// re-streamed every row once per chunk: 10% slower on SmolLM2's layer from
// DRAM. Per block and row: acc += (coef·d)·q as two 16-lane FMAs; Q4_1's min
// term coef·m is the same for the block's 32 elements, so it is summed once
// per block and added after the last row.
#include <algorithm>

#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::avx512 {
namespace {

// Rows ahead that are prefetched (the rows are scattered over bundles, which
// the hardware prefetcher does not follow).
constexpr int64_t kPrefetchRows = 16;
constexpr int kLine = 64;

struct Q8_0Dec {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static void Load(const uint8_t* p, __m512* lo, __m512* hi) {
    constexpr size_t kQs = offsetof(BlockQ8_0, qs);
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQs));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQs + kQK / 2));
    *lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a));
    *hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
};

struct Q4_1Dec {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr bool kHasMin = true;
  static void Load(const uint8_t* p, __m512* lo, __m512* hi) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(BlockQ4_1, qs)));
    const __m128i nib = _mm_set1_epi8(0x0f);
    *lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, nib)));
    *hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), nib)));
  }
};

// Per element the rows are added in order r = 0, 1, ... whatever the window
// and step, so the result does not depend on [i0, i1).
constexpr int kRowsPerStep = 4;
constexpr int64_t kWindowBlocks = 64;  // y window: 8 KB

template <class D>
void RowPass(const uint8_t* const* rows, const float* coef, int64_t n_rows, int64_t b0,
             int64_t nb, float* y) {
  float msum[kWindowBlocks] = {};
  float* yb = y + b0 * kQK;
  const size_t off = static_cast<size_t>(b0) * D::kBytes;
  const size_t bytes = static_cast<size_t>(nb) * D::kBytes;
  for (int64_t r = 0; r < n_rows; r += kRowsPerStep) {
    const int n = static_cast<int>(std::min<int64_t>(kRowsPerStep, n_rows - r));
    for (int k = 0; k < n; ++k) {
      if (r + k + kPrefetchRows < n_rows) {
        const char* ahead = reinterpret_cast<const char*>(rows[r + k + kPrefetchRows] + off);
        for (size_t l = 0; l < bytes; l += kLine) _mm_prefetch(ahead + l, _MM_HINT_T0);
      }
    }
    const uint8_t* p[kRowsPerStep];
    __m128 c[kRowsPerStep];
    for (int k = 0; k < kRowsPerStep; ++k) {
      p[k] = rows[r + std::min(k, n - 1)] + off;
      c[k] = _mm_set1_ps(k < n ? coef[r + k] : 0.0f);
    }
    for (int64_t b = 0; b < nb; ++b) {
      __m512 lo_acc = _mm512_loadu_ps(yb + b * kQK);
      __m512 hi_acc = _mm512_loadu_ps(yb + b * kQK + kQK / 2);
      for (int k = 0; k < n; ++k) {
        const uint8_t* blk = p[k] + b * D::kBytes;
        const uint32_t dm = D::kHasMin ? LoadU32(blk) : LoadU16(blk);
        const __m128 cdm = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm))), c[k]);
        if constexpr (D::kHasMin) msum[b] += _mm_cvtss_f32(_mm_movehdup_ps(cdm));
        const __m512 cd = _mm512_broadcastss_ps(cdm);
        __m512 lo, hi;
        D::Load(blk, &lo, &hi);
        lo_acc = _mm512_fmadd_ps(cd, lo, lo_acc);
        hi_acc = _mm512_fmadd_ps(cd, hi, hi_acc);
      }
      _mm512_storeu_ps(yb + b * kQK, lo_acc);
      _mm512_storeu_ps(yb + b * kQK + kQK / 2, hi_acc);
    }
  }
  if constexpr (D::kHasMin) {
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 m = _mm512_set1_ps(msum[b]);
      _mm512_storeu_ps(yb + b * kQK, _mm512_add_ps(_mm512_loadu_ps(yb + b * kQK), m));
      _mm512_storeu_ps(yb + b * kQK + kQK / 2,
                       _mm512_add_ps(_mm512_loadu_ps(yb + b * kQK + kQK / 2), m));
    }
  }
}

template <class D>
void AxpyRows(const uint8_t* const* rows, const float* coef, int64_t n_rows, int64_t i0,
              int64_t i1, float* y) {
  if (n_rows <= 0) return;
  for (int64_t b = i0 / kQK; b < i1 / kQK; b += kWindowBlocks) {
    RowPass<D>(rows, coef, n_rows, b, std::min(kWindowBlocks, i1 / kQK - b), y);
  }
}

}  // namespace

void PutAxpyRows(AxpyRowsFn* slots, int n_slots) {
  PutAxpySlot(slots, n_slots, GgmlType::kQ8_0, &AxpyRows<Q8_0Dec>);
  PutAxpySlot(slots, n_slots, GgmlType::kQ4_1, &AxpyRows<Q4_1Dec>);
}

}  // namespace kx::cpu::avx512
