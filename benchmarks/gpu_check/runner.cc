#include "benchmarks/gpu_check/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/cuda/op_registry.h"

namespace kx::gpu_check {
namespace {

// All-ones bytes: NaN for every float type, -1 for integers.
constexpr uint8_t kPoison = 0xff;
// cudaMalloc's alignment: the emulator's buffers get it too, so a launcher that picks a
// vectorized path by pointer alignment picks the same path on both sides.
constexpr size_t kDeviceAlign = 256;
// Timed batches last about this long, so launch and synchronize overheads amortize.
constexpr double kBatchSeconds = 2e-3;
constexpr int kMaxBatch = 2000;
// Timed launches cycle through copies of a case's buffers adding up to this much: several
// times the L2 of current GPUs (40-50 MB on A100/H100/H200).
constexpr uint64_t kColdBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxSets = 64;

// Host memory aligned like device memory.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n)
      : storage_(new uint8_t[n + kDeviceAlign]),
        data_(storage_.get() +
              (kDeviceAlign - reinterpret_cast<uintptr_t>(storage_.get()) % kDeviceAlign) %
                  kDeviceAlign) {}
  uint8_t* data() const { return data_; }

 private:
  std::unique_ptr<uint8_t[]> storage_;
  uint8_t* data_;
};

bool Compared(Role role) { return role != Role::kInput; }

// Element types whose poison pattern is a NaN (an element never written reads as one).
bool IsFloat(Elem e) {
  return e == Elem::kF32 || e == Elem::kF16 || e == Elem::kBF16 || e == Elem::kQ8_0;
}

constexpr int64_t kQ8_0Elems = 32;

double ElementAt(const uint8_t* p, Elem e, int64_t i) {
  switch (e) {
    case Elem::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case Elem::kF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return HalfToFloat(h);
    }
    case Elem::kBF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      const uint32_t bits = uint32_t{h} << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    case Elem::kI32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case Elem::kU8:
      return p[i];
    case Elem::kQ8_0: {
      const uint8_t* block = p + (i / kQ8_0Elems) * ElemBytes(e);
      uint16_t d;
      std::memcpy(&d, block, 2);
      return static_cast<double>(HalfToFloat(d)) * static_cast<int8_t>(block[2 + i % kQ8_0Elems]);
    }
  }
  return 0.0;
}

bool IsPoison(const uint8_t* p, Elem e, int64_t i) {
  if (e == Elem::kQ8_0) return std::isnan(ElementAt(p, e, i));  // the block's d is poison
  const size_t n = ElemBytes(e);
  for (size_t b = 0; b < n; ++b) {
    if (p[static_cast<size_t>(i) * n + b] != kPoison) return false;
  }
  return true;
}

void Initialize(const Buffer& b, uint8_t* dst) {
  if (b.host.empty()) return;  // a workspace the op does not need (and data() may be null)
  if (b.role == Role::kOutput) {
    std::memset(dst, kPoison, b.host.size());
  } else {
    std::memcpy(dst, b.host.data(), b.host.size());
  }
}

// One copy of a case's buffers in device memory: outputs poisoned, the rest uploaded.
struct GpuSet {
  std::vector<DeviceBuffer> mem;
  std::vector<void*> ptrs;
};

GpuSet UploadSet(const GpuModule& gpu, const Case& c) {
  GpuSet set;
  for (const Buffer& b : c.buffers) {
    set.mem.push_back(gpu.Alloc(b.host.size()));
    if (b.role == Role::kOutput) {
      gpu.Fill(set.mem.back(), kPoison);
    } else {
      gpu.Upload(set.mem.back(), b.host.data(), b.host.size());
    }
    set.ptrs.push_back(set.mem.back().get());
  }
  return set;
}

std::string Describe(const Buffer& b, int64_t i, double got, double want) {
  char text[200];
  std::snprintf(text, sizeof text, "%s[%lld]: got %.9g, want %.9g", b.name.c_str(),
                static_cast<long long>(i), got, want);
  return text;
}

// The self-test's check of the comparison itself: one compared float element of `got` (in
// the middle of the first window of the first float output) set to the poison pattern must
// fail. It catches a window that maps to no elements or an output the comparison skips.
bool NegativeControlFails(const Case& c, const std::vector<RowWindow>& windows, const Outputs& want,
                          Outputs got);

}  // namespace

std::vector<RowWindow> EmulatedWindows(const Case& c) {
  const int64_t e = c.emu_rows;
  if (e <= 0 || c.n_rows <= 3 * e) return {RowWindow{0, c.n_rows}};
  const int64_t mid = (c.n_rows / 2 - e / 2);
  return {RowWindow{0, e}, RowWindow{mid, mid + e}, RowWindow{c.n_rows - e, c.n_rows}};
}

