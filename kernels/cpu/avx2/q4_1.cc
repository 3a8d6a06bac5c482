// AVX2 Q4_1 × BlockQ8A kernels: one 32-element block per 256-bit vector.
// Per block and lane: acc += float(Σ4 q·qx)·(d·dx) + m·(s/8); eight lanes per
// block, so the min term m·s is whole after the horizontal sum (s/8 exact).
#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx2 {
namespace {

constexpr float kLanesInv = 1.0f / 8;

struct Q4_1Tiles {
  template <int R, int C>
  static void Tile(const TileArgs& t, int64_t r0, int64_t c0) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const int64_t nb = t.n / kQK;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xq[C];
      __m256 xd[C], xs[C];
      for (int c = 0; c < C; ++c) {
        const uint8_t* a = t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ8A);
        xq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 8));
        xd[c] = _mm256_set1_ps(LoadF32(a));
        xs[c] = _mm256_set1_ps(LoadF32(a + 4) * kLanesInv);
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = t.w + (r0 + r) * t.row_bytes + b * sizeof(BlockQ4_1);
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
        const __m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
        const __m256 wd = _mm256_set1_ps(HalfAt(p));
        const __m256 wm = _mm256_set1_ps(HalfAt(p + 2));
        for (int c = 0; c < C; ++c) {
          const __m256 sum = _mm256_cvtepi32_ps(DotU8S8(wq, xq[c]));
          acc[r][c] = _mm256_fmadd_ps(sum, _mm256_mul_ps(wd, xd[c]), acc[r][c]);
          acc[r][c] = _mm256_fmadd_ps(wm, xs[c], acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = HSum(acc[r][c]);
  }
};

// 16 vector registers: matvec 4 rows × 1 column, matmul 2 rows × 3 columns.
using Entry = TiledEntryPoints<Q4_1Tiles, 4, 2, 3>;

}  // namespace

const TypeKernels kQ4_1 = {GgmlType::kQ4_1, &Q8AActBytes,   &QuantizeQ8A,
                           &Entry::Matvec,  &Entry::Matmul, &ref::DequantizeQ4_1};

}  // namespace kx::cpu::avx2
