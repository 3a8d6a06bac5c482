// AVX-512 down_blocks (kernels.h, down_blocks.h) for Q4_1: 16 output rows per
// vector, one int32 lane per row. Per tile and chunk c, the 32 bytes
// (qs_r[2c], qs_r[2c+1]) of the 16 rows are widened to int16 pairs; their low
// nibbles are elements (2c, 2c+1) of each row and their high nibbles
// (2c+16, 2c+17), so two vpdpwssd against the broadcast coefficient pairs
// add four products per row. After the 8 chunks each lane holds its row's
// whole integer dot, scaled by d_w·d_c with one fma, plus m_w·s_c with a
// second: the scalar kernel's operations, so the results are equal bit for
// bit. The coefficient pairs (16 vectors) stay in registers over the tiles.
#pragma once

#include <cstdint>

#include "kernels/cpu/avx512/q16a_tiles.h"
#include "kernels/cpu/down_blocks.h"
#include "kernels/cpu/internal.h"

namespace kx::cpu::avx512 {

template <bool kVnni>
void DownBlocksQ4_1(const uint8_t* const* parts, const float* coef, int64_t n_groups, int64_t i0,
                    int64_t i1, float* y) {
  constexpr int kT = kDownBlocksTile;
  constexpr uint64_t kTileBytes = kT * sizeof(BlockQ4_1);
  const __m512i low = _mm512_set1_epi16(0x0f);
  for (int64_t g = 0; g < n_groups; ++g) {
    BlockQ16A c;
    QuantizeQ16AVec(coef + g * kDownBlocksGroup, kDownBlocksGroup, &c);
    if (c.d == 0.0f) continue;
    __m512i xlo[8], xhi[8];
    for (int k = 0; k < 8; ++k) {
      xlo[k] = _mm512_set1_epi32(static_cast<int>(LoadU32(&c.qs[2 * k])));
      xhi[k] = _mm512_set1_epi32(static_cast<int>(LoadU32(&c.qs[16 + 2 * k])));
    }
    const __m512 dc = _mm512_set1_ps(c.d), sc = _mm512_set1_ps(c.s);
    const uint8_t* part = parts[g];
    for (int64_t e = i0; e < i1; e += kT) {
      const uint8_t* tile = part + static_cast<uint64_t>(e / kT) * kTileBytes;
      const __m512 dw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile)));
      const __m512 mw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 2 * kT)));
      __m512i sum = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        const __m512i v = _mm512_cvtepu8_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 4 * kT + k * 2 * kT)));
        sum = Dot16<kVnni>(sum, _mm512_and_si512(v, low), xlo[k]);
        sum = Dot16<kVnni>(sum, _mm512_srli_epi16(v, 4), xhi[k]);
      }
      __m512 yv = _mm512_loadu_ps(y + e);
      yv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, dc), yv);
      yv = _mm512_fmadd_ps(mw, sc, yv);
      _mm512_storeu_ps(y + e, yv);
    }
  }
}

}  // namespace kx::cpu::avx512
