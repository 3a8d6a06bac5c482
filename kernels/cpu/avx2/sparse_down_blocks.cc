// AVX2 down_blocks (kernels.h, down_blocks.h) for Q4_1: 8 output rows per
// vector, one int32 lane per row, so a tile of 16 rows is two halves whose
// sums form two independent chains. Per tile and chunk c, each half's 16
// bytes (qs_r[2c], qs_r[2c+1]) of its 8 rows are widened to int16 pairs;
// their low nibbles are elements (2c, 2c+1) of each row and their high
// nibbles (2c+16, 2c+17), so two vpmaddwd against the broadcast coefficient
// pairs add four products per row (no overflow: a pair is at most
// 2·15·32767 and the row's whole dot 32·15·32767 < 2^24). After the 8 chunks
// each lane holds its row's whole integer dot, scaled by d_w·d_c with one
// fma, plus m_w·s_c with a second: the scalar kernel's operations, so the
// results are equal bit for bit. The 16 broadcast coefficient pairs are made
// once per group; 16 ymm registers cannot hold them beside the working set,
// so they live on the stack (L1) and each is loaded once per tile for both
// halves: one load per two vpmaddwd. ~30 GB/s from L2 on AVX-512 hardware
// (about half the AVX-512 kernel), bound by the ALU ports, not the loads.
#include <cstring>

#include "kernels/cpu/avx2/simd.h"
#include "kernels/cpu/down_blocks.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::avx2 {
namespace {

constexpr int kLanes = 8;   // output rows per ymm
constexpr int kChunks = 8;  // chunk c: element pairs (2c, 2c+1) and (2c+16, 2c+17)

// Two int16 coefficients (elements i, i+1) as one int32 lane for vpmaddwd.
inline int PairAt(const int16_t* qs) {
  int32_t v;
  std::memcpy(&v, qs, sizeof v);
  return v;
}

// y[0..7] = fma(m_w, s_c, fma(float(sum), d_w·d_c, y)) for one half tile;
// d16 / m16 point at the half's 8 f16 scales / mins.
inline void Finish(__m256i sum, const uint8_t* d16, const uint8_t* m16, __m256 dc, __m256 sc,
                   float* y) {
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d16)));
  const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m16)));
  __m256 yv = _mm256_loadu_ps(y);
  yv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, dc), yv);
  yv = _mm256_fmadd_ps(mw, sc, yv);
  _mm256_storeu_ps(y, yv);
}

void DownBlocksQ4_1(const uint8_t* const* parts, const float* coef, int64_t n_groups, int64_t i0,
                    int64_t i1, float* y) {
  constexpr int kT = kDownBlocksTile;
  constexpr uint64_t kTileBytes = kT * sizeof(BlockQ4_1);
  constexpr int kHalfScales = kLanes * sizeof(uint16_t);  // one half's f16 d (or m)
  constexpr int kMinsAt = kT * sizeof(uint16_t);          // the m block after the d block
  constexpr int kChunksAt = 2 * kMinsAt;                  // quants after d and m
  constexpr int kChunkBytes = 2 * kT;                     // 2 quant bytes per row
  constexpr int kHalfChunk = 2 * kLanes;                  // one half's bytes of a chunk
  static_assert(kT == 2 * kLanes, "a tile is two ymm halves");
  const __m256i low = _mm256_set1_epi16(0x0f);
  for (int64_t g = 0; g < n_groups; ++g) {
    BlockQ16A c;
    QuantizeQ16A(coef + g * kDownBlocksGroup, kDownBlocksGroup, &c);
    if (c.d == 0.0f) continue;  // all zero: the group adds nothing
    __m256i xlo[kChunks], xhi[kChunks];
    for (int k = 0; k < kChunks; ++k) {
      xlo[k] = _mm256_set1_epi32(PairAt(&c.qs[2 * k]));
      xhi[k] = _mm256_set1_epi32(PairAt(&c.qs[16 + 2 * k]));
    }
    const __m256 dc = _mm256_set1_ps(c.d), sc = _mm256_set1_ps(c.s);
    const uint8_t* part = parts[g];
    for (int64_t e = i0; e < i1; e += kT) {
      const uint8_t* tile = part + static_cast<uint64_t>(e / kT) * kTileBytes;
      __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
      for (int k = 0; k < kChunks; ++k) {
        const uint8_t* chunk = tile + kChunksAt + k * kChunkBytes;
        const __m256i v0 =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk)));
        const __m256i v1 = _mm256_cvtepu8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + kHalfChunk)));
        // Bytes were zero-extended, so a 4-bit shift of the int16 leaves the high nibble.
        sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(_mm256_and_si256(v0, low), xlo[k]));
        sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(_mm256_and_si256(v1, low), xlo[k]));
        sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(_mm256_srli_epi16(v0, 4), xhi[k]));
        sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(_mm256_srli_epi16(v1, 4), xhi[k]));
      }
      Finish(sum0, tile, tile + kMinsAt, dc, sc, y + e);
      Finish(sum1, tile + kHalfScales, tile + kMinsAt + kHalfScales, dc, sc, y + e + kLanes);
    }
  }
}

}  // namespace

void PutDownBlocks(DownBlocksFn* slots, int n_slots) {
  PutSlot<DownBlocksFn>(slots, n_slots, GgmlType::kQ4_1, &DownBlocksQ4_1);
}

}  // namespace kx::cpu::avx2
