// 2 MiB (transparent huge) pages for memory that decode streams: model weights, sidecar
// bundles, the bandwidth probe's buffer.
//
// Why: decode reads every weight once per token, and on 4 KiB pages the matvec kernels stall
// on page walks. Measured (Qwen2.5-Coder 1.5B Q4_K_M, 1 thread, AVX-512 Xeon): tg 10.3 t/s
// with the file's page cache in 4 KiB pages, 12.1–12.4 t/s in 2 MiB ones (docs/performance.md).
//
// Two ways to get them:
//   - anonymous memory: AllocHugePages (MADV_HUGEPAGE on a 2 MiB-aligned range); works
//     wherever THP is not "never";
//   - a file mapping: the page cache itself must hold the file in 2 MiB folios, which Linux
//     does for files it reads on a fault in a MADV_HUGEPAGE mapping when the file system
//     supports large folios (ext4 from Linux 6.16, XFS from 5.18; Debian 12's 6.1 ext4 does
//     not). A file that was just written (a fresh download) sits in the cache in 4 KiB pages
//     and stays so until evicted; MappedFile::Mode::kMapHuge handles that (mapped_file.h).
//
//   uint8_t* p = kx::AllocHugePages(bytes);  ... kx::FreeHugePages(p, bytes);
//   int64_t huge = kx::HugeMappedBytes(ptr);  // of the mapping holding ptr, -1: unknown
#pragma once

#include <cstdint>

namespace kx {

inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// Rounds up to whole 2 MiB pages.
inline uint64_t HugePageRoundUp(uint64_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

// Zero-filled anonymous memory of HugePageRoundUp(bytes) at a 2 MiB-aligned address, marked
// MADV_HUGEPAGE (advisory: where THP is off the pages are small). Null when mmap fails.
uint8_t* AllocHugePages(uint64_t bytes);
void FreeHugePages(const uint8_t* p, uint64_t bytes);

// A 2 MiB-aligned reservation of `bytes` (rounded up) of inaccessible address space, to map a
// file over with MAP_FIXED so its offsets and the addresses agree modulo 2 MiB (a PMD can map
// only such a range). Null when mmap fails. Release with FreeHugePages.
uint8_t* ReserveHugeAligned(uint64_t bytes);

// Whether transparent huge pages can be had at all (the system setting is not "never") and
// are not turned off for kairox (KAIROX_HUGE_PAGES=0 in the environment).
bool TransparentHugePagesAvailable();

// Owned zero-filled memory of `size()` bytes that decode streams (the KV cache): in 2 MiB pages
// (AllocHugePages) from kMinHugeBytes on, where the page walks matter and rounding up to whole
// 2 MiB pages costs little; smaller ones are plain heap memory. Move-only.
class HugeBuffer {
 public:
  static constexpr uint64_t kMinHugeBytes = uint64_t{8} << 20;
  // The bytes `size` bytes take in memory once touched (what a budget must reserve).
  static uint64_t FootprintBytes(uint64_t size) {
    return size >= kMinHugeBytes ? HugePageRoundUp(size) : size;
  }

  HugeBuffer() = default;
  // Null data() (and size 0) when the allocation fails.
  explicit HugeBuffer(uint64_t size);
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool huge() const { return size_ >= kMinHugeBytes; }

 private:
  void Reset();
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Bytes of the mapping that contains `addr` currently mapped by 2 MiB page-table entries
// (/proc/self/smaps: FilePmdMapped for a file, AnonHugePages for anonymous memory); -1 when
// it cannot be read. Parses a /proc file: for load time and benchmarks, not hot paths.
int64_t HugeMappedBytes(const void* addr);

}  // namespace kx
