// One check case of kairox-gpu-check: an op of the CUDA module, its inputs and how to compare.
//
// A case is data: host buffers (inputs, outputs, in/outs) and a launch function that builds
// the op's argument struct from buffer pointers — host pointers under the emulator, device
// pointers on the GPU — and calls the op's launcher (found by name in either registry). The
// runner (runner.h) does the rest: poison outputs, run, compare, time.
//
// Row windows: the emulator runs each CUDA thread as a host thread, so a model-sized op
// (Qwen's 151936-row LM head) would take minutes there. An op whose output rows are
// independent says so (n_rows, emu_rows): the emulator then computes a few windows of rows
// (first, middle, last) with the same kernel, and the GPU's full output is compared on those
// rows (and checked everywhere for unwritten elements).
//
// Usage (a family file, e.g. cases_axpy.cc):
//   Case c;
//   c.op = "axpy_rows_f16"; c.shape = "576x1536"; c.type = "f16";
//   const int w = AddBuffer(&c, "w", Role::kInput, Elem::kF16, RandomHalves(rng, n));
//   c.launch = [=](void* fn, void* const* buf, RowWindow rows, void* stream) { ... };
//   cases->push_back(std::move(c));
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_api.h"

namespace kx::gpu_check {

// Element types of compared buffers (inputs may use any; only the byte count matters).
// kQ8_0: ggml Q8_0 blocks (f16 d, 32 int8 q), compared as their values d·q.
enum class Elem { kF32, kF16, kBF16, kI32, kU8, kQ8_0 };
// Bytes of one element (of one block for kQ8_0) and elements in `bytes`.
size_t ElemBytes(Elem e);
int64_t ElemCount(Elem e, size_t bytes);

enum class Role {
  kInput,   // uploaded once, never compared
  kOutput,  // poisoned (all-ones bytes: NaN for floats) before every run, then compared
  kInOut,   // restored from `host` before every run (accumulating ops), then compared
};

struct Buffer {
  std::string name;
  Role role = Role::kInput;
  Elem elem = Elem::kU8;
  std::vector<uint8_t> host;  // initial contents; an output's size
  // Outputs: elements per case row, rows stored one after another (0: not windowed — the
  // whole buffer is compared).
  int64_t elems_per_row = 0;
};

// |got - want| <= abs + rel * |want| for every element (NaN never passes).
struct Tolerance {
  double abs = 0.0;
  double rel = 0.0;
};

// Output rows [begin, end) of an op whose rows are independent.
struct RowWindow {
  int64_t begin = 0;
  int64_t end = 0;
};

// Builds the op's args from `buffers` (one pointer per Case::buffers entry, same order),
// restricted to `rows` (the whole op when rows covers [0, n_rows)), and calls `launcher`
// (the op's kx_cuda_<op> from the emulator's registry or the module's find_op).
using LaunchFn = std::function<kx_cuda_status(void* launcher, void* const* buffers, RowWindow rows,
                                              void* stream)>;

struct Case {
  std::string op;     // the registry name (op_registry.h)
  std::string shape;  // for the table: "1536x576", "9h x 64 x 512 pos"
  std::string type;   // weight or data type: "Q4_1", "f32"
  std::vector<Buffer> buffers;
  LaunchFn launch;
  Tolerance tol;
  int64_t n_rows = 1;    // independent output rows
  int64_t emu_rows = 0;  // rows per emulated window; 0 = the emulator runs the whole op
  // Bytes the op must move at least (weights read once, activations, outputs written): the
  // numerator of GB/s. Counted by the case from the op's contract, not measured.
  uint64_t bytes_moved = 0;
};

// Appends a buffer; returns its index (the position of its pointer in LaunchFn's array).
int AddBuffer(Case* c, std::string name, Role role, Elem elem, std::vector<uint8_t> host,
              int64_t elems_per_row = 0);
// An output of `n` elements (contents are poison at run time).
int AddOutput(Case* c, std::string name, Elem elem, int64_t n, int64_t elems_per_row = 0);

// The largest |value| of `v` (for tolerances).
double MaxAbs(const std::vector<float>& v);

// Shapes of the model a run checks (decode: one token unless a case says otherwise).
struct ModelShapes {
  std::string name;
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t n_vocab = 0;
  int32_t weight_type = 0;   // ggml type id of the layers' matrices
  int32_t weight_type2 = 0;  // a second layer type the model mixes in (Q6_K in Q4_K_M); or = 1st
  int32_t output_type = 0;   // LM head / tied embeddings
  int64_t n_ctx = 0;         // KV positions the attention cases attend over
  bool qkv_bias = false;     // Q/K/V projections carry biases (Qwen2)
  bool rope_neox = false;    // RoPE pairs (i, i + d/2) (Qwen2), else adjacent (llama GGUFs)
  double rope_base = 0.0;
  float norm_eps = 0.0f;
};

ModelShapes SmolLm2Shapes();
ModelShapes Qwen15bShapes();
// The same families of shapes scaled down for the emulator-only self-test.
ModelShapes SmallShapes();

// What a family of cases is built from.
struct CaseConfig {
  ModelShapes model;
  bool small = false;  // reduced shapes and emulator windows (the self-test)
  uint64_t seed = 0;
};

// Adds one family's cases (cases_<family>.cc). Each name the ops it covers.
using CaseFamily = void (*)(const CaseConfig& config, std::mt19937_64& rng,
                            std::vector<Case>* cases);

// ---- Random inputs (seeded; never all zeros) ----------------------------------------------

// F16 bits <-> float (round to nearest even), written out so nothing here needs CUDA headers.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n, float scale);
std::vector<uint16_t> RandomHalves(std::mt19937_64& rng, int64_t n, float scale);

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

// Tolerance of a float dot product of k terms whose magnitudes are about `term` each, when
// the two sides may sum in different orders, contract multiply-adds differently (nvcc fuses
// by default, the host compiler does not) and use different reduction trees:
//   abs = 16·2^-24·k·term   (k roundings of partial sums about sqrt(k)·term in size, whose
//                            errors add up like a random walk: sqrt(k) of them)
//   rel = 16·2^-24·sqrt(k)
// `slack` widens both where a case's error compounds (a product of two such sums, split
// reductions whose shape follows the SM count). A real bug (a wrong scale, block or row)
// moves results by whole terms, orders of magnitude more.
Tolerance DotTolerance(int64_t k, double term, double slack = 1.0);

}  // namespace kx::gpu_check
