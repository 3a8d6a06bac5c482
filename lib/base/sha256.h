// SHA-256 (FIPS 180-4), written here: no OpenSSL dependency. Used to identify
// a model file, so a sidecar (predictors, neuron order, groups) or a trace can
// say which model it belongs to.
//
// Two compression functions: a portable one (the reference, always built) and
// one using the x86 SHA extensions (SHA-NI), chosen at run time when the CPU
// has them. Both give the same digests (tested).
//
//   kx::Sha256 h;
//   h.Update(data, size);
//   std::array<uint8_t, 32> digest = h.Finish();
//   KX_ASSIGN_OR_RETURN(std::string hex, kx::Sha256FileCached(model_path));
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kx {

// Which compression function a Sha256 uses.
enum class Sha256Impl {
  kAuto,      // SHA-NI when the CPU has it, else portable
  kPortable,  // plain C++ (the reference)
  kShaNi,     // x86 SHA extensions; only valid when Sha256ShaNiAvailable()
};

// True when the CPU (cpuid leaf 7, EBX bit 29) has the SHA extensions and
// SSE4.1, which the SHA-NI path also uses.
bool Sha256ShaNiAvailable();

// The implementation kAuto resolves to on this machine: kShaNi or kPortable.
// KAIROX_SHA256=portable in the environment forces the portable one.
Sha256Impl Sha256DefaultImpl();

const char* Sha256ImplName(Sha256Impl impl);

// Incremental hasher. Not thread-safe; one message per object (Finish() ends
// it; Reset() starts a new one).
class Sha256 {
 public:
  static constexpr size_t kBlockBytes = 64;
  static constexpr size_t kDigestBytes = 32;

  // kShaNi on a CPU without it aborts (KX_CHECK): callers ask
  // Sha256ShaNiAvailable() first.
  explicit Sha256(Sha256Impl impl = Sha256Impl::kAuto);

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Pads, returns the digest and leaves the object needing Reset().
  std::array<uint8_t, kDigestBytes> Finish();
  void Reset();

  Sha256Impl impl() const { return impl_; }

 private:
  using CompressFn = void (*)(uint32_t state[8], const uint8_t* blocks, size_t n_blocks);

  Sha256Impl impl_;
  CompressFn compress_;
  uint32_t state_[8];
  uint8_t buffer_[kBlockBytes];
  size_t buffered_ = 0;       // bytes in buffer_
  uint64_t total_bytes_ = 0;  // message length so far
  bool finished_ = false;
};

// Lowercase hex of a digest (64 characters).
std::string DigestHex(const std::array<uint8_t, Sha256::kDigestBytes>& digest);

// One-shot hash of a buffer, as lowercase hex.
std::string Sha256Hex(const void* data, size_t size, Sha256Impl impl = Sha256Impl::kAuto);
inline std::string Sha256Hex(std::string_view data, Sha256Impl impl = Sha256Impl::kAuto) {
  return Sha256Hex(data.data(), data.size(), impl);
}

// Hashes a whole file, read sequentially in large chunks. NotFound /
// PermissionDenied / Internal (read error) name the path.
absl::StatusOr<std::string> Sha256File(const std::string& path,
                                       Sha256Impl impl = Sha256Impl::kAuto);

// What Sha256FileCached did.
enum class Sha256CacheOutcome {
  kHit,        // the cache had an entry for (path, size, mtime, inode)
  kMiss,       // hashed, and the result stored
  kNotStored,  // hashed, but not stored: the cache could not be written, or the
               // file was modified too recently for its mtime to be trusted
};

// Sha256File with a persistent cache, so that checking a multi-gigabyte model
// against a sidecar does not rehash it on every load. Entries are keyed by
// (absolute path, size, mtime in ns, inode); any change rehashes. The cache
// is a small text file, `sha256-cache.txt`, in KAIROX_CACHE_DIR, else
// $XDG_CACHE_HOME/kairox, else ~/.cache/kairox. A missing, unreadable or
// corrupt cache is ignored (bad lines are dropped); it is rewritten atomically
// (temp file + rename). Errors are only those of hashing the file itself.
// Thread-safe.
absl::StatusOr<std::string> Sha256FileCached(const std::string& path,
                                             Sha256CacheOutcome* outcome = nullptr);

// The cache file Sha256FileCached uses (for tests and diagnostics).
std::string Sha256CachePath();

}  // namespace kx
