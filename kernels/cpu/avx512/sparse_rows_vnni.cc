// AVX-512 VNNI matvec_runs for Q4_1 and Q8_0 (sparse_rows.h; vpdpwssd).
#include "kernels/cpu/avx512/q4_1.h"
#include "kernels/cpu/avx512/q8_0.h"
#include "kernels/cpu/avx512/sparse_rows.h"

namespace kx::cpu::avx512 {

void PutMatvecRunsVnni(MatvecRunsFn* slots, int n_slots) {
  PutMatvecRunsSlot(slots, n_slots, GgmlType::kQ4_1, &RowRunsKernel<Q4_1Wide, true>::MatvecRuns);
  PutMatvecRunsSlot(slots, n_slots, GgmlType::kQ8_0, &RowRunsKernel<Q8_0Wide, true>::MatvecRuns);
}

}  // namespace kx::cpu::avx512
