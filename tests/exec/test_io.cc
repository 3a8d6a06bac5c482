// Tests for the I/O executor (lib/exec/io_executor.h) with both backends: data read back
// byte-exact (O_DIRECT and buffered, fixed buffers), many events and callbacks, the priority
// rule, errors (EOF, misaligned O_DIRECT), shutdown with reads queued and in flight.
//
// Run: build/tests/test_io '~[uring]' (pread + common) and build/tests/test_io '[uring]'
// (exits 77 = skipped when io_uring cannot start). The test file (8 MiB, seeded) lives in a
// directory under $KAIROX_BIN_DIR or the working directory, not /tmp (tmpfs has no O_DIRECT).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "exec/io_executor.h"
#include "test_util.h"

namespace kx {
namespace {

constexpr uint64_t kFileBytes = uint64_t{8} << 20;
constexpr uint64_t kPageBytes = kDirectIoAlign;
constexpr uint8_t kPoison = 0xA5;

// The seeded random file, written once per process and removed at exit.
struct TestFile {
  std::string dir;
  std::string path;
  std::vector<uint8_t> bytes;
  ~TestFile() {
    std::remove(path.c_str());
    rmdir(dir.c_str());
  }
};

const TestFile& File() {
  static TestFile* file = [] {
    auto* f = new TestFile;
    // Absolute, so that error messages (which name the file via /proc) can be matched.
    char* base = realpath(test::EnvOr("KAIROX_BIN_DIR", ".").c_str(), nullptr);
    REQUIRE(base != nullptr);
    f->dir = std::string(base) + "/io_test_" + std::to_string(getpid());
    std::free(base);
    mkdir(f->dir.c_str(), 0755);
    f->path = f->dir + "/data.bin";
    std::mt19937_64 rng = test::SeededRng(0x10E0C0DE);
    f->bytes.resize(kFileBytes);
    for (uint64_t i = 0; i < kFileBytes; i += 8) {
      const uint64_t v = rng();
      std::memcpy(&f->bytes[i], &v, sizeof(v));
    }
    FILE* out = std::fopen(f->path.c_str(), "wb");
    REQUIRE(out != nullptr);
    REQUIRE(std::fwrite(f->bytes.data(), 1, kFileBytes, out) == kFileBytes);
    REQUIRE(std::fclose(out) == 0);
    std::atexit([] { delete &const_cast<TestFile&>(File()); });
    return f;
  }();
  return *file;
}

// Page-aligned memory filled with kPoison.
struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t bytes)
      : size((bytes + kPageBytes - 1) / kPageBytes * kPageBytes),
        data(static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, size)), &std::free) {
    std::memset(data.get(), kPoison, size);
  }
  uint64_t size;
  std::unique_ptr<uint8_t, decltype(&std::free)> data;
};

// An fd on the test file, closed at scope exit.
struct Fd {
  explicit Fd(bool want_direct) {
    if (want_direct) {
      absl::StatusOr<int> r = OpenForDirectRead(File().path, &direct);
      REQUIRE(r.ok());
      fd = *r;
    } else {
      fd = open(File().path.c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
    }
  }
  ~Fd() { close(fd); }
  int fd = -1;
  bool direct = false;
};

std::unique_ptr<IoExecutor> MakeExecutor(IoBackend backend, IoOptions options = {}) {
  options.backend = backend;
  absl::StatusOr<std::unique_ptr<IoExecutor>> io = IoExecutor::Create(options);
  if (backend == IoBackend::kUring && !io.ok()) {
    test::Skip("io_uring unavailable here: " + std::string(io.status().message()));
  }
  REQUIRE(io.ok());
  REQUIRE(std::string((*io)->backend_name()) == (backend == IoBackend::kUring ? "io_uring" : "pread"));
  return std::move(*io);
}

bool MatchesFile(const uint8_t* dst, uint64_t offset, uint64_t length) {
  return std::memcmp(dst, File().bytes.data() + offset, length) == 0;
}

bool AllPoison(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (p[i] != kPoison) return false;
  }
  return true;
}