bool RunOnEmulator(const Case& c, void* launcher, const std::vector<RowWindow>& windows,
                   Outputs* out, std::string* error) {
  std::vector<AlignedBytes> mem;
  std::vector<void*> ptrs;
  mem.reserve(c.buffers.size());
  for (const Buffer& b : c.buffers) {
    mem.emplace_back(b.host.size());
    Initialize(b, mem.back().data());
    ptrs.push_back(mem.back().data());
  }
  for (const RowWindow& w : windows) {
    const kx_cuda_status s = c.launch(launcher, ptrs.data(), w, nullptr);
    if (s != KX_CUDA_OK) {
      *error = "emulated launcher returned status " + std::to_string(s);
      return false;
    }
  }
  out->assign(c.buffers.size(), {});
  for (size_t i = 0; i < c.buffers.size(); ++i) {
    if (!Compared(c.buffers[i].role)) continue;
    (*out)[i].assign(mem[i].data(), mem[i].data() + c.buffers[i].host.size());
  }
  return true;
}

bool RunOnGpu(const GpuModule& gpu, const Case& c, void* launcher, int reps, Outputs* out,
              double* seconds, std::string* error) {
  GpuSet first = UploadSet(gpu, c);
  const RowWindow all{0, c.n_rows};
  kx_cuda_status s = c.launch(launcher, first.ptrs.data(), all, nullptr);
  if (s == KX_CUDA_OK) s = gpu.api().synchronize();
  if (s != KX_CUDA_OK) {
    *error = std::string("GPU: ") + gpu.api().last_error();
    return false;
  }
  out->assign(c.buffers.size(), {});
  for (size_t i = 0; i < c.buffers.size(); ++i) {
    if (!Compared(c.buffers[i].role)) continue;
    (*out)[i].resize(c.buffers[i].host.size());
    gpu.Download((*out)[i].data(), first.mem[i], c.buffers[i].host.size());
  }
  *seconds = 0.0;
  if (reps <= 0) return true;

  // Launches rotate over copies of every buffer spanning kColdBytes, so each reads its
  // weights from DRAM as a decode step does, not from the L2 the previous launch filled.
  // In/out buffers keep accumulating while timed: their values no longer matter.
  uint64_t case_bytes = 0;
  for (const Buffer& b : c.buffers) case_bytes += b.host.size();
  const uint64_t n_sets = std::clamp<uint64_t>(
      (kColdBytes + case_bytes - 1) / std::max<uint64_t>(case_bytes, 1), 1, kMaxSets);
  std::vector<GpuSet> sets;
  sets.push_back(std::move(first));
  while (sets.size() < n_sets) sets.push_back(UploadSet(gpu, c));
  gpu.Synchronize();
  using Clock = std::chrono::steady_clock;
  size_t next = 0;
  auto time_batch = [&](int batch) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) {
      gpu.Check(c.launch(launcher, sets[next].ptrs.data(), all, nullptr), c.op.c_str());
      next = (next + 1) % sets.size();
    }
    gpu.Synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  time_batch(static_cast<int>(sets.size()));  // warm-up: clocks, lazy module loading, TLBs
  const double once = time_batch(1);
  const int batch = static_cast<int>(
      std::clamp(kBatchSeconds / std::max(once, 1e-7), 1.0, static_cast<double>(kMaxBatch)));
  std::vector<double> per_launch;
  for (int r = 0; r < reps; ++r) per_launch.push_back(time_batch(batch) / batch);
  *seconds = Median(&per_launch);
  return true;
}

