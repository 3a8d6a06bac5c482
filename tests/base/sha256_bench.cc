// SHA-256 throughput (a program, not a test): in memory and from a file, with
// libcrypto (the implementation kx::Sha256 uses), median of repeats. Usage: sha256_bench [file_mib=100] [repeats=5]
// The file is written to $TMPDIR (or /tmp), read once to warm the page cache,
// and removed; "file" numbers are therefore hashing + read(2) from page cache.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "base/timer.h"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const long mib_arg = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 100;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  if (argc > 3 || mib_arg < 1 || mib_arg > 65536 || repeats < 1 || repeats > 1000) {
    std::fprintf(stderr,
                 "usage: sha256_bench [file_mib: 1..65536, default 100] "
                 "[repeats: 1..1000, default 5]\n");
    return 2;
  }
  const size_t mib = static_cast<size_t>(mib_arg);
  const size_t bytes = mib << 20;
  std::vector<uint8_t> data(bytes);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t r = rng();
    std::copy_n(reinterpret_cast<const uint8_t*>(&r), 8, data.data() + i);
  }
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string path = std::string(tmpdir ? tmpdir : "/tmp") + "/kx_sha256_bench_" +
                           std::to_string(::getpid()) + ".bin";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(bytes));
  }
  const std::string backend = kx::Sha256::BackendName();
  std::printf("| backend | memory MiB/s | file MiB/s | (%zu MiB, median of %d) |\n", mib, repeats);
  std::printf("|---|---|---|---|\n");
  std::vector<double> mem, file;
  std::string digest_mem, digest_file;
  (void)kx::Sha256File(path);  // warm the page cache
  for (int r = 0; r < repeats; ++r) {
    kx::Stopwatch sw;
    digest_mem = kx::Sha256Hex(data.data(), data.size());
    mem.push_back(static_cast<double>(bytes) / kMiB / sw.ElapsedSeconds());
    sw.Reset();
    auto hex = kx::Sha256File(path);
    file.push_back(static_cast<double>(bytes) / kMiB / sw.ElapsedSeconds());
    if (!hex.ok()) {
      std::fprintf(stderr, "%s\n", hex.status().ToString().c_str());
      ::unlink(path.c_str());
      return 1;
    }
    digest_file = *hex;
  }
  if (digest_mem != digest_file) {
    std::fprintf(stderr, "digest mismatch between memory and file\n");
    ::unlink(path.c_str());
    return 1;
  }
  std::printf("| %s | %.0f | %.0f | |\n", backend.c_str(), Median(mem), Median(file));
  std::printf("{\"backend\":\"%s\",\"memory_mib_s\":%.1f,\"file_mib_s\":%.1f}\n",
              backend.c_str(), Median(mem), Median(file));
  ::unlink(path.c_str());
  return 0;
}
