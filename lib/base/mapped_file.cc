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

#include "base/huge_pages.h"

namespace kx {
namespace {

// Largest single read(): Linux transfers at most about 2 GiB per call anyway.
constexpr uint64_t kMaxReadChunk = uint64_t{1} << 30;
constexpr uint64_t kBytesPerKiB = 1024;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;

// Decode streams every weight once per token, and with 4 KiB pages the matvec kernels stall on
// page walks: kRead's buffer is anonymous memory in 2 MiB pages, kMapHuge maps the file so
// the page cache's 2 MiB folios can be mapped whole (base/huge_pages.h has the measurements).
// Where THP is off, madvise fails and the pages are small: nothing else changes.

// Faults in [p, p + bytes) of a mapping: MADV_POPULATE_READ (Linux 5.14), else one read per
// 4 KiB page.
void Populate(const uint8_t* p, uint64_t bytes) {
  constexpr int kMadvPopulateRead = 22;  // MADV_POPULATE_READ, absent from older headers
  if (::madvise(const_cast<uint8_t*>(p), bytes, kMadvPopulateRead) == 0) return;
  constexpr uint64_t kSmallPage = 4096;
  volatile uint8_t sink = 0;
  for (uint64_t i = 0; i < bytes; i += kSmallPage) sink = sink + p[i];
}

// Pages of `w` (2 MiB) the page cache holds.
uint64_t ResidentPages(const uint8_t* w) {
  constexpr uint64_t kPage = 4096;
  unsigned char resident[kHugePageBytes / kPage];
  uint64_t n = 0;
  if (::mincore(const_cast<uint8_t*>(w), kHugePageBytes, resident) == 0) {
    for (unsigned char r : resident) n += r & 1;
  }
  return n;
}

// Drops the window at `off` from the page cache (and this mapping) and reads it again.
// Dirty pages (a file written moments ago) cannot be dropped: written back first, as the
// kernel would soon.
void Recache(int fd, const uint8_t* base, uint64_t off) {
  (void)::sync_file_range(
      fd, static_cast<off_t>(off), kHugePageBytes,
      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  (void)::madvise(const_cast<uint8_t*>(base + off), kHugePageBytes, MADV_DONTNEED);
  (void)::posix_fadvise(fd, static_cast<off_t>(off), kHugePageBytes, POSIX_FADV_DONTNEED);
  Populate(base + off, kHugePageBytes);
}

// kMapHuge's check (MappedFile::HugePages) on up to kWindows 2 MiB windows spread over the
// file: a cache filled by several readers (another program's 4 KiB mapping, a partial
// reclaim) can hold one part in 2 MiB folios and another in 4 KiB pages.
MappedFile::HugePages ProbeHugePages(int fd, const uint8_t* base, uint64_t size, bool* recached) {
  constexpr uint64_t kWindows = 8;
  const uint64_t n_huge = size / kHugePageBytes;  // ≥ 2: whole windows inside the file
  const uint64_t n_win = std::min(kWindows, n_huge);
  int64_t huge_before = HugeMappedBytes(base);
  if (huge_before < 0) return MappedFile::HugePages::kNo;  // smaps unreadable: cannot tell
  int64_t small_cached = -1;                               // a window cached in 4 KiB pages
  for (uint64_t i = 0; i < n_win; ++i) {
    const uint64_t off = (n_huge * (2 * i + 1) / (2 * n_win)) * kHugePageBytes;
    const uint64_t resident = ResidentPages(base + off);
    Populate(base + off, kHugePageBytes);
    const int64_t huge_after = HugeMappedBytes(base);
    if (huge_after > huge_before) {
      huge_before = huge_after;
      continue;
    }
    // Read cold through a MADV_HUGEPAGE mapping and still small: the file system cannot.
    if (resident == 0) return MappedFile::HugePages::kNo;
    if (small_cached < 0) small_cached = static_cast<int64_t>(off);
  }
  if (small_cached < 0) return MappedFile::HugePages::kYes;
  // Some of it is cached in 4 KiB pages: does a re-read give 2 MiB ones?
  Recache(fd, base, static_cast<uint64_t>(small_cached));
  if (HugeMappedBytes(base) <= huge_before) return MappedFile::HugePages::kNo;
  // It does: drop the whole file, so decode's faults read it back in 2 MiB pages (pages
  // another process maps stay, and so do their sizes).
  (void)::madvise(const_cast<uint8_t*>(base), size, MADV_DONTNEED);
  (void)::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  *recached = true;
  return MappedFile::HugePages::kYes;
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
  const bool huge =
      mode == Mode::kMapHuge && size >= 2 * kHugePageBytes && TransparentHugePagesAvailable();
  if (size > 0 && mode != Mode::kRead) {
    // kMapHuge: over a 2 MiB-aligned reservation, so file offsets and addresses agree modulo
    // 2 MiB (a 2 MiB page-table entry maps only such a range).
    uint8_t* reserved = huge ? ReserveHugeAligned(size) : nullptr;
    void* p = reserved != nullptr
                  ? ::mmap(reserved, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0)
                  : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      FreeHugePages(reserved, size);
      ::close(fd);
      return absl::InternalError(absl::StrCat("mmap of '", path, "' failed: ", std::strerror(err)));
    }
    file.data_ = static_cast<const uint8_t*>(p);
    file.size_ = size;
    file.map_bytes_ = reserved != nullptr ? HugePageRoundUp(size) : size;
    if (reserved != nullptr) {
      (void)::madvise(p, size, MADV_HUGEPAGE);  // advisory
      file.huge_ = ProbeHugePages(fd, file.data_, size, &file.recached_);
    }
  } else if (size > 0) {
    uint8_t* buf = AllocHugePages(size);
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
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      locked_(std::exchange(other.locked_, false)),
      huge_(other.huge_),
      recached_(other.recached_) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
    mode_ = other.mode_;
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    locked_ = std::exchange(other.locked_, false);
    huge_ = other.huge_;
    recached_ = other.recached_;
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) {
    // munmap drops the lock itself.
    if (mode_ == Mode::kRead) {
      FreeHugePages(data_, size_);
    } else {
      ::munmap(const_cast<uint8_t*>(data_), map_bytes_);
    }
  }
  data_ = nullptr;
  size_ = 0;
  map_bytes_ = 0;
  locked_ = false;
}

}  // namespace kx
