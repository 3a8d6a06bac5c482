// The ggml weight blocks as the CUDA kernels read them, shared by matvec.cu and dequantize.cu:
// one decoder per type turns a thread's slice of a block into exact integer-valued floats q and
// one scale and offset per run, so the matvec's dot product and the dequantize op's values come
// from the same code. Block layouts: kernels/cpu/legacy_quants.h and kernels/cpu/kquants.h
// (checked against ggml); type ids: lib/tensor/dtype.h (the module links neither).
//
// A decoder T declares
//   kTypeId                    the ggml type id it reads
//   kBlockElems, kBlockBytes   one block: ggml's, or 4/8 elements (16 bytes) for float types
//   kAlign                     what its loads need: every block address a multiple of it
//                              (callers check w and row_bytes)
//   kStaged                    matvec copies rows through shared memory first (types whose
//                              blocks are not 16-byte aligned; see matvec.cu)
//   kSlices                    slices per block; one thread decodes one slice
//   kRuns, kRunLen, RunStart   a slice is kRuns runs of kRunLen consecutive elements, run j
//                              starting at block element RunStart(s, j)
//   kSlicesPerLane             matvec: slices per lane in one pass over a chunk of a row
//   Decode(blk, s, &v)         v.q[j][i], v.scale[j], v.offset[j] of slice s of the block at blk
// and element i of run j is (ElementValue) round(round(scale·q) + offset), each part only where
// the type has it: the CPU's dequantize roundings, so the dequantize op is bit-exact.
#pragma once

#include <stdint.h>

#include <cstdio>

#include "kernels/cuda/common.cuh"

namespace kx::cuda::quant {

enum GgmlTypeId : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

inline constexpr const char* kSupportedTypes =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K";

// ggml's name for a type id (every id a GGUF may hold), or null for an unknown id.
inline const char* GgmlTypeName(uint32_t id) {
  static const char* const kNames[] = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  nullptr, nullptr,  "Q5_0",  "Q5_1",    "Q8_0",
      "Q8_1",    "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",  "Q6_K",   "Q8_K",  "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",    "I16",     "I32",
      "I64",     "F64",   "IQ1_M",  "BF16",  nullptr, nullptr,  nullptr, "TQ1_0",   "TQ2_0"};
  return id < sizeof(kNames) / sizeof(kNames[0]) ? kNames[id] : nullptr;
}

template <int kRuns, int kRunLen>
struct SliceValues {
  float q[kRuns][kRunLen];  // integers for the quantized types, the weights for float types
  float scale[kRuns];       // read only where the type has a scale
  float offset[kRuns];      // read only where the type has an offset
};

// ---- Loads and conversions ---------------------------------------------------------------
// Plain loads through generic pointers: the decoders read global memory (dequantize, matvec on
// 16-byte-aligned types) and shared memory (matvec's staged types) alike.

