// Quant decoders in AVX2 intrinsics, shared by the AVX2 and AVX-512 kernel
// sources (both compile them with their own flags): each yields the 32 q of
// one 32-element block as int8 in element order, which the ISA's tiles widen
// to int16 (every type's q fits int8: |q| ≤ 32). Layouts: legacy_quants.h,
// kquants.h; the scalar Quants there are the reference.
#pragma once

#include <immintrin.h>

#include <utility>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/legacy_quants.h"

namespace kx::cpu::simd {

inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256i Bytes(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }

// (v >> kShift) & mask per byte (16-bit shifts move bits across bytes; the
// mask removes them).
template <int kShift>
inline __m256i Bits(__m256i v, int mask) {
  if constexpr (kShift != 0) v = _mm256_srli_epi16(v, kShift);
  return _mm256_and_si256(v, Bytes(mask));
}

// A 16-byte nibble array: elements 0-15 low nibbles, 16-31 high nibbles.
inline __m256i Nibbles16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Bit j of the little-endian 32-bit word at p, as 0x10 in byte j.
inline __m256i FifthBits(const uint8_t* p) {
  const __m256i w = _mm256_set1_epi32(static_cast<int>(LoadU16(p) | LoadU16(p + 2) << 16));
  // Byte j ← byte j/8 of the word (each 128-bit lane holds all 4 bytes).
  const __m256i spread =
      _mm256_shuffle_epi8(w, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                              2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);  // bit j % 8
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, Bytes(0x10));
}

struct Q4_0Decode {
  static __m256i Q8(const uint8_t* p) {
    return _mm256_sub_epi8(Nibbles16(p + Q4_0Layout::kQs), Bytes(8));
  }
};
struct Q5_0Decode {
  static __m256i Q8(const uint8_t* p) {
    const __m256i q =
        _mm256_or_si256(Nibbles16(p + Q5_0Layout::kQs), FifthBits(p + Q5_0Layout::kQh));
    return _mm256_sub_epi8(q, Bytes(16));
  }
};
struct Q5_1Decode {
  static __m256i Q8(const uint8_t* p) {
    return _mm256_or_si256(Nibbles16(p + Q5_1Layout::kQs), FifthBits(p + Q5_1Layout::kQh));
  }
};
struct Q4_1Decode {
  static __m256i Q8(const uint8_t* p) { return Nibbles16(p + Q4_1Layout::kQs); }
};
struct Q8_0Decode {
  static __m256i Q8(const uint8_t* p) { return Load32(p + offsetof(BlockQ8_0, qs)); }
};

// K-quants: Q8<J>(p) for block J (elements 32J..32J+31) of the super-block at
// p; Header(p, h) fills the KHeader as kquants.h's scalar Header does, from
// vector registers (one 256-bit store each for sc and m: scalar 16-bit stores
// followed by the tile's vector loads would stall store forwarding, which
// measured 3× slower for Q4_K) and F16C for d, dmin.
inline float Half(const uint8_t* p) { return _cvtsh_ss(LoadU16(p)); }
inline uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint64_t U64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreSc(KHeader* h, __m256i sc, __m256i m) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(h->sc), sc);
  _mm256_store_si256(reinterpret_cast<__m256i*>(h->m), m);
}
// Bytes b0..b7 of v → int16 [b0, b0, b1, b1, ..., b7, b7] (one value per
// 16-element sub-block for the types with 32-element sub-blocks).
inline __m256i Pairs16(uint64_t v) {
  const __m128i dup =
      _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(v)),
                       _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
  return _mm256_cvtepu8_epi16(dup);
}
// Q4_K / Q5_K's 12 scale bytes (kq::ScaleMin6), four sub-blocks per 32-bit word.
inline void ScaleMin6(const uint8_t* s, KHeader* h) {
  const uint32_t a = U32(s), b = U32(s + 4), c = U32(s + 8);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, kTop = 0x30303030;
  const uint64_t sc = (a & k6) | static_cast<uint64_t>((c & k4) | ((a >> 2) & kTop)) << 32;
  const uint64_t m = (b & k6) | static_cast<uint64_t>(((c >> 4) & k4) | ((b >> 2) & kTop)) << 32;
  StoreSc(h, Pairs16(sc), Pairs16(m));
}

