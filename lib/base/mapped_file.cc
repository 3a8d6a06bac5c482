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

// kMapHuge's check of one 2 MiB window in the middle of the file (MappedFile::HugePages).
MappedFile::HugePages ProbeHugePages(int fd, const uint8_t* base, uint64_t size, bool* recached) {
  constexpr uint64_t kPage = 4096;
  const uint64_t w_off = size / 2 / kHugePageBytes * kHugePageBytes;  // + 2 MiB ≤ size
  const uint8_t* w = base + w_off;
  unsigned char resident[kHugePageBytes / kPage];
  uint64_t n_resident = 0;
  if (::mincore(const_cast<uint8_t*>(w), kHugePageBytes, resident) == 0) {
    for (unsigned char r : resident) n_resident += r & 1;
  }
  Populate(w, kHugePageBytes);
  if (HugeMappedBytes(base) > 0) return MappedFile::HugePages::kYes;
  // Read cold through a MADV_HUGEPAGE mapping and still small: the file system cannot.
  if (n_resident == 0) return MappedFile::HugePages::kNo;
  // The cache held the window in 4 KiB pages: drop it and read it again. Dirty pages (a file
  // written moments ago) cannot be dropped: write them back first, as the kernel would soon.
  (void)::sync_file_range(
      fd, static_cast<off_t>(w_off), kHugePageBytes,
      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  (void)::madvise(const_cast<uint8_t*>(w), kHugePageBytes, MADV_DONTNEED);
  (void)::posix_fadvise(fd, static_cast<off_t>(w_off), kHugePageBytes, POSIX_FADV_DONTNEED);
  Populate(w, kHugePageBytes);
  if (HugeMappedBytes(base) <= 0) return MappedFile::HugePages::kNo;
  // It works: drop the rest, so decode's faults read the file back in 2 MiB pages.
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