__device__ __forceinline__ uint32_t Load16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// Four bytes at a kAlign-aligned address (two 16-bit loads below 4).
template <int kAlign>
__device__ __forceinline__ uint32_t Load32(const uint8_t* p) {
  if constexpr (kAlign >= 4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else {
    return Load16(p) | Load16(p + 2) << 16;
  }
}

__device__ __forceinline__ uint4 Load128(const uint8_t* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// Word i (0..3) of a 16-byte load; i is a constant once the callers' loops unroll.
__device__ __forceinline__ uint32_t WordOf(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

__device__ __forceinline__ float HalfBits(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
}

// v − bias, exact for v < 2^22 and integral bias: the bits 0x4B000000 | v are the float
// 2^23 + v, so one OR and one add replace the int→float conversion, which runs at a quarter of
// the FP32 rate or less on current GPUs and would otherwise bound the 4-bit matvec.
__device__ __forceinline__ float SmallIntToFloat(uint32_t v, float bias) {
  return __uint_as_float(0x4B000000u | v) - (8388608.0f + bias);
}

// ---- Legacy 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) -----------------------------
// Two slices per block: slice s holds quant bytes [8s, 8s+8), i.e. run 0 = elements 8s.. (low
// nibbles) and run 1 = elements 16+8s.. (high nibbles), the fifth bit of element e being bit e
// of qh for Q5_0/Q5_1.

template <bool kFifthBit, int kAlign>
__device__ __forceinline__ void LegacyNibbles(const uint8_t* qs, int s, uint32_t qh, float bias,
                                              float (&q)[2][8]) {
  const uint32_t w[2] = {Load32<kAlign>(qs + 8 * s), Load32<kAlign>(qs + 8 * s + 4)};
  const uint32_t h_lo = qh >> (8 * s);
  const uint32_t h_hi = qh >> (16 + 8 * s);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t byte = w[i / 4] >> (8 * (i % 4));
    uint32_t lo = byte & 0x0fu;
    uint32_t hi = (byte >> 4) & 0x0fu;
    if constexpr (kFifthBit) {
      lo |= ((h_lo >> i) & 1u) << 4;
      hi |= ((h_hi >> i) & 1u) << 4;
    }
    q[0][i] = SmallIntToFloat(lo, bias);
    q[1][i] = SmallIntToFloat(hi, bias);
  }
}

struct LegacyShape {
  static constexpr int kBlockElems = 32;
  static constexpr bool kStaged = true;  // 18..34-byte blocks: 2-, 4- or 8-byte aligned
  static constexpr int kSlices = 2;
  static constexpr int kRuns = 2;
  static constexpr int kRunLen = 8;
  static constexpr bool kHasScale = true;
  static constexpr int kSlicesPerLane = 4;
  using Values = SliceValues<kRuns, kRunLen>;
  __device__ static int RunStart(int s, int j) { return 8 * s + 16 * j; }
};

struct Q4_0 : LegacyShape {  // d, qs[16]; w = d·(q − 8)
  static constexpr uint32_t kTypeId = kQ4_0;
  static constexpr int kBlockBytes = 18;
  static constexpr int kAlign = 2;
  static constexpr bool kHasOffset = false;
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    LegacyNibbles<false, kAlign>(blk + 2, s, 0, 8.0f, v.q);
    v.scale[0] = v.scale[1] = HalfBits(Load16(blk));
  }
};

struct Q4_1 : LegacyShape {  // d, m, qs[16]; w = d·q + m
  static constexpr uint32_t kTypeId = kQ4_1;
  static constexpr int kBlockBytes = 20;
  static constexpr int kAlign = 4;
  static constexpr bool kHasOffset = true;
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    const uint32_t dm = Load32<kAlign>(blk);
    LegacyNibbles<false, kAlign>(blk + 4, s, 0, 0.0f, v.q);
    v.scale[0] = v.scale[1] = HalfBits(dm);
    v.offset[0] = v.offset[1] = HalfBits(dm >> 16);
  }
};

struct Q5_0 : LegacyShape {  // d, qh[4], qs[16]; w = d·(q − 16)
  static constexpr uint32_t kTypeId = kQ5_0;
  static constexpr int kBlockBytes = 22;
  static constexpr int kAlign = 2;
  static constexpr bool kHasOffset = false;
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    LegacyNibbles<true, kAlign>(blk + 6, s, Load32<kAlign>(blk + 2), 16.0f, v.q);
    v.scale[0] = v.scale[1] = HalfBits(Load16(blk));
  }
};

struct Q5_1 : LegacyShape {  // d, m, qh[4], qs[16]; w = d·q + m
  static constexpr uint32_t kTypeId = kQ5_1;
  static constexpr int kBlockBytes = 24;
  static constexpr int kAlign = 8;
  static constexpr bool kHasOffset = true;
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    const uint32_t dm = Load32<kAlign>(blk);
    LegacyNibbles<true, kAlign>(blk + 8, s, Load32<kAlign>(blk + 4), 0.0f, v.q);
    v.scale[0] = v.scale[1] = HalfBits(dm);
    v.offset[0] = v.offset[1] = HalfBits(dm >> 16);
  }
};

