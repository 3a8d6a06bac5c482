// CPU compute kernels: the only code that touches quantized blocks.
//
// Every weight type has a scalar reference (kernels/cpu/ref/, the test
// oracle and last fallback) and SIMD variants (kernels/cpu/avx2/,
// kernels/cpu/avx512/) compiled with their own flags; one table per ISA is
// chosen at start-up from kx::SelectedIsa() (cpuid, capped by KAIROX_ISA).
//
// Usage (y = W·x for a weight matrix W of `rows` rows of `n` elements):
//   const kx::cpu::KernelTable& k = kx::cpu::Kernels();
//   const kx::cpu::TypeKernels* tk = k.For(kx::GgmlType::kQ4_1);   // null: unsupported
//   std::vector<uint8_t> act(tk->act_bytes(n));
//   tk->quantize_act(x, n, act.data());          // once per op, shared by all rows
//   tk->matvec(W, row_bytes, n, rows, act.data(), y);
// Callers split `rows` across threads by offsetting W and y; each row's
// result does not depend on the split, so output is identical for any
// thread count. Kernels never allocate: callers provide all memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/cpu_features.h"
#include "tensor/dtype.h"

namespace kx::cpu {

// Activation block for the quantized dot products: 32 int16 values q with
// x ≈ d·q, d = max|x|/32767, and s = d·Σq (the block sum, which the min term
// of Q4_1/Q5_1/K-quants needs). 16 bits because 8-bit activations are too
// coarse for models with outlier channels (SmolLM2: cosine 0.969 vs float32,
// 16-bit: > 0.9999). The 32 values are one 512-bit vector, in element order,
// so any weight type's kernels can use them (vpmaddwd / vpdpwssd against
// weights widened to int16).
struct BlockQ16A {
  float d;
  float s;
  int16_t qs[32];
};
static_assert(sizeof(BlockQ16A) == 72);

inline constexpr int kQ16ABlock = 32;

// Kernels for one weight type on one ISA. All sizes n are multiples of the
// type's block size. Pointers need no particular alignment.
struct TypeKernels {
  GgmlType type;
  // Bytes of prepared activations for a vector of n elements.
  size_t (*act_bytes)(int64_t n);
  // Prepares (quantizes, or copies) activations x[n] into dst (act_bytes(n)). Every type's
  // activations are per kQ16ABlock elements, laid end to end: for b and e multiples of 32,
  // preparing x + b over e - b elements (even for a K-quant) writes what preparing all of x
  // writes at [act_bytes(b), act_bytes(e)). The decode graph prepares FFN down's input in
  // pieces on every thread (engine/forward_ops.h, RunGateUpActRange).
  void (*quantize_act)(const float* x, int64_t n, void* dst);
  // y[r] = Σ_i W[r][i]·x[i] for r < rows; row r starts at w + r·row_bytes.
  void (*matvec)(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                 float* y);
  // Batched: y[c·ldy + r] = W[r]·x_c for c < ncols, x_c prepared at act + c·act_stride.
  // Reads each weight row once for all columns (prompt processing).
  void (*matmul)(const void* w, size_t row_bytes, int64_t n, int64_t rows, const void* act,
                 size_t act_stride, int64_t ncols, float* y, int64_t ldy);
  // dst[i] = W[i] for n elements of one row (whole blocks).
  void (*dequantize)(const void* src, float* dst, int64_t n);
};

// Vector kernels used by attention and the element-wise ops.
struct VecKernels {
  // Σ a[i]·b[i], a in F16 (IEEE half bits), b in F32.
  float (*dot_f16_f32)(const uint16_t* a, const float* b, int64_t n);
  // y[i] += alpha·x[i], x in F16.
  void (*axpy_f16)(float alpha, const uint16_t* x, float* y, int64_t n);
  // dst[i] = half(src[i]), round to nearest even.
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
  // Σ a[i]·b[i] in F32.
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // dst[t] = Σ_i rows[t·stride + i]·x[i] for t < n_rows: one query against the
  // F16 keys of one head. Each dst[t] equals dot_f16_f32 of that row.
  void (*dot_f16_rows)(const uint16_t* rows, size_t stride, int64_t n_rows, const float* x,
                       int64_t n, float* dst);
  // y[i] += Σ_t coeff[t]·rows[t·stride + i], rows in order (the same result as
  // n_rows calls of axpy_f16): attention weights times the values of one head.
  void (*axpy_f16_rows)(const float* coeff, const uint16_t* rows, size_t stride, int64_t n_rows,
                        float* y, int64_t n);
  // The Q8_0 KV cache (EngineOptions::KvType::kQ8_0): rows of n elements (n a
  // multiple of 32) as ggml Q8_0 blocks, row t at rows + t·stride_bytes.
  // dst[t] = Σ_blocks d·Σ_j q[j]·x[j] (the scores of one head's keys).
  void (*dot_q8_0_rows)(const uint8_t* rows, size_t stride_bytes, int64_t n_rows, const float* x,
                        int64_t n, float* dst);
  // y[i] += Σ_t coeff[t]·row_t[i], rows in order (the values of one head).
  void (*axpy_q8_0_rows)(const float* coeff, const uint8_t* rows, size_t stride_bytes,
                         int64_t n_rows, float* y, int64_t n);
};

// The decode attention's inner loops over one KV head's cached F16 rows for the g query
// heads that share it (GQA): each K and V row is read and widened once for all of them.
// Head dims up to kAttnMaxHeadDim. Kernels in kernels/cpu/{ref,avx2,avx512}/attention.cc;
// the SIMD ones sum in their own order (not dot_f16_f32's).
inline constexpr int64_t kAttnMaxHeadDim = 512;
inline constexpr int64_t kAttnKeyBlock = 16;  // keys per block of dot_f16_blocked's layout
struct AttnKernels {
  // dst[j·dst_stride + t] = Σ_i K_t[i]·q_j[i] for t < n_rows, j < n_q: K_t = rows + t·stride
  // (elements), q_j = qs + j·n.
  void (*dot_f16)(const uint16_t* rows, size_t stride, int64_t n_rows, const float* qs, int n_q,
                  int64_t n, float* dst, int64_t dst_stride);
  // ys[j·y_stride + i] += Σ_t p[j·p_stride + t]·V_t[i] for i < n, j < n_y, rows in order:
  // V_t = rows + t·stride (elements).
  void (*axpy_f16)(const float* p, int64_t p_stride, const uint16_t* rows, size_t stride,
                   int64_t n_rows, int n_y, int64_t n, float* ys, int64_t y_stride);
  // dot_f16 over keys stored in blocks of kAttnKeyBlock keys, dimension-major (the engine's
  // K cache): element i of key t at blocks[(t / kAttnKeyBlock)·kAttnKeyBlock·n + i·kAttnKeyBlock
  // + t % kAttnKeyBlock]. dst[j·dst_stride + t − key0] for key0 ≤ t < key0 + n_keys, j < n_q;
  // n a multiple of kAttnKeyBlock. Bit for bit dot_f16's result for the same keys in rows (its
  // sums in its order), with the keys in SIMD lanes: no widened copy, no horizontal sums. The
  // other keys of the first and last blocks are read (any finite or not) but not written.
  void (*dot_f16_blocked)(const uint16_t* blocks, int64_t key0, int64_t n_keys, const float* qs,
                          int n_q, int64_t n, float* dst, int64_t dst_stride);
  // x[t] = e^(scale·x[t] − m) for t < n (n ≥ 1), m = max_t scale·x[t] written to *max;
  // returns Σ_t x[t]. The SIMD e^ is within 2 ulp of the correctly rounded value.
  float (*exp_shifted)(float* x, int64_t n, float scale, float* max);
};

// The sparse FFN's down projection over the rows of ffn_down_t (one row per
// kept neuron, wherever its bundle lives): y[i] += Σ_r coef[r]·W_r[i] for i in
// [i0, i1), W_r the row of one weight type starting at rows[r] (element 0).
// i0 and i1 are multiples of the type's block size. Each element's result
// depends only on the rows, the coefficients and its own y, never on [i0, i1),
// so callers split the columns across threads without changing the output.
// Kernels in kernels/cpu/{ref,avx2,avx512}/sparse_axpy.cc.
using AxpyRowsFn = void (*)(const uint8_t* const* rows, const float* coef, int64_t n_rows,
                            int64_t i0, int64_t i1, float* y);

// The sparse FFN's down projection over down blocks (down_blocks.h; the
// bundle layout sparse::DownLayout::kBlocks): a group is one block of 32
// consecutive ffn_down columns (its neurons), kept in the model's own
// quantization for every output row and rearranged by PackDownBlocks. For i
// in [i0, i1) (multiples of kDownBlocksTile):
//   y[i] += Σ_g Σ_j c_g[j]·W_g[i][j],  c_g = coef[32·g .. 32·g + 31]
// with c_g quantized like the dense kernels' activations (QuantizeQ16A), so
// per group and element the arithmetic is the dense Q4_1 × Q16A dot's:
// y = fma(float(Σ q_w·q_c), d_w·d_c, y), then y = fma(m_w, s_c, y). A group
// whose coefficients are all zero is skipped. Each element reads only its own
// row's data, so splitting [i0, i1) across threads does not change y; every
// ISA's kernel gives the same y bit for bit (the scalar one uses std::fma).
using DownBlocksFn = void (*)(const uint8_t* const* parts, const float* coef, int64_t n_groups,
                              int64_t i0, int64_t i1, float* y);

// The sparse FFN's gate/up projection over a list of row runs in address
// order (the predicted rows of the bundles a thread computes): for every run
// with y != null, y[k] = W_k·x for its bytes / row_bytes rows, each row equal
// bit for bit to the same ISA's TypeKernels::matvec of that row. Runs with
// y == null are not computed, only prefetched: the down rows the caller
// reads next. The kernel prefetches a fixed byte distance ahead along the
// list, across run boundaries, so scattered short runs stream like one long
// one; runs[n_runs .. n_runs + n_ahead) continue the list for prefetching
// only (the caller's next call computes them). `prefetched`: bytes at the
// start of the list an earlier call already prefetched (its return value),
// which are not prefetched again. Returns the bytes past runs[n_runs - 1]
// this call prefetched. act is the type's quantize_act output for n elements.
struct RowRun {
  const uint8_t* w;  // first byte of the run
  uint64_t bytes;    // rows·row_bytes (any count for prefetch-only runs)
  float* y;          // one result per row; null: prefetch only
};
using MatvecRunsFn = uint64_t (*)(const RowRun* runs, int64_t n_runs, int64_t n_ahead,
                                  size_t row_bytes, int64_t n, const void* act,
                                  uint64_t prefetched);

struct KernelTable {
  Isa isa;
  VecKernels vec;
  AttnKernels attn;
  // Kernels for `type`, or null if this table cannot compute with it.
  const TypeKernels* For(GgmlType type) const;
  // axpy_rows for `type`, or null (every type QuantizeRow writes has one).
  AxpyRowsFn AxpyRows(GgmlType type) const;
  // matvec_runs for `type`, or null (callers then call matvec per run).
  MatvecRunsFn MatvecRuns(GgmlType type) const;
  // down_blocks for `type`, or null (no kBlocks layout for it: down_blocks.h).
  DownBlocksFn DownBlocks(GgmlType type) const;

  const TypeKernels* types[40];  // indexed by ggml type id; null = unsupported
  AxpyRowsFn axpy_rows[40];      // indexed like types
  MatvecRunsFn matvec_runs[40];  // indexed like types; null = none
  DownBlocksFn down_blocks[40];  // indexed like types; null = none
};

// The table for SelectedIsa(); built once.
const KernelTable& Kernels();

// The table for a specific ISA, or null if it was not compiled in or the CPU
// cannot run it. Tests use this to compare every variant with the scalar one.
const KernelTable* KernelsFor(Isa isa);

// Weight types kairox computes with (on every ISA: the scalar table covers all).
bool IsSupportedWeightType(GgmlType type);

// IEEE half <-> float conversion (scalar, exact; for tests and setup code).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToBf16(float f);  // round to nearest even

}  // namespace kx::cpu
