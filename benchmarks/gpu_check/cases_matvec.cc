// Weight ops over GGUF blocks: matvec (decode's projections and the LM head, one token) and
// dequantize (weights to F16/F32 once, for the prefill GEMMs), at every matrix shape and
// weight type of the model.
#include "benchmarks/gpu_check/cases.h"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/matvec.cuh"

namespace kx::gpu_check {
namespace {

// Output rows the emulator computes per window (three windows; the whole op below 3×).
constexpr int64_t kEmuRows = 64;
constexpr int64_t kSmallEmuRows = 4;

struct Matrix {
  const char* name;  // the model's tensor
  int64_t rows;
  int64_t cols;
  int32_t type;
  bool accumulate;  // matvec adds into y (the projections followed by a residual add)
};

// The model's matrices, as a decode step multiplies them.
std::vector<Matrix> ModelMatrices(const ModelShapes& m) {
  const int64_t q_dim = m.n_head * m.head_dim;
  const int64_t kv_dim = m.n_kv_head * m.head_dim;
  return {
      {"attn_q", q_dim, m.n_embd, m.weight_type, false},
      {"attn_k", kv_dim, m.n_embd, m.weight_type, false},
      {"attn_v", kv_dim, m.n_embd, m.weight_type2, false},
      {"attn_output", m.n_embd, q_dim, m.weight_type, true},
      {"ffn_up", m.n_ff, m.n_embd, m.weight_type, false},
      {"ffn_down", m.n_embd, m.n_ff, m.weight_type2, true},
      {"output", m.n_vocab, m.n_embd, m.output_type, false},
  };
}

std::string MatrixShape(const Matrix& w) {
  return std::string(w.name) + " " + std::to_string(w.rows) + "x" + std::to_string(w.cols);
}

int64_t EmuRows(const CaseConfig& config) { return config.small ? kSmallEmuRows : kEmuRows; }

void AddMatvec(const CaseConfig& config, const Matrix& w, std::mt19937_64& rng,
               std::vector<Case>* cases) {
  Case c;
  c.op = "matvec";
  c.shape = MatrixShape(w) + (w.accumulate ? " +=" : "");
  c.type = TypeName(w.type);
  const uint64_t row_bytes = RowBytes(w.type, w.cols);
  const int wb =
      AddBuffer(&c, "w", Role::kInput, Elem::kU8, RandomWeights(rng, w.type, w.rows, w.cols));
  const int x =
      AddBuffer(&c, "x", Role::kInput, Elem::kF32, AsBytes(RandomFloats(rng, w.cols, kActScale)));
  const int y = w.accumulate ? AddBuffer(&c, "y", Role::kInOut, Elem::kF32,
                                         AsBytes(RandomFloats(rng, w.rows, kActScale)), 1)
                             : AddOutput(&c, "y", Elem::kF32, w.rows, 1);
  const uint32_t type = static_cast<uint32_t>(w.type);
  const int64_t n = w.cols;
  const int32_t accumulate = w.accumulate ? 1 : 0;
  c.launch = [=](void* fn, void* const* buf, RowWindow r, void* stream) {
    kx_cuda_matvec_args a{};
    a.struct_size = sizeof a;
    a.type = type;
    a.w = static_cast<const uint8_t*>(buf[wb]) + static_cast<uint64_t>(r.begin) * row_bytes;
    a.row_bytes = static_cast<int64_t>(row_bytes);
    a.n = n;
    a.rows = r.end - r.begin;
    a.x = static_cast<const float*>(buf[x]);
    a.y = static_cast<float*>(buf[y]) + r.begin;
    a.accumulate = accumulate;
    return reinterpret_cast<decltype(&kx_cuda_matvec)>(fn)(&a, stream);
  };
  // Per-thread then warp sums in a fixed order on both sides; nvcc's FMA contraction of the
  // scale·q + offset terms (the host compiler does not contract) moves each term by an ulp.
  c.tol = DotTolerance(w.cols, kWeightScale * kActScale, 2.0);
  c.n_rows = w.rows;
  c.emu_rows = EmuRows(config);
  c.bytes_moved = static_cast<uint64_t>(w.rows) * row_bytes + static_cast<uint64_t>(w.cols) * 4 +
                  static_cast<uint64_t>(w.rows) * 4 * (w.accumulate ? 2 : 1);
  cases->push_back(std::move(c));
}

void AddDequantize(const CaseConfig& config, const Matrix& w, int32_t dst_type,
                   std::mt19937_64& rng, std::vector<Case>* cases) {
  Case c;
  c.op = "dequantize";
  c.shape = MatrixShape(w);
  c.type = std::string(TypeName(w.type)) + ">" + TypeName(dst_type);
  const uint64_t row_bytes = RowBytes(w.type, w.cols);
  const int src =
      AddBuffer(&c, "src", Role::kInput, Elem::kU8, RandomWeights(rng, w.type, w.rows, w.cols));
  const bool f16 = dst_type == kTypeF16;
  const int dst = AddOutput(&c, "dst", f16 ? Elem::kF16 : Elem::kF32, w.rows * w.cols, w.cols);
  const uint32_t type = static_cast<uint32_t>(w.type);
  const int64_t n = w.cols;
  const size_t dst_elem = f16 ? 2 : 4;
  c.launch = [=](void* fn, void* const* buf, RowWindow r, void* stream) {
    kx_cuda_dequantize_args a{};
    a.struct_size = sizeof a;
    a.type = type;
    a.src = static_cast<const uint8_t*>(buf[src]) + static_cast<uint64_t>(r.begin) * row_bytes;
    a.src_row_bytes = static_cast<int64_t>(row_bytes);
    a.n = n;
    a.rows = r.end - r.begin;
    a.dst_type = static_cast<uint32_t>(dst_type);
    a.dst = static_cast<uint8_t*>(buf[dst]) + static_cast<size_t>(r.begin * n) * dst_elem;
    a.dst_row_stride = n;
    return reinterpret_cast<decltype(&kx_cuda_dequantize)>(fn)(&a, stream);
  };
  // The op's contract: the CPU's dequantized floats bit for bit (then round-to-nearest-even
  // to F16) — no tolerance.
  c.tol = Tolerance{0.0, 0.0};
  c.n_rows = w.rows;
  c.emu_rows = EmuRows(config);
  c.bytes_moved = static_cast<uint64_t>(w.rows) * (row_bytes + static_cast<uint64_t>(n) * dst_elem);
  cases->push_back(std::move(c));
}

}  // namespace

void AddMatvecCases(const CaseConfig& config, std::mt19937_64& rng, std::vector<Case>* cases) {
  const std::vector<Matrix> matrices = ModelMatrices(config.model);
  for (const Matrix& w : matrices) AddMatvec(config, w, rng, cases);
  // Prefill dequantizes each weight type once: F16 for the GEMMs (the FFN's types and the
  // LM head's), F32 once (attn_q) for the other output path.
  for (const Matrix& w : matrices) {
    const std::string name = w.name;
    if (name == "ffn_up" || name == "ffn_down" || name == "output") {
      if (name == "ffn_down" && w.type == config.model.weight_type) continue;  // one per type
      AddDequantize(config, w, kTypeF16, rng, cases);
    } else if (name == "attn_q") {
      AddDequantize(config, w, kTypeF32, rng, cases);
    }
  }
}

}  // namespace kx::gpu_check