// Random reads into separated slots of one arena (poisoned gaps between them), half critical
// and half background, in batches; checks bytes, the gaps and the statistics.
void RandomReadsMatch(IoBackend backend, bool direct, bool register_arena, uint64_t seed) {
  const Fd fd(direct);
  INFO("O_DIRECT: " << fd.direct << ", fixed buffer: " << register_arena);
  constexpr int kReads = 256;
  constexpr uint64_t kMaxPages = 16;
  constexpr uint64_t kSlotBytes = (kMaxPages + 1) * kPageBytes;  // one poisoned page at least
  AlignedBuffer arena(kReads * kSlotBytes);
  std::unique_ptr<IoExecutor> io = MakeExecutor(backend);
  if (register_arena) REQUIRE(io->RegisterBuffer(arena.data.get(), arena.size).ok());
  std::mt19937_64 rng = test::SeededRng(seed);
  std::vector<IoRead> reads(kReads);
  IoEvent event;
  uint64_t bytes[2] = {0, 0};
  for (int i = 0; i < kReads; ++i) {
    IoRead& r = reads[static_cast<size_t>(i)];
    if (fd.direct) {  // page-aligned offset and length
      r.length = (1 + rng() % kMaxPages) * kPageBytes;
      r.offset = rng() % ((kFileBytes - r.length) / kPageBytes + 1) * kPageBytes;
    } else {  // buffered: any byte offset and length
      r.length = 1 + rng() % (kMaxPages * kPageBytes);
      r.offset = rng() % (kFileBytes - r.length + 1);
    }
    r.fd = fd.fd;
    r.dst = arena.data.get() + static_cast<uint64_t>(i) * kSlotBytes;
    r.event = &event;
    bytes[i % 2] += r.length;
  }
  event.Add(kReads);
  constexpr int kBatch = 32;
  for (int i = 0; i < kReads; i += kBatch) {
    // Even batches critical, odd ones background.
    io->Submit((i / kBatch) % 2 == 0 ? IoPriority::kCritical : IoPriority::kBackground,
               &reads[static_cast<size_t>(i)], kBatch);
  }
  event.Wait();
  REQUIRE(event.done());
  REQUIRE(event.status().ok());
  for (int i = 0; i < kReads; ++i) {
    const IoRead& r = reads[static_cast<size_t>(i)];
    const auto* dst = static_cast<const uint8_t*>(r.dst);
    INFO("read " << i << " offset " << r.offset << " length " << r.length);
    REQUIRE(MatchesFile(dst, r.offset, r.length));
    REQUIRE(AllPoison(dst + r.length, kSlotBytes - r.length));
  }
  const IoStats s = io->stats();
  CHECK(s.critical.ops == kReads / 2);
  CHECK(s.background.ops == kReads / 2);
  CHECK(s.critical.errors + s.background.errors == 0);
  CHECK(s.submit_batches >= 1);
  const uint64_t critical_bytes = s.critical.bytes, background_bytes = s.background.bytes;
  CHECK(critical_bytes + background_bytes == bytes[0] + bytes[1]);
}

