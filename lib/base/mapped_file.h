// A read-only view of a whole file: memory-mapped (the default), mapped in 2 MiB pages where
// the kernel can (Mode::kMapHuge, what models and sidecars use), or read into an owned buffer
// (Mode::kRead, for file systems where mapping is slow or unavailable, to keep the page cache
// out of the picture, or for anonymous huge pages on kernels that cannot map files in them).
// Every mode gives the same interface. Move-only; unmaps or frees on destruction.
//
//   KX_ASSIGN_OR_RETURN(kx::MappedFile f, kx::MappedFile::Open(path, kx::MappedFile::Mode::kRead));
//   if (absl::Status st = f.Lock(); !st.ok()) kx::Log()->warn("{}", st.message());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/huge_pages.h"
#include "base/status.h"

namespace kx {

class MappedFile {
 public:
  enum class Mode {
    kMap,      // mmap read-only, pages loaded on demand
    kMapHuge,  // kMap, in 2 MiB pages where the kernel and the file system can (below)
    kRead,     // read() into anonymous memory in 2 MiB (transparent huge) pages
  };
  // What kMapHuge found (base/huge_pages.h says why it matters). It maps the file at a 2 MiB-
  // aligned address with MADV_HUGEPAGE and reads up to eight 2 MiB windows spread over it:
  //   - each mapped by one 2 MiB entry: kYes;
  //   - one in 4 KiB pages although it was not cached before: the file system cannot (kNo);
  //   - some in 4 KiB pages because the page cache already held them so (a file written
  //     moments ago, a fresh download, or one another program read first): one such window is
  //     dropped from the cache and read again; if that gives a 2 MiB page, the whole file's
  //     cached pages are dropped (posix_fadvise DONTNEED: pages other processes map, and dirty
  //     ones, stay) so that decode's faults read it back in 2 MiB pages — a one-time re-read
  //     from storage, after which the cache keeps the file that way (kYes, recached()); else
  //     kNo.
  // Smaller than two huge pages, with THP off or KAIROX_HUGE_PAGES=0: kNotTried.
  enum class HugePages { kNotTried, kYes, kNo };
  // Alignment kRead's buffer guarantees at least (a cache line, and enough for
  // any SIMD load of the weights; it is in fact 2 MiB, mmap gives a page).
  static constexpr uint64_t kReadAlignment = 64;
  // kRead's buffer (and kMapHuge's mapping) starts at a multiple of this; kRead's spans whole
  // ones, zeros past the file's end (the size of an x86 transparent huge page).
  static constexpr uint64_t kHugePageBytes = kx::kHugePageBytes;

  // Opens `path` in `mode`. An empty file gives size 0 with a null data().
  static absl::StatusOr<MappedFile> Open(const std::string& path, Mode mode = Mode::kMap);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Pins the bytes in RAM (mlock) so they are never paged out. Fails with
  // ResourceExhausted (the message gives RLIMIT_MEMLOCK and how to raise it)
  // or PermissionDenied; the file stays usable either way, so callers usually
  // log the failure as a warning. A no-op for an empty file.
  absl::Status Lock();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Mode mode() const { return mode_; }
  bool locked() const { return locked_; }
  HugePages huge_pages() const { return huge_; }
  // kMapHuge dropped the file's 4 KiB cached pages at Open (see HugePages).
  bool recached() const { return recached_; }

 private:
  void Reset();

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  Mode mode_ = Mode::kMap;
  uint64_t map_bytes_ = 0;  // what Reset unmaps (kMapHuge: the whole 2 MiB-aligned reservation)
  bool locked_ = false;
  HugePages huge_ = HugePages::kNotTried;
  bool recached_ = false;
};

}  // namespace kx
