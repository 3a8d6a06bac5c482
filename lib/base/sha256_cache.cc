// Hashing files, and the on-disk cache that lets a sidecar check its model's
// SHA-256 without rereading gigabytes on every load.
//
// Cache file format (text, one entry per line, newest last):
//   # kairox sha256 cache v1
//   <64 lowercase hex> <size> <mtime_ns> <inode> <absolute path to end of line>
// Lines that do not parse are dropped. Paths containing a newline are never
// cached.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/sha256.h"

namespace kx {
namespace {

// Read size for file hashing: large enough that syscall overhead is noise
// next to hashing (~2 GB/s with SHA-NI), small enough to stay in L2/L3.
constexpr size_t kFileChunkBytes = size_t{1} << 20;

constexpr char kCacheFileName[] = "sha256-cache.txt";
constexpr char kCacheHeader[] = "# kairox sha256 cache v1";
// The cache keeps the most recent entries only; it is a convenience, and a
// user with many models should not grow it without bound.
constexpr size_t kMaxCacheEntries = 256;
// A file whose mtime is this close to "now" may still be written within the
// same mtime tick without its (size, mtime) changing, so its hash is not
// stored ("racy" entries, as git calls them).
constexpr int64_t kRacyWindowNs = 2'000'000'000;
constexpr size_t kHexDigestChars = 2 * Sha256::kDigestBytes;

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

struct FileKey {
  std::string path;  // absolute, symlinks resolved
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;

  bool operator==(const FileKey& o) const {
    return path == o.path && size == o.size && mtime_ns == o.mtime_ns && inode == o.inode;
  }
};

FileKey KeyFromStat(const std::string& abs_path, const struct stat& st) {
  FileKey k;
  k.path = abs_path;
  k.size = static_cast<uint64_t>(st.st_size);
  k.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  k.inode = static_cast<uint64_t>(st.st_ino);
  return k;
}

struct CacheEntry {
  FileKey key;
  std::string hex;
};

// Reads the whole of an open file descriptor into the hasher.
absl::Status HashFd(int fd, const std::string& path, Sha256* hasher) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<uint8_t[]> chunk(new uint8_t[kFileChunkBytes]);
  for (;;) {
    const ssize_t n = ::read(fd, chunk.get(), kFileChunkBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("reading ", path));
    }
    if (n == 0) return absl::OkStatus();
    hasher->Update(chunk.get(), static_cast<size_t>(n));
  }
}

bool IsLowerHex(const std::string& s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *out = v;
  return true;
}

// One line → entry; false for anything malformed.
bool ParseCacheLine(const std::string& line, CacheEntry* out) {
  std::istringstream in(line);
  std::string hex, size, mtime, inode;
  if (!(in >> hex >> size >> mtime >> inode)) return false;
  if (hex.size() != kHexDigestChars || !IsLowerHex(hex)) return false;
  uint64_t mtime_u = 0;
  if (!ParseU64(size, &out->key.size) || !ParseU64(mtime, &mtime_u) ||
      !ParseU64(inode, &out->key.inode)) {
    return false;
  }
  out->key.mtime_ns = static_cast<int64_t>(mtime_u);
  // The path is the rest of the line after exactly one separating space.
  if (in.get() != ' ') return false;
  std::getline(in, out->key.path);
  if (out->key.path.empty() || out->key.path[0] != '/') return false;
  out->hex = hex;
  return true;
}

std::vector<CacheEntry> LoadCache(const std::string& cache_path) {
  std::vector<CacheEntry> entries;
  std::ifstream in(cache_path);
  if (!in) return entries;  // no cache yet, or unreadable: both mean "empty"
  std::string line;
  size_t dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    CacheEntry e;
    if (ParseCacheLine(line, &e)) {
      entries.push_back(std::move(e));
    } else {
      ++dropped;
    }
  }
  if (dropped > 0) {
    Log().debug("sha256 cache {}: ignored {} malformed line(s)", cache_path, dropped);
  }
  return entries;
}

