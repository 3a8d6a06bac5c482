// Assembles one KernelTable per ISA from the per-type kernel objects and
// picks the one SelectedIsa() names. ISA levels nest (VNNI ⊃ AVX-512 ⊃ AVX2 ⊃
// scalar), so a level runs wherever the CPU's best level is at least it.
#include "base/check.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/sparse_internal.h"

namespace kx::cpu {
namespace {

constexpr int kTypeSlots =
    static_cast<int>(sizeof(KernelTable::types) / sizeof(KernelTable::types[0]));

void Put(KernelTable* t, const TypeKernels& k) {
  const auto id = static_cast<uint32_t>(k.type);
  KX_CHECK(id < static_cast<uint32_t>(kTypeSlots));
  t->types[id] = &k;
}

KernelTable MakeScalar() {
  KernelTable t{};
  t.isa = Isa::kScalar;
  t.vec = ref::kVec;
  t.attn = ref::kAttn;
  for (const TypeKernels* k : {&ref::kQ4_1, &ref::kQ8_0, &ref::kF16, &ref::kBF16, &ref::kF32}) {
    Put(&t, *k);
  }
#define KX_PUT(T) Put(&t, ref::k##T);
  KX_CPU_NEW_TYPES(KX_PUT)
#undef KX_PUT
  ref::PutAxpyRows(t.axpy_rows, kTypeSlots);
  ref::PutDownBlocks(t.down_blocks, kTypeSlots);
  return t;
}

KernelTable MakeAvx2() {
  KernelTable t{};
  t.isa = Isa::kAvx2;
  t.vec = avx2::kVec;
  t.attn = avx2::kAttn;
  for (const TypeKernels* k :
       {&avx2::kQ4_1, &avx2::kQ8_0, &avx2::kF16, &avx2::kBF16, &avx2::kF32}) {
    Put(&t, *k);
  }
#define KX_PUT(T) Put(&t, avx2::k##T);
  KX_CPU_NEW_TYPES(KX_PUT)
#undef KX_PUT
  ref::PutAxpyRows(t.axpy_rows, kTypeSlots);
  avx2::PutAxpyRows(t.axpy_rows, kTypeSlots);
  ref::PutDownBlocks(t.down_blocks, kTypeSlots);
  avx2::PutDownBlocks(t.down_blocks, kTypeSlots);
  return t;
}

KernelTable MakeAvx512(bool vnni) {
  KernelTable t{};
  t.isa = vnni ? Isa::kAvx512Vnni : Isa::kAvx512;
  t.vec = avx512::kVec;
  t.attn = avx512::kAttn;
  // VBMI is not part of any Isa level (Cascade Lake has VNNI without it).
  const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  Put(&t, !vnni ? avx512::kQ4_1 : vbmi ? avx512::kQ4_1VnniVbmi : avx512::kQ4_1Vnni);
  Put(&t, vnni ? avx512::kQ8_0Vnni : avx512::kQ8_0);
  for (const TypeKernels* k : {&avx512::kF16, &avx512::kBF16, &avx512::kF32}) Put(&t, *k);
  // K-quants: Q2_K, Q3_K one set for both levels (internal.h says why).
  for (const TypeKernels* k : {&avx512::kQ2_K, &avx512::kQ3_K}) Put(&t, *k);
  Put(&t, vnni ? avx512::kQ4_KVnni : avx512::kQ4_K);
  Put(&t, vnni ? avx512::kQ5_KVnni : avx512::kQ5_K);
  Put(&t, vnni ? avx512::kQ6_KVnni : avx512::kQ6_K);
  Put(&t, vnni ? avx512::kQ4_0Vnni : avx512::kQ4_0);
  Put(&t, vnni ? avx512::kQ5_0Vnni : avx512::kQ5_0);
  Put(&t, vnni ? avx512::kQ5_1Vnni : avx512::kQ5_1);
  ref::PutAxpyRows(t.axpy_rows, kTypeSlots);
  avx512::PutAxpyRows(t.axpy_rows, kTypeSlots);
  avx512::PutMatvecRuns(t.matvec_runs, kTypeSlots, vnni, vbmi);
  ref::PutDownBlocks(t.down_blocks, kTypeSlots);
  avx512::PutDownBlocks(t.down_blocks, kTypeSlots, vnni);
  return t;
}

}  // namespace

const TypeKernels* KernelTable::For(GgmlType type) const {
  const auto id = static_cast<uint32_t>(type);
  return id < static_cast<uint32_t>(kTypeSlots) ? types[id] : nullptr;
}

AxpyRowsFn KernelTable::AxpyRows(GgmlType type) const {
  const auto id = static_cast<uint32_t>(type);
  return id < static_cast<uint32_t>(kTypeSlots) ? axpy_rows[id] : nullptr;
}

MatvecRunsFn KernelTable::MatvecRuns(GgmlType type) const {
  const auto id = static_cast<uint32_t>(type);
  return id < static_cast<uint32_t>(kTypeSlots) ? matvec_runs[id] : nullptr;
}

DownBlocksFn KernelTable::DownBlocks(GgmlType type) const {
  const auto id = static_cast<uint32_t>(type);
  return id < static_cast<uint32_t>(kTypeSlots) ? down_blocks[id] : nullptr;
}

const KernelTable* KernelsFor(Isa isa) {
  static const KernelTable kScalar = MakeScalar();
  static const KernelTable kAvx2 = MakeAvx2();
  static const KernelTable kAvx512 = MakeAvx512(false);
  static const KernelTable kAvx512Vnni = MakeAvx512(true);
  if (static_cast<int>(isa) > static_cast<int>(GetCpuFeatures().BestIsa())) return nullptr;
  switch (isa) {
    case Isa::kScalar:
      return &kScalar;
    case Isa::kAvx2:
      return &kAvx2;
    case Isa::kAvx512:
      return &kAvx512;
    case Isa::kAvx512Vnni:
      return &kAvx512Vnni;
  }
  return nullptr;
}

const KernelTable& Kernels() {
  static const KernelTable* const selected = [] {
    const KernelTable* t = KernelsFor(SelectedIsa());
    KX_CHECK_MSG(t != nullptr, "no kernel table for the selected ISA");
    return t;
  }();
  return *selected;
}

bool IsSupportedWeightType(GgmlType type) { return KernelsFor(Isa::kScalar)->For(type) != nullptr; }

}  // namespace kx::cpu