struct Q8_0 {  // d, qs[32] (int8); w = d·q. Slice s: elements 16s..16s+15, one run.
  static constexpr uint32_t kTypeId = kQ8_0;
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 34;
  static constexpr int kAlign = 2;
  static constexpr bool kStaged = true;
  static constexpr int kSlices = 2;
  static constexpr int kRuns = 1;
  static constexpr int kRunLen = 16;
  static constexpr bool kHasScale = true;
  static constexpr bool kHasOffset = false;
  static constexpr int kSlicesPerLane = 4;
  using Values = SliceValues<kRuns, kRunLen>;
  __device__ static int RunStart(int s, int) { return 16 * s; }
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    const uint8_t* qs = blk + 2 + 16 * s;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // Flipping the sign bit maps int8 −128..127 onto 0..255, i.e. q + 128.
      const uint32_t w = Load32<kAlign>(qs + 4 * k) ^ 0x80808080u;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        v.q[0][4 * k + b] = SmallIntToFloat((w >> (8 * b)) & 0xffu, 128.0f);
    }
    v.scale[0] = HalfBits(Load16(blk));
  }
};

// ---- K-quant 256-element super-blocks (Q4_K, Q5_K, Q6_K) ---------------------------------

// The 6-bit scale and min of 32-element sub-block j (0..7, a run-time value) from the 12 scale
// bytes in words s0..s2 (kq::ScaleMin6). Bytes are picked by selects, not an indexed array, so
// nothing spills to local memory.
__device__ __forceinline__ void ScaleMin6(uint32_t s0, uint32_t s1, uint32_t s2, int j,
                                          uint32_t* sc, uint32_t* m) {
  const auto byte = [&](int k) -> uint32_t {
    const uint32_t w = k < 4 ? s0 : (k < 8 ? s1 : s2);
    return (w >> (8 * (k & 3))) & 0xffu;
  };
  if (j < 4) {
    *sc = byte(j) & 63u;
    *m = byte(j + 4) & 63u;
  } else {
    *sc = (byte(j + 4) & 0x0fu) | ((byte(j - 4) >> 6) << 4);
    *m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

// Q4_K and Q5_K: d, dmin, scales[12] in the first 16 bytes; eight slices per super-block, slice
// s = 16 quant bytes of 64-element chunk c = s/2 (offset l0 = 16·(s%2)): run 0 = elements
// 64c+l0.. (low nibbles, sub-block 2c), run 1 = elements 64c+32+l0.. (high, sub-block 2c+1).
// w = round(d·sc)·q − round(dmin·m), as the CPU's dequantize rounds it.
template <bool kFifthBit>
struct KQuant4or5 {
  static constexpr uint32_t kTypeId = kFifthBit ? kQ5_K : kQ4_K;
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  static constexpr int kAlign = 16;
  static constexpr bool kStaged = false;  // 16-byte blocks: each lane loads its own 16 bytes
  static constexpr int kSlices = 8;
  static constexpr int kRuns = 2;
  static constexpr int kRunLen = 16;
  static constexpr bool kHasScale = true;
  static constexpr bool kHasOffset = true;
  static constexpr int kSlicesPerLane = 2;
  static constexpr int kQh = 16;
  static constexpr int kQs = kFifthBit ? 48 : 16;
  using Values = SliceValues<kRuns, kRunLen>;
  __device__ static int RunStart(int s, int j) { return 64 * (s / 2) + 16 * (s % 2) + 32 * j; }
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    const uint4 head = Load128(blk);
    const float d = HalfBits(head.x);
    const float dmin = HalfBits(head.x >> 16);
    const int c = s / 2;
    const int l0 = 16 * (s % 2);
    const uint4 qs = Load128(blk + kQs + 32 * c + l0);
    uint4 qh = make_uint4(0, 0, 0, 0);
    if constexpr (kFifthBit) qh = Load128(blk + kQh + l0);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      uint32_t sc = 0, m = 0;
      ScaleMin6(head.y, head.z, head.w, 2 * c + j, &sc, &m);
      v.scale[j] = __fmul_rn(d, SmallIntToFloat(sc, 0.0f));
      v.offset[j] = -__fmul_rn(dmin, SmallIntToFloat(m, 0.0f));
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = WordOf(qs, i / 4) >> (8 * (i % 4));
      uint32_t lo = byte & 0x0fu;
      uint32_t hi = (byte >> 4) & 0x0fu;
      if constexpr (kFifthBit) {
        const uint32_t h = WordOf(qh, i / 4) >> (8 * (i % 4) + 2 * c);
        lo |= (h & 1u) << 4;
        hi |= ((h >> 1) & 1u) << 4;
      }
      v.q[0][i] = SmallIntToFloat(lo, 0.0f);
      v.q[1][i] = SmallIntToFloat(hi, 0.0f);
    }
  }
};
using Q4_K = KQuant4or5<false>;
using Q5_K = KQuant4or5<true>;