Comparison Compare(const Case& c, const std::vector<RowWindow>& windows, const Outputs& want,
                   const Outputs& got, bool got_whole) {
  Comparison r;
  r.pass = true;
  auto fail = [&](std::string what) {
    if (r.pass) r.detail = std::move(what);
    r.pass = false;
  };
  for (size_t bi = 0; bi < c.buffers.size(); ++bi) {
    const Buffer& b = c.buffers[bi];
    if (!Compared(b.role)) continue;
    const int64_t n = ElemCount(b.elem, b.host.size());
    const uint8_t* g = got[bi].data();
    const uint8_t* w = want[bi].data();
    // Every float element of a whole run's result must have been written.
    if (got_whole && b.role == Role::kOutput && IsFloat(b.elem)) {
      for (int64_t i = 0; i < n; ++i) {
        if (IsPoison(g, b.elem, i)) {
          fail(b.name + "[" + std::to_string(i) + "] never written");
          break;
        }
      }
    }
    std::vector<RowWindow> ranges;
    if (b.elems_per_row > 0) {
      for (const RowWindow& win : windows) {
        ranges.push_back({win.begin * b.elems_per_row, win.end * b.elems_per_row});
      }
    } else {
      ranges.push_back({0, n});
    }
    bool any_nonzero = false;
    for (const RowWindow& range : ranges) {
      for (int64_t i = range.begin; i < std::min(range.end, n); ++i) {
        const double gv = ElementAt(g, b.elem, i);
        const double wv = ElementAt(w, b.elem, i);
        ++r.compared;
        any_nonzero = any_nonzero || wv != 0.0;
        if (std::isnan(wv)) {
          fail("reference " + Describe(b, i, gv, wv) + " (unwritten or NaN)");
          continue;
        }
        const double err = std::fabs(gv - wv);
        if (std::isnan(err)) {
          fail(Describe(b, i, gv, wv));
          continue;
        }
        r.max_abs = std::max(r.max_abs, err);
        if (err > 0.0) r.max_rel = std::max(r.max_rel, err / std::max(std::fabs(wv), c.tol.abs));
        if (!(err <= c.tol.abs + c.tol.rel * std::fabs(wv))) fail(Describe(b, i, gv, wv));
      }
    }
    // Zeros agree with zeros whatever the kernel does: such a case checks nothing.
    if (!any_nonzero) fail(b.name + ": the reference is all zeros (degenerate inputs)");
  }
  return r;
}

CheckRow RunCase(const GpuModule* gpu, const Case& c, int reps) {
  CheckRow row;
  row.op = c.op;
  row.shape = c.shape;
  row.type = c.type;
  row.tol = c.tol;
  row.bytes_moved = c.bytes_moved;
  auto error = [&](std::string what) {
    row.cmp.pass = false;
    row.cmp.detail = std::move(what);
    return row;
  };
  void* emu_launcher = cuda::FindOp(c.op.c_str());
  if (emu_launcher == nullptr) return error("not in the emulator's registry");
  const std::vector<RowWindow> windows = EmulatedWindows(c);
  Outputs want;
  Outputs got;
  std::string message;
  const auto t0 = std::chrono::steady_clock::now();
  if (!RunOnEmulator(c, emu_launcher, windows, &want, &message)) return error(message);
  if (gpu == nullptr) {
    if (!RunOnEmulator(c, emu_launcher, windows, &got, &message)) return error(message);
  }
  row.emu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (gpu != nullptr) {
    void* gpu_launcher = gpu->FindOp(c.op.c_str());
    if (gpu_launcher == nullptr) return error("not in the module (find_op): a stale build?");
    if (!RunOnGpu(*gpu, c, gpu_launcher, reps, &got, &row.seconds, &message)) {
      return error(message);
    }
  }
  row.cmp = Compare(c, windows, want, got, /*got_whole=*/gpu != nullptr);
  if (gpu == nullptr && row.cmp.pass && !NegativeControlFails(c, windows, want, got)) {
    return error("negative control: a poisoned output element passed the comparison");
  }
  return row;
}

namespace {

bool NegativeControlFails(const Case& c, const std::vector<RowWindow>& windows, const Outputs& want,
                          Outputs got) {
  for (size_t bi = 0; bi < c.buffers.size(); ++bi) {
    const Buffer& b = c.buffers[bi];
    if (!Compared(b.role) || !IsFloat(b.elem)) continue;
    const RowWindow& w = windows.front();
    const int64_t per_row = b.elems_per_row > 0 ? b.elems_per_row : 0;
    const int64_t first = per_row > 0 ? w.begin * per_row : 0;
    const int64_t end = per_row > 0 ? w.end * per_row : ElemCount(b.elem, b.host.size());
    const int64_t i = first + (end - first) / 2;
    // Q8_0: the element's block scale (its first two bytes) poisons the element.
    const size_t at = b.elem == Elem::kQ8_0
                          ? static_cast<size_t>(i / kQ8_0Elems) * ElemBytes(b.elem)
                          : static_cast<size_t>(i) * ElemBytes(b.elem);
    std::memset(got[bi].data() + at, kPoison, b.elem == Elem::kQ8_0 ? 2 : ElemBytes(b.elem));
    return !Compare(c, windows, want, got, /*got_whole=*/false).pass;
  }
  return true;  // no float output: nothing this control can poison
}

}  // namespace
}  // namespace kx::gpu_check