// Many events with a few reads each, submitted from two threads; every callback fires once.
void ManyEventsCallbacks(IoBackend backend) {
  const Fd fd(true);
  constexpr int kEvents = 300;
  constexpr int kMaxReadsPerEvent = 6;
  constexpr uint64_t kReadBytes = 2 * kPageBytes;
  struct Group {
    IoEvent event;
    std::atomic<int> calls{0};
    std::vector<IoRead> reads;
  };
  std::vector<Group> groups(kEvents);
  AlignedBuffer arena(uint64_t{kEvents} * kMaxReadsPerEvent * kReadBytes);
  std::mt19937_64 rng = test::SeededRng(77);
  for (int g = 0; g < kEvents; ++g) {
    Group& group = groups[static_cast<size_t>(g)];
    const int n = 1 + static_cast<int>(rng() % kMaxReadsPerEvent);
    for (int k = 0; k < n; ++k) {
      const uint64_t offset = rng() % (kFileBytes / kPageBytes - 1) * kPageBytes;
      uint8_t* dst = arena.data.get() + (uint64_t{static_cast<uint64_t>(g)} * kMaxReadsPerEvent +
                                         static_cast<uint64_t>(k)) * kReadBytes;
      group.reads.push_back(IoRead{fd.fd, offset, kReadBytes, dst, &group.event});
    }
    group.event.SetCallback([](void* ctx) { static_cast<Group*>(ctx)->calls.fetch_add(1); },
                            &group);
    group.event.Add(n);
  }
  IoOptions options;
  options.queue_depth = 8;  // small, so that reads queue up
  options.max_queued = 64;  // small, so that Submit sometimes waits for room
  std::unique_ptr<IoExecutor> io = MakeExecutor(backend, options);
  auto submit_half = [&](int parity) {
    for (int g = parity; g < kEvents; g += 2) {
      Group& group = groups[static_cast<size_t>(g)];
      io->Submit(g % 3 == 0 ? IoPriority::kCritical : IoPriority::kBackground,
                 group.reads.data(), static_cast<int>(group.reads.size()));
    }
  };
  std::thread other(submit_half, 1);
  submit_half(0);
  other.join();
  for (Group& group : groups) group.event.Wait();
  for (int g = 0; g < kEvents; ++g) {
    const Group& group = groups[static_cast<size_t>(g)];
    INFO("event " << g);
    REQUIRE(group.calls.load() == 1);
    REQUIRE(group.event.status().ok());
    for (const IoRead& r : group.reads) {
      REQUIRE(MatchesFile(static_cast<const uint8_t*>(r.dst), r.offset, r.length));
    }
  }
  // Reuse: Reset keeps the callback, which fires once more.
  Group& again = groups[0];
  again.event.Reset();
  again.event.Add(1);
  io->Submit(IoPriority::kCritical, again.reads.data(), 1);
  again.event.Wait();
  REQUIRE(again.calls.load() == 2);
}

// Completion rank of each read in a preemption test.
struct Ranked {
  IoEvent event;
  std::atomic<int>* next_rank = nullptr;
  int rank = -1;
  static void Record(void* ctx) {
    auto* self = static_cast<Ranked*>(ctx);
    self->rank = self->next_rank->fetch_add(1);
  }
};

constexpr int kBacklog = 1000;

// Submits kBacklog background reads while the executor is blocked (a read or a worker held
// until `release` runs), then one critical read, and checks that the critical read completed
// before every queued background read. With `critical_before_release` the critical read must
// complete while the backlog is still held back.
void CheckCriticalFirst(IoExecutor* io, int fd, AlignedBuffer* arena,
                        const std::function<void()>& release, bool critical_before_release) {
  std::atomic<int> next_rank{0};
  std::vector<Ranked> backlog(kBacklog);
  std::vector<IoRead> reads(kBacklog);
  for (int i = 0; i < kBacklog; ++i) {
    Ranked& r = backlog[static_cast<size_t>(i)];
    r.next_rank = &next_rank;
    r.event.SetCallback(&Ranked::Record, &r);
    r.event.Add(1);
    reads[static_cast<size_t>(i)] =
        IoRead{fd, static_cast<uint64_t>(i) * kPageBytes, kPageBytes,
               arena->data.get() + static_cast<uint64_t>(i) * kPageBytes, &r.event};
  }
  io->Submit(IoPriority::kBackground, reads.data(), kBacklog);
  Ranked critical;
  critical.next_rank = &next_rank;
  critical.event.SetCallback(&Ranked::Record, &critical);
  critical.event.Add(1);
  const IoRead critical_read{fd, uint64_t{kBacklog} * kPageBytes, kPageBytes,
                             arena->data.get() + uint64_t{kBacklog} * kPageBytes,
                             &critical.event};
  io->Submit(IoPriority::kCritical, &critical_read, 1);
  if (critical_before_release) {
    critical.event.Wait();
    REQUIRE(critical.rank == 0);
  }
  release();
  critical.event.Wait();
  for (Ranked& r : backlog) r.event.Wait();
  REQUIRE(critical.event.status().ok());
  for (int i = 0; i < kBacklog; ++i) {
    INFO("background read " << i);
    REQUIRE(backlog[static_cast<size_t>(i)].event.status().ok());
    REQUIRE(backlog[static_cast<size_t>(i)].rank > critical.rank);
  }
  REQUIRE(MatchesFile(arena->data.get(), 0, (uint64_t{kBacklog} + 1) * kPageBytes));
}

