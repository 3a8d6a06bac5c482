// Scalar axpy_rows (kernels.h) for the legacy quant types and the float
// types: the oracle for the SIMD versions and the fallback for the types they
// do not cover. Row by row, element by element: y[i] += coef·(d·q (+ m)).
#include "kernels/cpu/legacy_quants.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu::ref {
namespace {

template <class L>
void AxpyRowsLegacy(const uint8_t* const* rows, const float* coef, int64_t n_rows, int64_t i0,
                    int64_t i1, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float c = coef[r];
    for (int64_t b = i0 / kQK; b < i1 / kQK; ++b) {
      const uint8_t* p = rows[r] + b * L::kBlockBytes;
      int8_t q[kQK];
      L::Quants(p, q);
      const float d = HalfToFloat(LoadU16(p)), m = L::M(p);
      float* yb = y + b * kQK;
      for (int j = 0; j < kQK; ++j) yb[j] += c * (d * static_cast<float>(q[j]) + m);
    }
  }
}

float DecodeF32At(const uint8_t* p, int64_t i) { return LoadF32(p + 4 * i); }
float DecodeF16At(const uint8_t* p, int64_t i) { return HalfToFloat(LoadU16(p + 2 * i)); }
float DecodeBf16At(const uint8_t* p, int64_t i) { return Bf16ToFloat(LoadU16(p + 2 * i)); }

template <float (*kDecode)(const uint8_t*, int64_t)>
void AxpyRowsFloat(const uint8_t* const* rows, const float* coef, int64_t n_rows, int64_t i0,
                   int64_t i1, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float c = coef[r];
    for (int64_t i = i0; i < i1; ++i) y[i] += c * kDecode(rows[r], i);
  }
}

}  // namespace

void PutAxpyRows(AxpyRowsFn* slots, int n_slots) {
  PutAxpySlot(slots, n_slots, GgmlType::kQ4_0, &AxpyRowsLegacy<Q4_0Layout>);
  PutAxpySlot(slots, n_slots, GgmlType::kQ4_1, &AxpyRowsLegacy<Q4_1Layout>);
  PutAxpySlot(slots, n_slots, GgmlType::kQ5_0, &AxpyRowsLegacy<Q5_0Layout>);
  PutAxpySlot(slots, n_slots, GgmlType::kQ5_1, &AxpyRowsLegacy<Q5_1Layout>);
  PutAxpySlot(slots, n_slots, GgmlType::kQ8_0, &AxpyRowsLegacy<Q8_0Layout>);
  PutAxpySlot(slots, n_slots, GgmlType::kF32, &AxpyRowsFloat<&DecodeF32At>);
  PutAxpySlot(slots, n_slots, GgmlType::kF16, &AxpyRowsFloat<&DecodeF16At>);
  PutAxpySlot(slots, n_slots, GgmlType::kBF16, &AxpyRowsFloat<&DecodeBf16At>);
}

}  // namespace kx::cpu::ref
