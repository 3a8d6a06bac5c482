// AVX-512 (no VNNI) matvec_runs for Q4_1 and Q8_0 (sparse_rows.h), and the
// choice between the variants of the other sparse_rows*.cc files.
#include "kernels/cpu/avx512/q4_1.h"
#include "kernels/cpu/avx512/q8_0.h"
#include "kernels/cpu/avx512/sparse_rows.h"

namespace kx::cpu::avx512 {

void PutMatvecRunsBase(MatvecRunsFn* slots, int n_slots) {
  PutMatvecRunsSlot(slots, n_slots, GgmlType::kQ4_1, &RowRunsKernel<Q4_1Wide, false>::MatvecRuns);
  PutMatvecRunsSlot(slots, n_slots, GgmlType::kQ8_0, &RowRunsKernel<Q8_0Wide, false>::MatvecRuns);
}

void PutMatvecRuns(MatvecRunsFn* slots, int n_slots, bool vnni, bool vbmi) {
  if (!vnni) {
    PutMatvecRunsBase(slots, n_slots);
  } else if (vbmi) {
    PutMatvecRunsVbmi(slots, n_slots);
  } else {
    PutMatvecRunsVnni(slots, n_slots);
  }
}

}  // namespace kx::cpu::avx512
