#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace kx {
namespace {

// Largest single read(): Linux transfers at most about 2 GiB per call anyway.
constexpr uint64_t kMaxReadChunk = uint64_t{1} << 30;
constexpr uint64_t kBytesPerKiB = 1024;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;

// kRead's buffer: anonymous memory in whole 2 MiB pages at a 2 MiB-aligned
// address, marked for transparent huge pages. Why: decode streams every weight
// once per token, and with 4 KiB pages the matvec kernels stall on TLB misses
// (one thread, a Q4_K / Q6_K matvec over 300 MB of copies: 12.7 → 13.3 and
// 10.3–11.5 → 11.9–12.1 GB/s; Qwen2.5 1.5B tg 10–20 % faster; docs/performance.md).
// Where THP is off, madvise fails and the pages are small: nothing else
// changes. The mapping is zero-filled, so the tail past the file is zeros.
constexpr uint64_t kHugePage = MappedFile::kHugePageBytes;

uint64_t HugeRoundUp(uint64_t size) { return (size + kHugePage - 1) / kHugePage * kHugePage; }

uint8_t* AllocHuge(uint64_t size) {
  const uint64_t len = HugeRoundUp(size);
  void* p =
      ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // Trim to a 2 MiB-aligned start: the unaligned head and the rest of the tail
  // go back at once.
  auto* base = static_cast<uint8_t*>(p);
  const uint64_t head = (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
  if (head > 0) ::munmap(base, head);
  ::munmap(base + head + len, kHugePage - head);  // never empty: head < kHugePage
  uint8_t* buf = base + head;
  (void)::madvise(buf, len, MADV_HUGEPAGE);  // advisory (see above)
  return buf;
}

void FreeHuge(const uint8_t* p, uint64_t size) {
  ::munmap(const_cast<uint8_t*>(p), HugeRoundUp(size));
}

// Reads all `size` bytes at offset 0 of `fd` into `dst`, retrying short reads
// and EINTR.
absl::Status ReadAll(int fd, uint8_t* dst, uint64_t size, const std::string& path) {
  uint64_t done = 0;
  while (done < size) {
    const uint64_t want = std::min(size - done, kMaxReadChunk);
    const ssize_t got = ::pread(fd, dst + done, want, static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("reading '", path, "' at byte ", done, " failed: ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("'", path, "' ended at byte ", done, " of ", size,
                                              " (was it truncated while being read?)"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path, Mode mode) {
  // O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise block until a
  // writer appears — forever for `-m some.fifo`. Regular files ignore the flag; anything else
  // is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    auto msg = absl::StrCat("cannot open '", path, "': ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  MappedFile file;
  file.path_ = path;
  file.mode_ = mode;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > 0 && mode == Mode::kMap) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("mmap of '", path, "' failed: ", std::strerror(err)));
    }
    file.data_ = static_cast<const uint8_t*>(p);
    file.size_ = size;
  } else if (size > 0) {
    uint8_t* buf = AllocHuge(size);
    if (buf == nullptr) {
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", size, " bytes to read '", path, "' into memory"));
    }
    file.data_ = buf;  // owned from here: Reset() frees it on any error below
    file.size_ = size;
    if (absl::Status read = ReadAll(fd, buf, size, path); !read.ok()) {
      ::close(fd);
      return read;
    }
  }
  ::close(fd);
  return file;
}

absl::Status MappedFile::Lock() {
  if (locked_ || size_ == 0) return absl::OkStatus();
  if (::mlock(data_, size_) == 0) {
    locked_ = true;
    return absl::OkStatus();
  }
  const int err = errno;
  const double mib = static_cast<double>(size_) / kBytesPerMiB;
  if (err == ENOMEM || err == EAGAIN) {
    struct rlimit lim {};
    std::string limit = "unknown";
    if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
      limit = lim.rlim_cur == RLIM_INFINITY
                  ? std::string("unlimited")
                  : absl::StrCat(static_cast<uint64_t>(lim.rlim_cur) / kBytesPerKiB, " KiB");
    }
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot lock '%s' in memory (%.1f MiB): %s; RLIMIT_MEMLOCK is %s: raise it (ulimit -l, "
        "or memlock in /etc/security/limits.conf)",
        path_, mib, std::strerror(err), limit));
  }
  return absl::PermissionDeniedError(
      absl::StrFormat("cannot lock '%s' in memory (%.1f MiB): %s", path_, mib, std::strerror(err)));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)),
      mode_(other.mode_),
      locked_(std::exchange(other.locked_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
    mode_ = other.mode_;
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) {
    // munmap drops the lock itself.
    if (mode_ == Mode::kMap) {
      ::munmap(const_cast<uint8_t*>(data_), size_);
    } else {
      FreeHuge(data_, size_);
    }
  }
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

}  // namespace kx
