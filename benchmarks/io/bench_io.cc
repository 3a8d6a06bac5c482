// I/O executor microbenchmark: random 24 KiB O_DIRECT reads (one FFN bundle, ~21 KiB, padded
// to the 4 KiB O_DIRECT grain) from a large file at queue depths 1, 4, 16, 64 with each
// backend, keeping `depth` reads in flight (closed loop); prints median GB/s and IOPS over
// repeats, then two ceilings: O_DIRECT sequential 1 MiB reads (the device) and buffered
// sequential read() (the page cache, warm after the first pass). Nothing is dropped from the
// page cache; O_DIRECT bypasses it.
//
// Usage: bench_io [file] [reads_per_run=4000] [repeats=5] [chunk_kib=24]
//   default file: ~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf
//   chunk_kib: the random reads' size, rounded up to the 4 KiB O_DIRECT grain (a 7B bundle of
//   GS 16 is ~143 KB: 140; benchmarks/tier/cgroup_bench.py passes the sidecar's own)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/timer.h"
#include "exec/io_executor.h"

namespace {

uint64_t g_chunk_bytes = 24 * 1024;  // the random reads' size (argv[4])
constexpr uint64_t kSeqChunkBytes = uint64_t{1} << 20;
constexpr int kSeqDepth = 4;
constexpr int kDepths[] = {1, 4, 16, 64};
constexpr uint64_t kSeed = 42;

struct Result {
  double gbps;
  double iops;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Aligned {
  explicit Aligned(uint64_t bytes)
      : p(static_cast<char*>(std::aligned_alloc(kx::kDirectIoAlign, bytes)), &std::free) {
    std::memset(p.get(), 1, bytes);  // touch the pages before timing
  }
  std::unique_ptr<char, decltype(&std::free)> p;
};

// Keeps `depth` reads of `chunk` bytes in flight until `total` reads finished; offsets from
// `next_offset`. Returns seconds.
template <typename NextOffset>
double ClosedLoop(kx::IoExecutor* io, int fd, int depth, int total, uint64_t chunk,
                  NextOffset next_offset, char* arena) {
  std::vector<kx::IoEvent> events(static_cast<size_t>(depth));
  std::vector<kx::IoRead> reads(static_cast<size_t>(depth));
  const kx::Stopwatch watch;
  int issued = 0;
  for (int s = 0; s < depth && issued < total; ++s, ++issued) {
    reads[s] = kx::IoRead{fd, next_offset(), chunk, arena + s * chunk, &events[s]};
    events[s].Add(1);
    io->Submit(kx::IoPriority::kCritical, &reads[s], 1);
  }
  for (int done = 0; done < total; ++done) {
    const size_t s = static_cast<size_t>(done % depth);
    events[s].Wait();
    if (!events[s].status().ok()) {
      std::fprintf(stderr, "read failed: %s\n", events[s].status().ToString().c_str());
      std::exit(1);
    }
    if (issued < total) {
      ++issued;
      events[s].Reset();
      reads[s].offset = next_offset();
      events[s].Add(1);
      io->Submit(kx::IoPriority::kCritical, &reads[s], 1);
    }
  }
  return watch.ElapsedSeconds();
}

Result RandomReads(kx::IoBackend backend, int fd, uint64_t file_bytes, int depth, int reads,
                   int repeats, std::string* name) {
  kx::IoOptions options;
  options.backend = backend;
  options.queue_depth = depth;
  options.pread_threads = depth;
  auto io = kx::IoExecutor::Create(options);
  if (!io.ok()) {
    *name = "unavailable";
    return {0, 0};
  }
  *name = (*io)->backend_name();
  Aligned arena(g_chunk_bytes * static_cast<uint64_t>(depth));
  std::mt19937_64 rng(kSeed);
  const uint64_t slots = (file_bytes - g_chunk_bytes) / kx::kDirectIoAlign;
  auto next = [&] { return rng() % slots * kx::kDirectIoAlign; };
  std::vector<double> gbps, iops;
  for (int r = 0; r < repeats; ++r) {
    const double s = ClosedLoop(io->get(), fd, depth, reads, g_chunk_bytes, next, arena.p.get());
    gbps.push_back(static_cast<double>(reads) * g_chunk_bytes / s * 1e-9);
    iops.push_back(reads / s);
  }
  return {Median(gbps), Median(iops)};
}

double DirectSequential(int fd, uint64_t file_bytes, int repeats) {
  auto io = kx::IoExecutor::Create(kx::IoOptions{});
  if (!io.ok()) return 0;
  Aligned arena(kSeqChunkBytes * kSeqDepth);
  const int total = static_cast<int>(file_bytes / kSeqChunkBytes);
  std::vector<double> gbps;
  for (int r = 0; r < repeats; ++r) {
    uint64_t offset = 0;
    auto next = [&] {
      const uint64_t o = offset;
      offset += kSeqChunkBytes;
      return o;
    };
    const double s = ClosedLoop(io->get(), fd, kSeqDepth, total, kSeqChunkBytes, next,
                                arena.p.get());
    gbps.push_back(static_cast<double>(total) * kSeqChunkBytes / s * 1e-9);
  }
  return Median(gbps);
}

double BufferedSequential(const std::string& path, int repeats) {
  std::vector<char> buf(kSeqChunkBytes);
  std::vector<double> gbps;
  for (int r = 0; r < repeats + 1; ++r) {  // the first pass warms the page cache
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return 0;
    const kx::Stopwatch watch;
    uint64_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(n);
    const double s = watch.ElapsedSeconds();
    close(fd);
    if (r > 0) gbps.push_back(static_cast<double>(total) / s * 1e-9);
  }
  return Median(gbps);
}

}  // namespace

int main(int argc, char** argv) {
  const char* home = std::getenv("HOME");
  const std::string path =
      argc > 1 ? argv[1]
               : std::string(home ? home : ".") +
                     "/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const int reads = argc > 2 ? std::atoi(argv[2]) : 4000;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  if (argc > 4) {
    const long kib = std::atol(argv[4]);
    if (kib <= 0 || kib > 64 * 1024) {
      std::fprintf(stderr, "bench_io: chunk_kib must be in [1, 65536], got '%s'\n", argv[4]);
      return 1;
    }
    g_chunk_bytes = (static_cast<uint64_t>(kib) * 1024 + kx::kDirectIoAlign - 1) /
                    kx::kDirectIoAlign * kx::kDirectIoAlign;
  }
  if (reads <= 0 || repeats <= 0) {
    std::fprintf(stderr, "bench_io: reads_per_run and repeats must be positive\n");
    return 1;
  }
  bool direct = false;
  auto fd = kx::OpenForDirectRead(path, &direct);
  if (!fd.ok()) {
    std::fprintf(stderr, "%s\n", fd.status().ToString().c_str());
    return 1;
  }
  struct stat st {};
  fstat(*fd, &st);
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 2 * kSeqChunkBytes) {
    std::fprintf(stderr, "%s is too small (%llu bytes)\n", path.c_str(),
                 static_cast<unsigned long long>(file_bytes));
    return 1;
  }
  std::printf("file %s (%.1f MiB), O_DIRECT %s, %d reads of %llu KiB per run, median of %d\n",
              path.c_str(), file_bytes / 1048576.0, direct ? "yes" : "NO (page cache)", reads,
              static_cast<unsigned long long>(g_chunk_bytes / 1024), repeats);
  std::printf("%-9s %5s %9s %10s\n", "backend", "depth", "GB/s", "IOPS");
  std::string json = "{\"file\":\"" + path + "\",\"chunk_bytes\":" + std::to_string(g_chunk_bytes) +
                     ",\"random\":[";
  bool first = true;
  for (kx::IoBackend backend : {kx::IoBackend::kPread, kx::IoBackend::kUring}) {
    for (int depth : kDepths) {
      std::string name;
      const Result r = RandomReads(backend, *fd, file_bytes, depth, reads, repeats, &name);
      std::printf("%-9s %5d %9.3f %10.0f\n", name.c_str(), depth, r.gbps, r.iops);
      char item[160];
      std::snprintf(item, sizeof(item), "%s{\"backend\":\"%s\",\"depth\":%d,\"gbps\":%.4f,\"iops\":%.0f}",
                    first ? "" : ",", name.c_str(), depth, r.gbps, r.iops);
      json += item;
      first = false;
    }
  }
  const double seq_direct = DirectSequential(*fd, file_bytes, repeats);
  const double seq_buffered = BufferedSequential(path, repeats);
  std::printf("sequential O_DIRECT 1 MiB x%d (device ceiling): %.3f GB/s\n", kSeqDepth,
              seq_direct);
  std::printf("sequential buffered read() 1 MiB (page cache, warm): %.3f GB/s\n", seq_buffered);
  char tail[160];
  std::snprintf(tail, sizeof(tail), "],\"seq_direct_gbps\":%.4f,\"seq_buffered_gbps\":%.4f}",
                seq_direct, seq_buffered);
  std::printf("%s%s\n", json.c_str(), tail);
  close(*fd);
  return 0;
}