// Q6_K: ql[128], qh[64], scales[16] (int8), d; 210-byte blocks, 2-byte aligned. Eight slices:
// half h = s/4 (128 elements), l0 = 8·(s%4); run g (0..3) = elements 128h + 32g + l0 .. +8,
// whose low 4 bits are nibble g/2 of ql[64h + 32·(g%2) + l0 + i] and high 2 bits are bits 2g of
// qh[32h + l0 + i]; sub-block 8h + 2g + l0/16. w = round(d·sc)·(q − 32).
struct Q6_K {
  static constexpr uint32_t kTypeId = kQ6_K;
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 210;
  static constexpr int kAlign = 2;
  static constexpr bool kStaged = true;
  static constexpr int kSlices = 8;
  static constexpr int kRuns = 4;
  static constexpr int kRunLen = 8;
  static constexpr bool kHasScale = true;
  static constexpr bool kHasOffset = false;
  static constexpr int kSlicesPerLane = 2;
  static constexpr int kQh = 128;
  static constexpr int kScales = 192;
  static constexpr int kD = 208;
  using Values = SliceValues<kRuns, kRunLen>;
  __device__ static int RunStart(int s, int g) { return 128 * (s / 4) + 32 * g + 8 * (s % 4); }
  __device__ static void Decode(const uint8_t* blk, int s, Values& v) {
    const int h = s / 4;
    const int l0 = 8 * (s % 4);
    const uint8_t* ql = blk + 64 * h + l0;
    const uint8_t* qh = blk + kQh + 32 * h + l0;
    const uint32_t a[2] = {Load32<kAlign>(ql), Load32<kAlign>(ql + 4)};
    const uint32_t b[2] = {Load32<kAlign>(ql + 32), Load32<kAlign>(ql + 36)};
    const uint32_t hb[2] = {Load32<kAlign>(qh), Load32<kAlign>(qh + 4)};
    const float d = HalfBits(Load16(blk + kD));
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const int8_t sc = static_cast<int8_t>(blk[kScales + 8 * h + 2 * g + l0 / 16]);
      v.scale[g] = __fmul_rn(d, static_cast<float>(sc));
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int shift = 8 * (i % 4);
      const uint32_t la = a[i / 4] >> shift;
      const uint32_t lb = b[i / 4] >> shift;
      const uint32_t hh = hb[i / 4] >> shift;
      v.q[0][i] = SmallIntToFloat((la & 0x0fu) | (hh & 3u) << 4, 32.0f);
      v.q[1][i] = SmallIntToFloat((lb & 0x0fu) | ((hh >> 2) & 3u) << 4, 32.0f);
      v.q[2][i] = SmallIntToFloat(((la >> 4) & 0x0fu) | ((hh >> 4) & 3u) << 4, 32.0f);
      v.q[3][i] = SmallIntToFloat(((lb >> 4) & 0x0fu) | ((hh >> 6) & 3u) << 4, 32.0f);
    }
  }
};

// ---- Float types (F32, F16, BF16) -----------------------------------------------------------
// A "block" of 16 bytes, one slice, one run, read with one 16-byte load (rows 16-byte aligned,
// n a multiple of the block); otherwise one element per block through shared memory.

enum class FloatKind { kF32, kF16, kBF16 };

