#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "base/env_flag.h"

namespace kx {
namespace {

// Maps `bytes` + one huge page of `prot` anonymous memory and trims it to a 2 MiB-aligned
// start: the unaligned head and the rest of the tail go back at once.
uint8_t* MapAligned(uint64_t bytes, int prot) {
  const uint64_t len = HugePageRoundUp(bytes);
  void* p = ::mmap(nullptr, len + kHugePageBytes, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<uint8_t*>(p);
  const uint64_t head =
      (kHugePageBytes - reinterpret_cast<uintptr_t>(base) % kHugePageBytes) % kHugePageBytes;
  if (head > 0) ::munmap(base, head);
  ::munmap(base + head + len, kHugePageBytes - head);  // never empty: head < kHugePageBytes
  return base + head;
}

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

}  // namespace

uint8_t* AllocHugePages(uint64_t bytes) {
  uint8_t* buf = MapAligned(bytes, PROT_READ | PROT_WRITE);
  if (buf != nullptr) (void)::madvise(buf, HugePageRoundUp(bytes), MADV_HUGEPAGE);
  return buf;
}

void FreeHugePages(const uint8_t* p, uint64_t bytes) {
  if (p != nullptr) ::munmap(const_cast<uint8_t*>(p), HugePageRoundUp(bytes));
}

HugeBuffer::HugeBuffer(uint64_t size) {
  if (size == 0) return;
  data_ =
      size >= kMinHugeBytes ? AllocHugePages(size) : static_cast<uint8_t*>(std::calloc(size, 1));
  size_ = data_ != nullptr ? size : 0;
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() { Reset(); }

void HugeBuffer::Reset() {
  if (data_ != nullptr) {
    if (huge()) {
      FreeHugePages(data_, size_);
    } else {
      std::free(data_);
    }
  }
  data_ = nullptr;
  size_ = 0;
}

uint8_t* ReserveHugeAligned(uint64_t bytes) { return MapAligned(bytes, PROT_NONE); }

bool TransparentHugePagesAvailable() {
  if (EnvFlag("KAIROX_HUGE_PAGES") == false) return false;
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  if (!std::getline(in, setting)) return false;  // no THP in this kernel
  return setting.find("[never]") == std::string::npos;
}

int64_t HugeMappedBytes(const void* addr) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return -1;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::string line;
  bool inside = false;
  int64_t file_kb = -1, anon_kb = -1;
  while (std::getline(in, line)) {
    // A mapping's header starts with its range in lowercase hex ("7f12…-7f34… r--s …"); its
    // fields ("Rss:", "FilePmdMapped:", …) start with a capital letter.
    if (!line.empty() && IsHex(line[0])) {
      if (inside) break;  // past the mapping's fields
      unsigned long long lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) == 2 && a >= lo && a < hi) {
        inside = true;
      }
      continue;
    }
    if (!inside) continue;
    long long kb = 0;
    if (std::sscanf(line.c_str(), "FilePmdMapped: %lld kB", &kb) == 1) file_kb = kb;
    if (std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kb) == 1) anon_kb = kb;
  }
  if (!inside || (file_kb < 0 && anon_kb < 0)) return -1;
  const int64_t kb = (file_kb > 0 ? file_kb : 0) + (anon_kb > 0 ? anon_kb : 0);
  return kb * 1024;
}

}  // namespace kx
