// A read-only view of a whole file: memory-mapped (the default) or read into
// an owned buffer (Mode::kRead, for file systems where mapping is slow or
// unavailable, to keep the page cache out of the picture, or for the huge
// pages the buffer asks for: decode streams the weights faster through them). Both modes give
// the same interface. Move-only; unmaps or frees on destruction.
//
//   KX_ASSIGN_OR_RETURN(kx::MappedFile f, kx::MappedFile::Open(path, kx::MappedFile::Mode::kRead));
//   if (absl::Status st = f.Lock(); !st.ok()) kx::Log()->warn("{}", st.message());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace kx {

class MappedFile {
 public:
  enum class Mode {
    kMap,   // mmap read-only, pages loaded on demand
    kRead,  // read() into anonymous memory in 2 MiB (transparent huge) pages
  };
  // Alignment kRead's buffer guarantees at least (a cache line, and enough for
  // any SIMD load of the weights; it is in fact 2 MiB, mmap gives a page).
  static constexpr uint64_t kReadAlignment = 64;
  // kRead's buffer starts at a multiple of this and spans whole ones, zeros
  // past the file's end (the size of an x86 transparent huge page).
  static constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

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

 private:
  void Reset();

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  Mode mode_ = Mode::kMap;
  bool locked_ = false;
};

}  // namespace kx