template <FloatKind kKind, int kElems>
struct FloatType {
  static constexpr int kElemBytes = kKind == FloatKind::kF32 ? 4 : 2;
  static constexpr uint32_t kTypeId =
      kKind == FloatKind::kF32 ? kF32 : (kKind == FloatKind::kF16 ? kF16 : kBF16);
  static constexpr int kBlockElems = kElems;
  static constexpr int kBlockBytes = kElems * kElemBytes;
  static constexpr int kAlign = kBlockBytes;
  static constexpr bool kStaged = kBlockBytes < 16;
  static constexpr int kSlices = 1;
  static constexpr int kRuns = 1;
  static constexpr int kRunLen = kElems;
  static constexpr bool kHasScale = false;
  static constexpr bool kHasOffset = false;
  static constexpr int kSlicesPerLane = 4;
  using Values = SliceValues<kRuns, kRunLen>;
  __device__ static int RunStart(int, int) { return 0; }
  __device__ static float FromBits(uint32_t bits) {
    if constexpr (kKind == FloatKind::kF32) return __uint_as_float(bits);
    if constexpr (kKind == FloatKind::kF16) return HalfBits(bits);
    return __uint_as_float(bits << 16);  // bfloat16: the top half of a float
  }
  __device__ static void Decode(const uint8_t* blk, int, Values& v) {
    if constexpr (kBlockBytes == 16) {
      const uint4 raw = Load128(blk);
      constexpr int kPerWord = 4 / kElemBytes;
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        v.q[0][i] = FromBits(WordOf(raw, i / kPerWord) >> (32 / kPerWord * (i % kPerWord)));
      }
    } else if constexpr (kElemBytes == 4) {
      v.q[0][0] = FromBits(Load32<4>(blk));
    } else {
      v.q[0][0] = FromBits(Load16(blk));
    }
  }
};
using F32x4 = FloatType<FloatKind::kF32, 4>;
using F32x1 = FloatType<FloatKind::kF32, 1>;
using F16x8 = FloatType<FloatKind::kF16, 8>;
using F16x1 = FloatType<FloatKind::kF16, 1>;
using BF16x8 = FloatType<FloatKind::kBF16, 8>;
using BF16x1 = FloatType<FloatKind::kBF16, 1>;

// ---- What both ops compute from a decoded slice ------------------------------------------

// Element i of run j exactly as the CPU's dequantize rounds it (no fused multiply-add: nvcc
// would contract a plain a·b + c).
template <class T>
__device__ __forceinline__ float ElementValue(const typename T::Values& v, int j, int i) {
  float w = v.q[j][i];
  if constexpr (T::kHasScale) w = __fmul_rn(v.scale[j], w);
  if constexpr (T::kHasOffset) w = __fadd_rn(w, v.offset[j]);
  return w;
}

// The activations of slice s of the block whose first element is xb[0], by run, and their
// sums per run for the offset term (16-byte loads: x is 16-byte aligned and runs of 4 or more
// start at multiples of 4). Shared by matvec and sparse_up_gate.
template <class T>
__device__ __forceinline__ void LoadActs(const float* xb, int s, float (&x)[T::kRuns][T::kRunLen],
                                         float (&xsum)[T::kRuns]) {
#pragma unroll
  for (int j = 0; j < T::kRuns; ++j) {
    const float* src = xb + T::RunStart(s, j);
    if constexpr (T::kRunLen % 4 == 0) {
#pragma unroll
      for (int k = 0; k < T::kRunLen / 4; ++k) {
        const float4 f = __ldg(reinterpret_cast<const float4*>(src) + k);
        x[j][4 * k] = f.x;
        x[j][4 * k + 1] = f.y;
        x[j][4 * k + 2] = f.z;
        x[j][4 * k + 3] = f.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < T::kRunLen; ++i) x[j][i] = __ldg(src + i);
    }
    xsum[j] = 0.0f;
    if constexpr (T::kHasOffset) {
#pragma unroll
      for (int i = 0; i < T::kRunLen; ++i) xsum[j] += x[j][i];
    }
  }
}

