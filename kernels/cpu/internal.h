// Shared by the kernel sources only (not a public header): ggml block
// layouts, scalar helpers every ISA's tails use, and the per-ISA kernel
// objects that dispatch.cc assembles into KernelTables.
//
// Adding a weight type: write ref/<type>.cc (the oracle), declare its
// TypeKernels below, list it in dispatch.cc, then add SIMD versions per ISA
// directory and swap them in; tests/kernels picks up every table entry.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace kx::cpu {

inline constexpr int kQK = 32;  // elements per legacy ggml quant block

// ggml's block_q4_1: x = d·q + m, q in 0..15; qs[j] holds element j in its
// low nibble and element j+16 in its high nibble.
struct BlockQ4_1 {
  uint16_t d;  // IEEE half
  uint16_t m;  // IEEE half
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// ggml's block_q8_0: x = d·q, q in -128..127 (ggml's quantizer emits only
// -127..127, but a file may hold -128; every kernel handles it).
struct BlockQ8_0 {
  uint16_t d;  // IEEE half
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// ggml's block_q4_0: x = d·(q − 8), q in 0..15, nibbles as in Q4_1.
struct BlockQ4_0 {
  uint16_t d;  // IEEE half
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// ggml's block_q5_0: x = d·(q − 16), q = nibble | (bit j of qh) << 4 for
// element j (nibbles as in Q4_1; qh little-endian).
struct BlockQ5_0 {
  uint16_t d;  // IEEE half
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// ggml's block_q5_1: x = d·q + m, q as in Q5_0 without the offset.
struct BlockQ5_1 {
  uint16_t d;  // IEEE half
  uint16_t m;  // IEEE half
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Largest |q| the activation quantizer emits. Never -32768: vpmaddwd
// overflows only for a pair of (-32768)·(-32768) products, which then cannot
// occur whatever the weights.
inline constexpr int kQ16AMax = 32767;

// Unaligned little-endian loads (blocks sit at any byte offset in a GGUF).
inline uint16_t LoadU16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float LoadF32(const void* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Round half to even for |x| < 2^22 without libm: adding 1.5·2^23 forces
// the FPU's default rounding at the integer position. Matches the SIMD
// cvtps2dq (round-to-nearest-even) bit for bit.
inline float RoundHalfEven(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;          // not reassociated: no -ffast-math anywhere
}

// K-quant and legacy-quant (Q4_0, Q5_0, Q5_1, Q8_0) matmuls on at least this
// many columns run kernels/cpu/kquant_gemm.h / legacy_gemm.h (rows in vector
// lanes; their weight decode is repaid from about 8 columns on), fewer the
// matvec tiles: the two sum in different orders.
inline constexpr int64_t kGemmMinCols = 8;

// BlockQ16A activation preparation (shared by every ISA so that all tables
// produce byte-identical activations; it is O(n), the matvec is O(rows·n)).
size_t Q16AActBytes(int64_t n);
void QuantizeQ16A(const float* x, int64_t n, void* dst);
// F32 "activations" for the float weight types: a plain copy.
size_t F32ActBytes(int64_t n);
void CopyF32Act(const float* x, int64_t n, void* dst);

// Per-ISA kernel objects (constant-initialized; defined in <isa>/<type>.cc).
namespace ref {
extern const TypeKernels kQ4_1;
extern const TypeKernels kQ8_0;
extern const TypeKernels kF16;
extern const TypeKernels kBF16;
extern const TypeKernels kF32;
extern const VecKernels kVec;
extern const AttnKernels kAttn;
void DequantizeQ4_1(const void* src, float* dst, int64_t n);
void DequantizeQ8_0(const void* src, float* dst, int64_t n);
void DequantizeF32(const void* src, float* dst, int64_t n);
void DequantizeF16(const void* src, float* dst, int64_t n);
void DequantizeBF16(const void* src, float* dst, int64_t n);
}  // namespace ref

// Weight types added for issue 3: kernels in <isa>/legacy_quants*.cc and
// <isa>/kquants.cc, block layouts in kernels/cpu/legacy_quants.h and
// kernels/cpu/kquants.h. The AVX-512 VNNI table takes the AVX-512 Q2_K and
// Q3_K kernels: they scale every 32-element block's int32 sums in float (the
// activations' d differs per block), so vpdpwssd would only replace vpmaddwd;
// Q4_K, Q5_K and Q6_K run in lane order (avx512/kquant_lanes.h), where it
// replaces two instructions with one (Q4_K and Q5_K go further, on bytes:
// avx512/kquant_lanes_vnni.h), so they have VNNI versions.
#define KX_CPU_NEW_TYPES(X) X(Q4_0) X(Q5_0) X(Q5_1) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K)
#define KX_CPU_DECLARE_KERNELS(T) extern const TypeKernels k##T;
namespace ref {
KX_CPU_NEW_TYPES(KX_CPU_DECLARE_KERNELS)
void DequantizeQ4_0(const void* src, float* dst, int64_t n);
void DequantizeQ5_0(const void* src, float* dst, int64_t n);
void DequantizeQ5_1(const void* src, float* dst, int64_t n);
void DequantizeQ2_K(const void* src, float* dst, int64_t n);
void DequantizeQ3_K(const void* src, float* dst, int64_t n);
void DequantizeQ4_K(const void* src, float* dst, int64_t n);
void DequantizeQ5_K(const void* src, float* dst, int64_t n);
void DequantizeQ6_K(const void* src, float* dst, int64_t n);
}  // namespace ref
namespace avx2 {
KX_CPU_NEW_TYPES(KX_CPU_DECLARE_KERNELS)
}  // namespace avx2
namespace avx512 {
KX_CPU_NEW_TYPES(KX_CPU_DECLARE_KERNELS)
extern const TypeKernels kQ4_0Vnni;
extern const TypeKernels kQ5_0Vnni;
extern const TypeKernels kQ5_1Vnni;
extern const TypeKernels kQ4_KVnni;
extern const TypeKernels kQ5_KVnni;
extern const TypeKernels kQ6_KVnni;
}  // namespace avx512
#undef KX_CPU_DECLARE_KERNELS

namespace avx2 {
extern const TypeKernels kQ4_1;
extern const TypeKernels kQ8_0;
extern const TypeKernels kF16;
extern const TypeKernels kBF16;
extern const TypeKernels kF32;
extern const VecKernels kVec;
extern const AttnKernels kAttn;
}  // namespace avx2

namespace avx512 {
extern const TypeKernels kQ4_1;
extern const TypeKernels kQ8_0;
extern const TypeKernels kQ4_1Vnni;
extern const TypeKernels kQ8_0Vnni;
extern const TypeKernels kQ4_1VnniVbmi;  // needs AVX512_VBMI on top of VNNI
extern const TypeKernels kF16;
extern const TypeKernels kBF16;
extern const TypeKernels kF32;
extern const VecKernels kVec;
extern const AttnKernels kAttn;
}  // namespace avx512

}  // namespace kx::cpu