// Every read in `groups` finished exactly once, OK (with the right bytes) or Cancelled.
struct ShutdownGroup {
  IoEvent event;
  std::atomic<int> calls{0};
  IoRead read{};
};

void ShutdownWithReadsInFlight(IoBackend backend) {
  const Fd fd(true);
  constexpr int kReads = 2000;
  std::vector<ShutdownGroup> groups(kReads);
  AlignedBuffer arena(uint64_t{kReads} * kPageBytes);
  for (int i = 0; i < kReads; ++i) {
    ShutdownGroup& g = groups[static_cast<size_t>(i)];
    g.read = IoRead{fd.fd, static_cast<uint64_t>(i) * kPageBytes, kPageBytes,
                    arena.data.get() + static_cast<uint64_t>(i) * kPageBytes, &g.event};
    g.event.SetCallback([](void* ctx) { static_cast<ShutdownGroup*>(ctx)->calls.fetch_add(1); },
                        &g);
    g.event.Add(1);
  }
  IoOptions options;
  options.queue_depth = 4;
  {
    std::unique_ptr<IoExecutor> io = MakeExecutor(backend, options);
    for (int i = 0; i < kReads; ++i) {
      io->Submit(i % 2 ? IoPriority::kBackground : IoPriority::kCritical,
                 &groups[static_cast<size_t>(i)].read, 1);
    }
    groups[0].event.Wait();  // the executor is busy now: reads are in flight
  }  // destroyed with most reads queued and some in flight
  int ok = 0, cancelled = 0;
  for (int i = 0; i < kReads; ++i) {
    ShutdownGroup& g = groups[static_cast<size_t>(i)];
    INFO("read " << i);
    REQUIRE(g.event.done());
    REQUIRE(g.calls.load() == 1);
    const absl::Status st = g.event.status();
    if (st.ok()) {
      ++ok;
      REQUIRE(MatchesFile(static_cast<const uint8_t*>(g.read.dst), g.read.offset, kPageBytes));
    } else {
      REQUIRE(st.code() == absl::StatusCode::kCancelled);
      ++cancelled;
      REQUIRE(AllPoison(static_cast<const uint8_t*>(g.read.dst), kPageBytes));
    }
  }
  std::fprintf(stderr, "%s shutdown: %d reads done, %d cancelled\n",
               backend == IoBackend::kUring ? "io_uring" : "pread", ok, cancelled);
  REQUIRE(ok + cancelled == kReads);
}

// A read crossing end of file fails with OutOfRange naming the file and offset; one entirely
// inside the file on the same event does not hide it.
void EofIsAnError(IoBackend backend, bool direct) {
  const Fd fd(direct);
  std::unique_ptr<IoExecutor> io = MakeExecutor(backend);
  AlignedBuffer buf(4 * kPageBytes);
  const uint64_t offset = kFileBytes - kPageBytes;
  IoEvent event;
  const IoRead reads[2] = {{fd.fd, offset, 2 * kPageBytes, buf.data.get(), &event},
                           {fd.fd, 0, kPageBytes, buf.data.get() + 2 * kPageBytes, &event}};
  event.Add(2);
  io->Submit(IoPriority::kCritical, reads, 2);
  event.Wait();
  const absl::Status st = event.status();
  INFO(st.ToString());
  REQUIRE(st.code() == absl::StatusCode::kOutOfRange);
  REQUIRE(st.message().find(File().path) != absl::string_view::npos);
  REQUIRE(st.message().find(std::to_string(offset)) != absl::string_view::npos);
  // The part before EOF arrived.
  REQUIRE(MatchesFile(buf.data.get(), offset, kPageBytes));
  REQUIRE(MatchesFile(buf.data.get() + 2 * kPageBytes, 0, kPageBytes));
}

