// AVX-512 VNNI + VBMI matvec_runs: Q4_1 with the permute decode of
// q4_1_vbmi.cc (the table's matvec on such CPUs), Q8_0 as with VNNI.
#include "kernels/cpu/avx512/q4_1.h"
#include "kernels/cpu/avx512/q8_0.h"
#include "kernels/cpu/avx512/sparse_rows.h"

namespace kx::cpu::avx512 {

void PutMatvecRunsVbmi(MatvecRunsFn* slots, int n_slots) {
  PutMatvecRunsSlot(slots, n_slots, GgmlType::kQ4_1,
                    &RowRunsKernel<Q4_1WideVbmi, true>::MatvecRuns);
  PutMatvecRunsSlot(slots, n_slots, GgmlType::kQ8_0, &RowRunsKernel<Q8_0Wide, true>::MatvecRuns);
}

}  // namespace kx::cpu::avx512
