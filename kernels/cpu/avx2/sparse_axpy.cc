// AVX2 axpy_rows (kernels.h) for Q8_0 and Q4_1. The columns are walked in
// passes of kMaxChunk blocks whose sums stay in the 16 ymm registers while
// every row streams past (a block is 4 accumulators); the first pass
// prefetches the rows' whole range so later passes hit the caches. Q4_1's
// min term coef·m is summed once per block and added after the last row.
#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::avx2 {
namespace {

constexpr int kMaxChunk = 2;  // 8 accumulators + 2 min sums + temporaries
constexpr int64_t kPrefetchRows = 16;
constexpr int kLine = 64;
constexpr int kLanes = 8;
constexpr int kVecsPerBlock = kQK / kLanes;

struct Q8_0Dec {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static void Load(const uint8_t* p, __m256* v) {
    const uint8_t* qs = p + offsetof(BlockQ8_0, qs);
    for (int k = 0; k < kVecsPerBlock; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + k * kLanes));
      v[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    }
  }
};

struct Q4_1Dec {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr bool kHasMin = true;
  static void Load(const uint8_t* p, __m256* v) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(BlockQ4_1, qs)));
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(q, nib);                      // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), nib);   // elements 16..31
    v[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    v[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    v[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    v[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  }
};

template <class D, int kNb>
void Pass(const uint8_t* const* rows, const float* coef, int64_t n_rows, int64_t b0, float* y,
          size_t prefetch_off, size_t prefetch_bytes) {
  __m256 acc[kVecsPerBlock * kNb];
  __m128 msum[kNb];
  float* yb = y + b0 * kQK;
  for (int k = 0; k < kNb; ++k) {
    for (int v = 0; v < kVecsPerBlock; ++v) {
      acc[k * kVecsPerBlock + v] = _mm256_loadu_ps(yb + k * kQK + v * kLanes);
    }
    msum[k] = _mm_setzero_ps();
  }
  const size_t off = static_cast<size_t>(b0) * D::kBytes;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (r + kPrefetchRows < n_rows) {
      const char* ahead = reinterpret_cast<const char*>(rows[r + kPrefetchRows] + prefetch_off);
      for (size_t l = 0; l < prefetch_bytes; l += kLine) _mm_prefetch(ahead + l, _MM_HINT_T0);
    }
    const uint8_t* p = rows[r] + off;
    const __m128 c = _mm_set1_ps(coef[r]);
    for (int k = 0; k < kNb; ++k) {
      const uint8_t* blk = p + k * D::kBytes;
      uint32_t dm = LoadU16(blk);
      if constexpr (D::kHasMin) dm |= static_cast<uint32_t>(LoadU16(blk + 2)) << 16;
      const __m128 cdm = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm))), c);
      if constexpr (D::kHasMin) msum[k] = _mm_add_ps(msum[k], cdm);
      const __m256 cd = _mm256_broadcastss_ps(cdm);
      __m256 w[kVecsPerBlock];
      D::Load(blk, w);
      for (int v = 0; v < kVecsPerBlock; ++v) {
        acc[k * kVecsPerBlock + v] = _mm256_fmadd_ps(cd, w[v], acc[k * kVecsPerBlock + v]);
      }
    }
  }
  for (int k = 0; k < kNb; ++k) {
    __m256 m = _mm256_setzero_ps();
    if constexpr (D::kHasMin) m = _mm256_broadcastss_ps(_mm_movehdup_ps(msum[k]));
    for (int v = 0; v < kVecsPerBlock; ++v) {
      __m256 a = acc[k * kVecsPerBlock + v];
      if constexpr (D::kHasMin) a = _mm256_add_ps(a, m);
      _mm256_storeu_ps(yb + k * kQK + v * kLanes, a);
    }
  }
}

template <class D>
void AxpyRows(const uint8_t* const* rows, const float* coef, int64_t n_rows, int64_t i0,
              int64_t i1, float* y) {
  if (n_rows <= 0) return;
  int64_t b = i0 / kQK;
  const int64_t end = i1 / kQK;
  // The first pass prefetches the rows' whole column range (see avx512/).
  const size_t pf_off = static_cast<size_t>(b) * D::kBytes;
  size_t pf_bytes = static_cast<size_t>(end - b) * D::kBytes;
  for (; b + kMaxChunk <= end; b += kMaxChunk) {
    Pass<D, kMaxChunk>(rows, coef, n_rows, b, y, pf_off, pf_bytes);
    pf_bytes = 0;
  }
  if (b < end) Pass<D, 1>(rows, coef, n_rows, b, y, pf_off, pf_bytes);
}

}  // namespace

void PutAxpyRows(AxpyRowsFn* slots, int n_slots) {
  PutAxpySlot(slots, n_slots, GgmlType::kQ8_0, &AxpyRows<Q8_0Dec>);
  PutAxpySlot(slots, n_slots, GgmlType::kQ4_1, &AxpyRows<Q4_1Dec>);
}

}  // namespace kx::cpu::avx2