// A misaligned O_DIRECT read fails through its event (the kernel's EINVAL or the debug
// check), with a message about alignment.
void MisalignedDirectIsAnError(IoBackend backend) {
  const Fd fd(true);
  if (!fd.direct) {
    WARN("filesystem has no O_DIRECT: misaligned reads are legal here, nothing to test");
    return;
  }
  std::unique_ptr<IoExecutor> io = MakeExecutor(backend);
  AlignedBuffer buf(2 * kPageBytes);
  IoEvent event;
  const IoRead read{fd.fd, 1, kPageBytes, buf.data.get(), &event};
  event.Add(1);
  io->Submit(IoPriority::kCritical, &read, 1);
  event.Wait();
  const absl::Status st = event.status();
  INFO(st.ToString());
  REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(st.message().find("aligned") != absl::string_view::npos);
  // The kernel's reason once.
  const std::string msg(st.message());
  const size_t first = msg.find("Invalid argument");
  if (first != std::string::npos) {
    REQUIRE(msg.find("Invalid argument", first + 1) == std::string::npos);
  }
}

// ---- cases ----

TEST_CASE("IoEvent counts down, keeps the first error, wakes waiters", "[io]") {
  IoEvent event;
  REQUIRE(event.done());
  event.Wait();  // a fresh event does not block
  event.Add(3);
  REQUIRE_FALSE(event.done());
  std::thread waiter([&] { event.Wait(); });
  event.CompleteOne(absl::OkStatus());
  event.CompleteOne(absl::DataLossError("first"));
  REQUIRE_FALSE(event.done());
  event.CompleteOne(absl::InternalError("second"));
  waiter.join();
  REQUIRE(event.done());
  REQUIRE(event.status().code() == absl::StatusCode::kDataLoss);
  event.Reset();
  REQUIRE(event.done());
  REQUIRE(event.status().ok());
}

