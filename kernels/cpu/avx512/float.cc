// AVX-512 kernels for the unquantized weight types (F32, F16, BF16): 16
// elements per step, masked loads for the tail (no scalar remainder).
#include "kernels/cpu/avx512/simd.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/tile_driver.h"

namespace kx::cpu::avx512 {
namespace {

constexpr int kLanes = 16;

struct F32Load {
  static constexpr int kBytes = 4;
  static __m512 Load(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16Load {
  static constexpr int kBytes = 2;
  static __m512 Load(const uint8_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct Bf16Load {
  static constexpr int kBytes = 2;
  static __m512 Load(const uint8_t* p, __mmask16 m) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
};

template <class L>
struct FloatTiles {
  template <int R, int C>
  static void Step(const TileArgs& t, int64_t r0, int64_t c0, int64_t i, __mmask16 m,
                   __m512 (&acc)[R][C]) {
    __m512 x[C];
    for (int c = 0; c < C; ++c) {
      x[c] = _mm512_maskz_loadu_ps(m, t.act + (c0 + c) * t.act_stride + i * sizeof(float));
    }
    for (int r = 0; r < R; ++r) {
      const __m512 w = L::Load(t.w + (r0 + r) * t.row_bytes + i * L::kBytes, m);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(w, x[c], acc[r][c]);
    }
  }

  template <int R, int C>
  static void Tile(const TileArgs& t, int64_t r0, int64_t c0) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + kLanes <= t.n; i += kLanes) Step<R, C>(t, r0, c0, i, 0xffff, acc);
    if (i < t.n) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (t.n - i)) - 1);
      Step<R, C>(t, r0, c0, i, tail, acc);
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) t.y[(c0 + c) * t.ldy + r0 + r] = _mm512_reduce_add_ps(acc[r][c]);
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

}  // namespace kx::cpu::avx512
