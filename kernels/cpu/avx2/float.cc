// AVX2 kernels for the unquantized weight types (F32, F16, BF16): 8 elements
// per step, a scalar tail added after the vector sum.
#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx2 {
namespace {

constexpr int kLanes = 8;

struct F32Load {
  static constexpr int kBytes = 4;
  static __m256 Load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float Scalar(const uint8_t* p) { return LoadF32(p); }
};
struct F16Load {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float Scalar(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }
};
struct Bf16Load {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static float Scalar(const uint8_t* p) { return Bf16ToFloat(LoadU16(p)); }
};

template <class L>
struct FloatTiles {
  template <int R, int C>
  static void Tile(const TileArgs& t, int64_t r0, int64_t c0) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const float* x[C];
    for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const float*>(t.act + (c0 + c) * t.act_stride);
    int64_t i = 0;
    for (; i + kLanes <= t.n; i += kLanes) {
      __m256 xv[C];
      for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x[c] + i);
      for (int r = 0; r < R; ++r) {
        const __m256 w = L::Load(t.w + (r0 + r) * t.row_bytes + i * L::kBytes);
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(w, xv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = t.w + (r0 + r) * t.row_bytes;
      for (int c = 0; c < C; ++c) {
        float sum = HSum(acc[r][c]);
        for (int64_t j = i; j < t.n; ++j) sum += L::Scalar(row + j * L::kBytes) * x[c][j];
        t.y[(c0 + c) * t.ldy + r0 + r] = sum;
      }
    }
  }
};

using F32Entry = TiledEntryPoints<FloatTiles<F32Load>, 4, 2, 4>;
using F16Entry = TiledEntryPoints<FloatTiles<F16Load>, 4, 2, 4>;
using Bf16Entry = TiledEntryPoints<FloatTiles<Bf16Load>, 4, 2, 4>;

}  // namespace

const TypeKernels kF32 = {GgmlType::kF32,    &F32ActBytes,      &CopyF32Act,
                          &F32Entry::Matvec, &F32Entry::Matmul, &ref::DequantizeF32};
const TypeKernels kF16 = {GgmlType::kF16,    &F32ActBytes,      &CopyF32Act,
                          &F16Entry::Matvec, &F16Entry::Matmul, &ref::DequantizeF16};
const TypeKernels kBF16 = {GgmlType::kBF16,    &F32ActBytes,       &CopyF32Act,
                           &Bf16Entry::Matvec, &Bf16Entry::Matmul, &ref::DequantizeBF16};

}  // namespace kx::cpu::avx2
