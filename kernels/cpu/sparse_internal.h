// Shared by the sparse-FFN kernel sources and dispatch.cc (not a public
// header): each ISA fills the axpy_rows slots it implements, indexed by ggml
// type id. dispatch.cc fills the scalar ones first and lets each SIMD level
// overwrite the types it has, so every table covers every type.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace kx::cpu {

namespace ref {
void PutAxpyRows(AxpyRowsFn* slots, int n_slots);
void PutDownBlocks(DownBlocksFn* slots, int n_slots);
}  // namespace ref
namespace avx2 {
void PutAxpyRows(AxpyRowsFn* slots, int n_slots);
void PutDownBlocks(DownBlocksFn* slots, int n_slots);
}  // namespace avx2
namespace avx512 {
void PutAxpyRows(AxpyRowsFn* slots, int n_slots);
// down_blocks slots (sparse_down_blocks*.cc): vpdpwssd where vnni.
void PutDownBlocks(DownBlocksFn* slots, int n_slots, bool vnni);
void PutDownBlocksBase(DownBlocksFn* slots, int n_slots);
void PutDownBlocksVnni(DownBlocksFn* slots, int n_slots);
// matvec_runs slots (sparse_rows*.cc): the variant for the table's level
// (vnni) and, with VNNI, for CPUs with VBMI.
void PutMatvecRuns(MatvecRunsFn* slots, int n_slots, bool vnni, bool vbmi);
// Per-variant fillers, one per source file (each compiled with its flags).
void PutMatvecRunsBase(MatvecRunsFn* slots, int n_slots);
void PutMatvecRunsVnni(MatvecRunsFn* slots, int n_slots);
void PutMatvecRunsVbmi(MatvecRunsFn* slots, int n_slots);
}  // namespace avx512

// Stores fn at type's slot (shared by the three Put functions).
inline void PutAxpySlot(AxpyRowsFn* slots, int n_slots, GgmlType type, AxpyRowsFn fn) {
  const auto id = static_cast<int>(type);
  if (id >= 0 && id < n_slots) slots[id] = fn;
}

// Stores fn at type's slot of any per-type kernel array.
template <class Fn>
inline void PutSlot(Fn* slots, int n_slots, GgmlType type, Fn fn) {
  const auto id = static_cast<int>(type);
  if (id >= 0 && id < n_slots) slots[id] = fn;
}

inline void PutMatvecRunsSlot(MatvecRunsFn* slots, int n_slots, GgmlType type, MatvecRunsFn fn) {
  const auto id = static_cast<int>(type);
  if (id >= 0 && id < n_slots) slots[id] = fn;
}

}  // namespace kx::cpu
