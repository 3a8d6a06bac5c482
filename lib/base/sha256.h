// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto (its EVP interface, which
// picks the CPU's accelerated code: SHA-NI, AVX2, ...). Used to identify a
// model file, so a sidecar (predictors, neuron order, groups) or a trace can
// say which model it belongs to. What kairox adds is the digest cache
// (Sha256FileCached), so a multi-gigabyte model is not rehashed on each load.
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

// OpenSSL's EVP_MD_CTX, declared here so that users of this header need no
// OpenSSL headers.
struct evp_md_ctx_st;

namespace kx {

// Incremental hasher. Not thread-safe; one message per object (Finish() ends
// it; Reset() starts a new one).
class Sha256 {
 public:
  static constexpr size_t kBlockBytes = 64;
  static constexpr size_t kDigestBytes = 32;

  // libcrypto failing to set up a SHA-256 context (out of memory) aborts
  // (KX_CHECK): there is no useful way to go on without a hash.
  Sha256();
  ~Sha256();
  // Copies carry the state so far (hash a common prefix once, fork it).
  Sha256(const Sha256& other);
  Sha256& operator=(const Sha256& other);

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Pads, returns the digest and leaves the object needing Reset().
  std::array<uint8_t, kDigestBytes> Finish();
  void Reset();

  // Which libcrypto and provider do the hashing, e.g. "OpenSSL 3.0.11
  // 19 Sep 2023, provider default", for benchmarks and logs.
  static std::string BackendName();

 private:
  evp_md_ctx_st* ctx_;
  bool finished_ = false;
};

// Lowercase hex of a digest (64 characters).
std::string DigestHex(const std::array<uint8_t, Sha256::kDigestBytes>& digest);

// One-shot hash of a buffer, as lowercase hex.
std::string Sha256Hex(const void* data, size_t size);
inline std::string Sha256Hex(std::string_view data) { return Sha256Hex(data.data(), data.size()); }

// Hashes a whole file, read sequentially in large chunks. NotFound /
// PermissionDenied / Internal (read error) name the path.
absl::StatusOr<std::string> Sha256File(const std::string& path);

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