// acc + Σ w·x over the slice, as Σ_j scale_j·Σ_i q·x + offset_j·Σ_i x (x: the slice's
// activations by run, xsum: their sums per run, used only with an offset).
template <class T>
__device__ __forceinline__ float SliceDot(const typename T::Values& v,
                                          const float (&x)[T::kRuns][T::kRunLen],
                                          const float (&xsum)[T::kRuns], float acc) {
#pragma unroll
  for (int j = 0; j < T::kRuns; ++j) {
    float qx = 0.0f;
#pragma unroll
    for (int i = 0; i < T::kRunLen; ++i) qx = fmaf(v.q[j][i], x[j][i], qx);
    if constexpr (T::kHasScale) {
      acc = fmaf(v.scale[j], qx, acc);
    } else {
      acc += qx;
    }
    if constexpr (T::kHasOffset) acc = fmaf(v.offset[j], xsum[j], acc);
  }
  return acc;
}

// ---- Host side: picking the decoder --------------------------------------------------------

template <class T>
bool RowsFit(uintptr_t w, int64_t row_bytes, int64_t n) {
  return n % T::kBlockElems == 0 && w % T::kAlign == 0 && row_bytes % T::kAlign == 0;
}

// Calls fn(T{}) with the decoder for ggml type `type` and returns its status: for the float
// types the 16-byte decoder when rows at w, row_bytes apart, of n elements allow it, else the
// one-element one. A type without a decoder is KX_CUDA_ERROR_UNSUPPORTED (an unknown id
// KX_CUDA_ERROR_INVALID_ARGUMENT), with a message naming it and `op`.
template <class Fn>
kx_cuda_status WithDecoder(const char* op, uint32_t type, uintptr_t w, int64_t row_bytes, int64_t n,
                           Fn&& fn) {
  switch (type) {
    case kF32:
      return RowsFit<F32x4>(w, row_bytes, n) ? fn(F32x4{}) : fn(F32x1{});
    case kF16:
      return RowsFit<F16x8>(w, row_bytes, n) ? fn(F16x8{}) : fn(F16x1{});
    case kBF16:
      return RowsFit<BF16x8>(w, row_bytes, n) ? fn(BF16x8{}) : fn(BF16x1{});
    case kQ4_0:
      return fn(Q4_0{});
    case kQ4_1:
      return fn(Q4_1{});
    case kQ5_0:
      return fn(Q5_0{});
    case kQ5_1:
      return fn(Q5_1{});
    case kQ8_0:
      return fn(Q8_0{});
    case kQ4_K:
      return fn(Q4_K{});
    case kQ5_K:
      return fn(Q5_K{});
    case kQ6_K:
      return fn(Q6_K{});
    default:
      break;
  }
  char message[256];
  const char* name = GgmlTypeName(type);
  if (name == nullptr) {
    std::snprintf(message, sizeof message, "%s: %u is not a ggml type id", op, type);
    return RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
  }
  std::snprintf(message, sizeof message,
                "%s: weight type %s (ggml id %u) is not supported (%s are)", op, name, type,
                kSupportedTypes);
  return RecordError(KX_CUDA_ERROR_UNSUPPORTED, message);
}

// Checks that rows of n elements of T at w, row_bytes apart, are whole blocks the decoder can
// load; records the reason and returns false otherwise.
template <class T>
bool CheckRows(const char* op, const char* type_name, uintptr_t w, int64_t row_bytes, int64_t n) {
  char message[256];
  if (n % T::kBlockElems != 0) {
    std::snprintf(message, sizeof message,
                  "%s: n = %lld is not a whole number of %s blocks (%d elements)", op,
                  static_cast<long long>(n), type_name, T::kBlockElems);
  } else if (row_bytes < n / T::kBlockElems * T::kBlockBytes) {
    std::snprintf(message, sizeof message,
                  "%s: row_bytes = %lld is less than the %lld bytes of a row", op,
                  static_cast<long long>(row_bytes),
                  static_cast<long long>(n / T::kBlockElems * T::kBlockBytes));
  } else if (w % T::kAlign != 0 || row_bytes % T::kAlign != 0) {
    std::snprintf(message, sizeof message,
                  "%s: %s rows must start at multiples of %d bytes (w and row_bytes)", op,
                  type_name, T::kAlign);
  } else {
    return true;
  }
  RecordError(KX_CUDA_ERROR_INVALID_ARGUMENT, message);
  return false;
}

}  // namespace kx::cuda::quant
