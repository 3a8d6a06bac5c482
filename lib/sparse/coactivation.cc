#include "sparse/coactivation.h"

#include <dlfcn.h>
#include <dnnl.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>

#include "base/check.h"

namespace kx::sparse {
namespace {

// Tokens unpacked per GEMM call: 1024 tokens × 1536 neurons × 4 B = 6 MiB of
// scratch, large enough that the GEMM's K dimension amortises its packing.
constexpr int64_t kTokenChunk = 1024;

// oneDNN 2.6 on Debian runs on GNU OpenMP and sizes its team from the calling
// thread's omp_get_max_threads(). kx_sparse does not link libgomp itself (it
// comes in only as libdnnl's dependency, so the linker would refuse direct
// references), so the two ICV accessors are looked up in the already-loaded
// runtime. nthreads-var is per thread, so setting it here affects only the
// GEMMs issued by this thread, and it is restored on scope exit.
class OmpThreadCap {
 public:
  explicit OmpThreadCap(int n_threads) {
    using SetFn = void (*)(int);
    using GetFn = int (*)();
    set_ = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (set_ == nullptr || get == nullptr) {
      set_ = nullptr;  // no OpenMP runtime in the process: nothing to cap
      return;
    }
    previous_ = get();
    set_(std::max(1, n_threads));
  }
  ~OmpThreadCap() {
    if (set_ != nullptr) set_(previous_);
  }
  OmpThreadCap(const OmpThreadCap&) = delete;
  OmpThreadCap& operator=(const OmpThreadCap&) = delete;

 private:
  void (*set_)(int) = nullptr;
  int previous_ = 1;
};

// Rows [begin, end) of `a` as 0/1 floats, row-major with n columns.
void UnpackTokens(const ActivityMatrix& a, int64_t begin, int64_t end, float* dst) {
  const int n = a.n_neurons();
  std::fill(dst, dst + (end - begin) * n, 0.0f);
  for (int64_t t = begin; t < end; ++t) {
    const uint64_t* row = a.Row(t);
    float* out = dst + (t - begin) * n;
    for (int w = 0; w < a.words_per_row(); ++w) {
      uint64_t bits = row[w];
      while (bits != 0) {
        const int bit = std::countr_zero(bits);
        const int neuron = w * 64 + bit;
        if (neuron < n) out[neuron] = 1.0f;
        bits &= bits - 1;
      }
    }
  }
}

constexpr char kMagic[8] = {'K', 'X', 'A', 'C', 'T', '\0', '\0', '\1'};
constexpr int64_t kHeaderBytes = 8 + 4 + 4 + 8;

static_assert(std::endian::native == std::endian::little,
              "kxact files are little-endian and written as raw memory");

}  // namespace

Coactivation ComputeCoactivation(const ActivityMatrix& a, int n_threads) {
  KX_CHECK_MSG(a.n_tokens() <= kMaxCoactivationTokens,
               "co-activation counts are float: at most 2^24 tokens");
  Coactivation c;
  c.n = a.n_neurons();
  c.n_tokens = a.n_tokens();
  const int64_t n = c.n;
  c.counts.assign(static_cast<size_t>(n * n), 0.0f);
  if (n == 0 || a.n_tokens() == 0) return c;

  const int64_t chunk = std::min(kTokenChunk, a.n_tokens());
  std::vector<float> unpacked(static_cast<size_t>(chunk * n));
  OmpThreadCap cap(n_threads);
  for (int64_t begin = 0; begin < a.n_tokens(); begin += chunk) {
    const int64_t end = std::min(begin + chunk, a.n_tokens());
    UnpackTokens(a, begin, end, unpacked.data());
    // Row-major C(n×n) += Aᵀ(n×k) · A(k×n) with A stored k×n (lda = n).
    const dnnl_status_t st = dnnl_sgemm('T', 'N', n, n, end - begin, 1.0f, unpacked.data(), n,
                                        unpacked.data(), n, 1.0f, c.counts.data(), n);
    KX_CHECK_MSG(st == dnnl_success, "dnnl_sgemm failed on valid shapes");
  }
  return c;
}

absl::Status WriteActivity(const ActivityMatrix& a, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot open '", path, "' for writing"));
  const uint32_t n_neurons = static_cast<uint32_t>(a.n_neurons());
  const uint32_t words = static_cast<uint32_t>(a.words_per_row());
  const uint64_t n_tokens = static_cast<uint64_t>(a.n_tokens());
  out.write(kMagic, sizeof(kMagic));
  out.write(reinterpret_cast<const char*>(&n_neurons), sizeof(n_neurons));
  out.write(reinterpret_cast<const char*>(&words), sizeof(words));
  out.write(reinterpret_cast<const char*>(&n_tokens), sizeof(n_tokens));
  const int64_t row_bytes = int64_t{words} * 8;
  for (int64_t t = 0; t < a.n_tokens(); ++t) {
    out.write(reinterpret_cast<const char*>(a.Row(t)), row_bytes);
  }
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat("write to '", path, "' failed"));
  return absl::OkStatus();
}

absl::StatusOr<ActivityMatrix> ReadActivity(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open activity file '", path, "'"));
  const int64_t file_bytes = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  if (file_bytes < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is too short (", file_bytes, " bytes) for a kxact header"));
  }
  char magic[8];
  uint32_t n_neurons = 0;
  uint32_t words = 0;
  uint64_t n_tokens = 0;
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&n_neurons), sizeof(n_neurons));
  in.read(reinterpret_cast<char*>(&words), sizeof(words));
  in.read(reinterpret_cast<char*>(&n_tokens), sizeof(n_tokens));
  if (!in) return absl::DataLossError(absl::StrCat("cannot read header of '", path, "'"));
  if (std::memcmp(magic, kMagic, 7) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a kxact activity file"));
  }
  if (magic[7] != kMagic[7]) {
    return absl::UnimplementedError(absl::StrCat("'", path, "' has kxact version ",
                                                 static_cast<int>(magic[7]), ", expected ",
                                                 static_cast<int>(kMagic[7])));
  }
  constexpr uint32_t kMaxNeurons = uint32_t{1} << 30;
  if (n_neurons > kMaxNeurons || words != (n_neurons + 63) / 64) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': inconsistent header (", n_neurons,
                                                   " neurons, ", words, " words per row)"));
  }
  const int64_t row_bytes = int64_t{words} * 8;
  const int64_t payload = file_bytes - kHeaderBytes;
  if (row_bytes == 0
          ? n_tokens != 0
          : (payload % row_bytes != 0 || static_cast<uint64_t>(payload / row_bytes) != n_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': header says ", n_tokens,
                                                   " tokens × ", row_bytes, " bytes but ", payload,
                                                   " payload bytes follow"));
  }
  ActivityMatrix a(static_cast<int64_t>(n_tokens), static_cast<int>(n_neurons));
  for (int64_t t = 0; t < a.n_tokens(); ++t) {
    in.read(reinterpret_cast<char*>(a.MutableRow(t)), row_bytes);
  }
  if (!in) return absl::DataLossError(absl::StrCat("short read from '", path, "'"));
  // Padding bits past the last neuron must be zero, or CountRow would count them.
  if (n_neurons % 64 != 0) {
    const uint64_t pad_mask = ~((uint64_t{1} << (n_neurons % 64)) - 1);
    for (int64_t t = 0; t < a.n_tokens(); ++t) {
      if ((a.Row(t)[words - 1] & pad_mask) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", path, "': token ", t, " has bits set past neuron ", n_neurons));
      }
    }
  }
  return a;
}

}  // namespace kx::sparse
