// AVX2 Q8_0 × BlockQ8A kernels: one block per 256-bit vector. maddubs needs
// an unsigned operand: |w| × (x with w's sign). |−128| = 0x80 read unsigned
// is 128, correct; x is never −128 (kQ8AMax), so vpsignb cannot overflow it,
// and 2·128·127 = 32512 fits maddubs' int16 pair sums.
#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx2 {
namespace {

struct Q8_0Tiles {
  template <int R, int C>
  static void Tile(const TileArgs& t, int64_t r0, int64_t c0) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t nb = t.n / kQK;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xq[C];
      __m256 xd[C];
      for (int c = 0; c < C; ++c) {
        const uint8_t* a = t.act + (c0 + c) * t.act_stride + b * sizeof(BlockQ8A);
        xq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 8));
        xd[c] = _mm256_set1_ps(LoadF32(a));
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = t.w + (r0 + r) * t.row_bytes + b * sizeof(BlockQ8_0);
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
        const __m256i wabs = _mm256_sign_epi8(w, w);
        const __m256 wd = _mm256_set1_ps(HalfAt(p));
        for (int c = 0; c < C; ++c) {
          const __m256 sum = _mm256_cvtepi32_ps(DotU8S8(wabs, _mm256_sign_epi8(xq[c], w)));
          acc[r][c] = _mm256_fmadd_ps(sum, _mm256_mul_ps(wd, xd[c]), acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = HSum(acc[r][c]);
  }
};

using Entry = TiledEntryPoints<Q8_0Tiles, 4, 2, 3>;

}  // namespace

const TypeKernels kQ8_0 = {GgmlType::kQ8_0, &Q8AActBytes,   &QuantizeQ8A,
                           &Entry::Matvec,  &Entry::Matmul, &ref::DequantizeQ8_0};

}  // namespace kx::cpu::avx2