// K-quants: Q8<J>(p) for block J (elements 32J..32J+31) of the super-block at p.
struct Q4KDecode {
  static void Header(const uint8_t* p, KHeader* h) {
    h->d = Half(p);
    h->dmin = Half(p + 2);
    ScaleMin6(p + 4, h);
  }
  template <int J>
  static __m256i Q8(const uint8_t* p) {
    return Bits<4 * (J % 2)>(Load32(p + Q4KLayout::kQs + 32 * (J / 2)), 0x0f);
  }
};
struct Q5KDecode {
  static void Header(const uint8_t* p, KHeader* h) { Q4KDecode::Header(p, h); }
  template <int J>
  static __m256i Q8(const uint8_t* p) {
    const __m256i lo = Bits<4 * (J % 2)>(Load32(p + Q5KLayout::kQs + 32 * (J / 2)), 0x0f);
    const __m256i hi = _mm256_slli_epi16(Bits<J>(Load32(p + Q5KLayout::kQh), 1), 4);  // 0 or 16
    return _mm256_or_si256(lo, hi);
  }
};
struct Q6KDecode {
  static void Header(const uint8_t* p, KHeader* h) {
    h->d = Half(p + Q6KLayout::kD);
    h->dmin = 0.0f;
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + Q6KLayout::kScales));
    StoreSc(h, _mm256_cvtepi8_epi16(sc8), _mm256_setzero_si256());
  }
  template <int J>
  static __m256i Q8(const uint8_t* p) {
    constexpr int h = J / 4, s = J % 4;
    const __m256i lo = Bits<4 * (s / 2)>(Load32(p + Q6KLayout::kQl + 64 * h + 32 * (s % 2)), 0x0f);
    const __m256i hi = _mm256_slli_epi16(Bits<2 * s>(Load32(p + Q6KLayout::kQh + 32 * h), 3), 4);
    return _mm256_sub_epi8(_mm256_or_si256(lo, hi), Bytes(32));
  }
};
struct Q3KDecode {
  // Low nibbles: sub-blocks 0-7 from bytes 0-7's low nibbles, 8-15 from their
  // high nibbles; top 2 bits: sub-block k from bits 2·(k / 4) of byte 8 + k % 4.
  static void Header(const uint8_t* p, KHeader* h) {
    const uint8_t* s = p + Q3KLayout::kScales;
    const uint64_t lo = U64(s);
    const uint32_t hb = U32(s + 8);
    constexpr uint64_t k4 = 0x0f0f0f0f0f0f0f0full;
    constexpr uint32_t k2 = 0x03030303;
    const uint64_t top_lo = (hb & k2) | static_cast<uint64_t>((hb >> 2) & k2) << 32;
    const uint64_t top_hi = ((hb >> 4) & k2) | static_cast<uint64_t>((hb >> 6) & k2) << 32;
    const __m128i sc =
        _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(((lo >> 4) & k4) | top_hi << 4),
                                    static_cast<long long>((lo & k4) | top_lo << 4)),
                     _mm_set1_epi8(32));
    StoreSc(h, _mm256_cvtepi8_epi16(sc), _mm256_setzero_si256());
    h->d = Half(p + Q3KLayout::kD);
    h->dmin = 0.0f;
  }
  template <int J>
  static __m256i Q8(const uint8_t* p) {
    constexpr int h = J / 4, s = J % 4;
    const __m256i lo = Bits<2 * s>(Load32(p + Q3KLayout::kQs + 32 * h), 3);
    const __m256i hb = _mm256_slli_epi16(Bits<J>(Load32(p + Q3KLayout::kHmask), 1), 2);  // 0 or 4
    return _mm256_sub_epi8(_mm256_or_si256(lo, hb), Bytes(4));
  }
};
struct Q2KDecode {
  static void Header(const uint8_t* p, KHeader* h) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + Q2KLayout::kScales));
    const __m128i k4 = _mm_set1_epi8(0x0f);
    StoreSc(h, _mm256_cvtepu8_epi16(_mm_and_si128(s, k4)),
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), k4)));
    h->d = Half(p + Q2KLayout::kD);
    h->dmin = Half(p + Q2KLayout::kD + 2);
  }
  template <int J>
  static __m256i Q8(const uint8_t* p) {
    return Bits<2 * (J % 4)>(Load32(p + Q2KLayout::kQs + 32 * (J / 4)), 3);
  }
};

// Calls f.template operator()<J>() for J = 0..N-1 (compile-time block indices).
template <int N, class F>
[[gnu::always_inline]] inline void Unroll(F&& f) {
  [&]<int... J>(std::integer_sequence<int, J...>) { (f.template operator()<J>(), ...); }
  (std::make_integer_sequence<int, N>{});
}

}  // namespace kx::cpu::simd