// mkdir -p; true when the directory exists afterwards.
bool MakeDirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !MakeDirs(dir.substr(0, slash))) return false;
  return ::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST;
}

std::string CacheDir() {
  if (const char* d = std::getenv("KAIROX_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/kairox";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/kairox";
  }
  return "";
}

// Writes the entries to a temporary file beside the cache, then renames it
// over the cache, so a reader never sees a half-written file.
bool StoreCache(const std::string& cache_path, const std::vector<CacheEntry>& entries) {
  const size_t slash = cache_path.find_last_of('/');
  if (slash != std::string::npos && !MakeDirs(cache_path.substr(0, slash))) return false;
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(cache_path, ".tmp.", ::getpid(), ".", counter++);
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << kCacheHeader << '\n';
    for (const CacheEntry& e : entries) {
      out << e.hex << ' ' << e.key.size << ' ' << e.key.mtime_ns << ' ' << e.key.inode << ' '
          << e.key.path << '\n';
    }
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      return false;
    }
  }
  if (::rename(tmp.c_str(), cache_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// Serialises the read-modify-write of the cache within this process; two
// processes may still race, and then one entry is lost (rehashed next time).
std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", path));
  Sha256 hasher;
  const absl::Status st = HashFd(fd, path, &hasher);
  ::close(fd);
  KX_RETURN_IF_ERROR(st);
  return DigestHex(hasher.Finish());
}

std::string Sha256CachePath() {
  const std::string dir = CacheDir();
  return dir.empty() ? "" : dir + "/" + kCacheFileName;
}

absl::StatusOr<std::string> Sha256FileCached(const std::string& path, Sha256CacheOutcome* outcome) {
  Sha256CacheOutcome local_outcome;
  Sha256CacheOutcome& result = outcome != nullptr ? *outcome : local_outcome;
  result = Sha256CacheOutcome::kNotStored;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", path));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};

  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoStatus(errno, absl::StrCat("resolving ", path));
  const std::string abs_path(resolved);
  std::free(resolved);

  struct stat before;
  if (::fstat(fd, &before) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(before.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const FileKey key = KeyFromStat(abs_path, before);
  const std::string cache_path = Sha256CachePath();
  const bool cacheable = !cache_path.empty() && abs_path.find('\n') == std::string::npos;

  if (cacheable) {
    std::lock_guard<std::mutex> lock(CacheMutex());
    for (const CacheEntry& e : LoadCache(cache_path)) {
      if (e.key == key) {
        result = Sha256CacheOutcome::kHit;
        return e.hex;
      }
    }
  }

  Sha256 hasher;
  KX_RETURN_IF_ERROR(HashFd(fd, path, &hasher));
  const std::string hex = DigestHex(hasher.Finish());

  struct stat after;
  if (!cacheable || ::fstat(fd, &after) != 0) return hex;
  // Modified while we read it, or so recently that a same-size rewrite within
  // the same mtime tick would go unnoticed: correct now, not safe to store.
  const FileKey key_after = KeyFromStat(abs_path, after);
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);  // mtimes are wall-clock times
  const int64_t now_ns = static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  if (!(key_after == key) || key.mtime_ns > now_ns - kRacyWindowNs) return hex;

  std::lock_guard<std::mutex> lock(CacheMutex());
  std::vector<CacheEntry> entries = LoadCache(cache_path);
  std::vector<CacheEntry> kept;
  kept.reserve(entries.size() + 1);
  for (CacheEntry& e : entries) {
    if (e.key.path != abs_path) kept.push_back(std::move(e));  // stale entries of this path go
  }
  kept.push_back(CacheEntry{key, hex});
  if (kept.size() > kMaxCacheEntries) {
    const auto excess = static_cast<std::ptrdiff_t>(kept.size() - kMaxCacheEntries);
    kept.erase(kept.begin(), kept.begin() + excess);  // the oldest entries
  }
  if (StoreCache(cache_path, kept)) {
    result = Sha256CacheOutcome::kMiss;
  } else {
    Log().debug("sha256 cache {} could not be written; continuing without it", cache_path);
  }
  return hex;
}

}  // namespace kx
