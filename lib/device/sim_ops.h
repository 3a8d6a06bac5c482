// The sim device's ops: CPU implementations of the CUDA module's named ops, run by the sim
// device on its compute worker with device pointers that are host addresses inside its
// arena. One entry per op, under the same name and with the same argument struct
// (kx_cuda_<op>_args) as kernels/cuda/<op>.cu, so a pipeline written against the Device
// interface runs unchanged on both. The implementations call kernels/cpu where it has the
// kernel; they check what a GPU would fault on (pointers outside live device memory, row
// indices out of range) and return an error instead, which makes the device's error sticky.
//
// Adding an op: write `absl::Status Run<Op>(const void* args, const SimMemory& mem)` in
// sim_ops.cc and add {name, fn, sizeof(args struct)} to the table there.
//
// Usage (inside the sim device):
//   const kx::SimOp* op = kx::FindSimOp("axpy_rows_f16");   // null: unknown
//   absl::Status s = op->run(args, memory);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/status.h"

namespace kx {

// What an op may ask of the device it runs on.
class SimMemory {
 public:
  virtual ~SimMemory() = default;
  // OK when [ptr, ptr + bytes) lies inside one live device allocation; otherwise
  // InvalidArgument "<op>: <arg> ... is not device memory" (a GPU would fault).
  virtual absl::Status CheckDeviceRange(std::string_view op, std::string_view arg, const void* ptr,
                                        uint64_t bytes) const = 0;
  // For inputs that may also be mapped pinned host memory (sparse_ffn_merge's host_partial,
  // which a GPU kernel reads over PCIe): OK inside live device memory or inside one live
  // pinned buffer of the same device (Device::AllocPinned); otherwise InvalidArgument.
  virtual absl::Status CheckMappedRange(std::string_view op, std::string_view arg, const void* ptr,
                                        uint64_t bytes) const {
    return CheckDeviceRange(op, arg, ptr, bytes);
  }
};

using SimOpFn = absl::Status (*)(const void* args, const SimMemory& memory);

struct SimOp {
  std::string_view name;  // the CUDA module's op name
  SimOpFn run;
  size_t args_bytes;  // sizeof(kx_cuda_<op>_args): what Launch copies
};

// The op called `name`, or null.
const SimOp* FindSimOp(std::string_view name);
// The layer ops (rms_norm, add, matvec, rope_store_kv, attention_decode), in
// sim_layer_ops.cc: the CPU engine's own arithmetic, so the sim device matches the CPU path
// bit for bit. FindSimOp and SimOps include them.
std::span<const SimOp> SimLayerOps();
// The sparse FFN's ops (sparse_up_gate, sparse_down_blocks, sparse_down_rows,
// sparse_ffn_merge), in sim_sparse_ops.cc: the CUDA contracts' float arithmetic (no 16-bit
// coefficients) over bundles in device slots. FindSimOp and SimOps include them.
std::span<const SimOp> SimSparseOps();
// Every op, for tests and listings.
std::span<const SimOp> SimOps();

}  // namespace kx