TEST_CASE("OpenForDirectRead opens the file", "[io]") {
  bool direct = false;
  absl::StatusOr<int> fd = OpenForDirectRead(File().path, &direct);
  REQUIRE(fd.ok());
  std::fprintf(stderr, "O_DIRECT on %s: %s\n", File().dir.c_str(), direct ? "yes" : "no");
  close(*fd);
  absl::StatusOr<int> missing = OpenForDirectRead(File().dir + "/missing", &direct);
  REQUIRE(missing.status().code() == absl::StatusCode::kNotFound);
  // The reason once (it was printed twice: the message held it and ErrnoToStatus added it).
  const std::string msg(missing.status().message());
  INFO(msg);
  const size_t first = msg.find("No such file or directory");
  REQUIRE(first != std::string::npos);
  REQUIRE(msg.find("No such file or directory", first + 1) == std::string::npos);
  // A FIFO in place of the file is refused at once (a blocking open would hang the test).
  const std::string fifo = File().dir + "/fifo";
  unlink(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  absl::StatusOr<int> not_regular = OpenForDirectRead(fifo, &direct);
  REQUIRE(not_regular.status().code() == absl::StatusCode::kInvalidArgument);
  unlink(fifo.c_str());
}

TEST_CASE("kAuto honours KAIROX_IO=pread; bad options are rejected", "[io]") {
  setenv(kIoBackendEnv, "pread", 1);
  absl::StatusOr<std::unique_ptr<IoExecutor>> io = IoExecutor::Create(IoOptions{});
  unsetenv(kIoBackendEnv);
  REQUIRE(io.ok());
  REQUIRE(std::string((*io)->backend_name()) == "pread");
  IoOptions bad;
  bad.queue_depth = 0;
  REQUIRE(IoExecutor::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("pread: random reads match the file", "[io][pread]") {
  RandomReadsMatch(IoBackend::kPread, /*direct=*/true, /*register_arena=*/false, 1);
  RandomReadsMatch(IoBackend::kPread, /*direct=*/false, /*register_arena=*/false, 2);
}

TEST_CASE("pread: many events, callbacks fire once", "[io][pread]") {
  ManyEventsCallbacks(IoBackend::kPread);
}

TEST_CASE("pread: a critical read overtakes 1000 queued background reads", "[io][pread]") {
  // One worker. The first background read's callback holds the worker (it runs on it) while
  // the backlog and the critical read are queued; the worker's next pick must be critical.
  const Fd fd(true);
  AlignedBuffer arena((uint64_t{kBacklog} + 2) * kPageBytes);
  IoOptions options;
  options.pread_threads = 1;
  std::unique_ptr<IoExecutor> io = MakeExecutor(IoBackend::kPread, options);
  struct Gate {
    std::atomic<int> entered{0};
    std::atomic<int> open{0};
  } gate;
  IoEvent gate_event;
  gate_event.SetCallback(
      [](void* ctx) {
        auto* g = static_cast<Gate*>(ctx);
        g->entered.store(1);
        g->entered.notify_all();
        g->open.wait(0);
      },
      &gate);
  gate_event.Add(1);
  const IoRead gate_read{fd.fd, 0, kPageBytes,
                         arena.data.get() + (uint64_t{kBacklog} + 1) * kPageBytes, &gate_event};
  io->Submit(IoPriority::kBackground, &gate_read, 1);
  gate.entered.wait(0);  // the only worker is now inside the gate's callback
  CheckCriticalFirst(io.get(), fd.fd, &arena, [&] {
    gate.open.store(1);
    gate.open.notify_all();
  }, /*critical_before_release=*/false);
  gate_event.Wait();
}

TEST_CASE("pread: end of file and misaligned O_DIRECT are errors", "[io][pread]") {
  EofIsAnError(IoBackend::kPread, /*direct=*/true);
  EofIsAnError(IoBackend::kPread, /*direct=*/false);
  MisalignedDirectIsAnError(IoBackend::kPread);
}

TEST_CASE("pread: shutdown with reads queued and in flight", "[io][pread]") {
  ShutdownWithReadsInFlight(IoBackend::kPread);
}

// The io_uring cases: the first one skips the program when io_uring cannot start.
TEST_CASE("io_uring: random reads match the file", "[io][uring]") {
  RandomReadsMatch(IoBackend::kUring, /*direct=*/true, /*register_arena=*/false, 3);
  RandomReadsMatch(IoBackend::kUring, /*direct=*/false, /*register_arena=*/false, 4);
  RandomReadsMatch(IoBackend::kUring, /*direct=*/true, /*register_arena=*/true, 5);
}

TEST_CASE("io_uring: many events, callbacks fire once", "[io][uring]") {
  ManyEventsCallbacks(IoBackend::kUring);
}

TEST_CASE("io_uring: a critical read overtakes 1000 queued background reads", "[io][uring]") {
  // max_background_inflight = 1 and a pipe read (blocks in the kernel until written) holds
  // that slot; the backlog cannot start, the critical read must.
  const Fd fd(true);
  AlignedBuffer arena((uint64_t{kBacklog} + 2) * kPageBytes);
  IoOptions options;
  options.max_background_inflight = 1;
  std::unique_ptr<IoExecutor> io = MakeExecutor(IoBackend::kUring, options);
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  constexpr uint64_t kPipeBytes = 8;
  uint8_t* pipe_dst = arena.data.get() + (uint64_t{kBacklog} + 1) * kPageBytes;
  IoEvent pipe_event;
  pipe_event.Add(1);
  const IoRead pipe_read{pipe_fds[0], 0, kPipeBytes, pipe_dst, &pipe_event};
  io->Submit(IoPriority::kBackground, &pipe_read, 1);
  const uint8_t payload[kPipeBytes] = {1, 2, 3, 4, 5, 6, 7, 8};
  CheckCriticalFirst(io.get(), fd.fd, &arena, [&] {
    REQUIRE(write(pipe_fds[1], payload, kPipeBytes) == static_cast<ssize_t>(kPipeBytes));
  }, /*critical_before_release=*/true);
  pipe_event.Wait();
  REQUIRE(pipe_event.status().ok());
  REQUIRE(std::memcmp(pipe_dst, payload, kPipeBytes) == 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST_CASE("io_uring: end of file and misaligned O_DIRECT are errors", "[io][uring]") {
  EofIsAnError(IoBackend::kUring, /*direct=*/true);
  EofIsAnError(IoBackend::kUring, /*direct=*/false);
  MisalignedDirectIsAnError(IoBackend::kUring);
}

TEST_CASE("io_uring: shutdown with reads queued and in flight", "[io][uring]") {
  ShutdownWithReadsInFlight(IoBackend::kUring);
}

}  // namespace
}  // namespace kx
