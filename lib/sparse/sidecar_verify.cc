#include "sparse/sidecar_verify.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace kx::sparse {
namespace {

constexpr char kCacheFileName[] = "sidecar-verified.txt";
constexpr char kCacheHeader[] = "# kairox verified sidecars v1";
constexpr size_t kMaxEntries = 64;
constexpr int64_t kRacyWindowNs = 2'000'000'000;
constexpr uint16_t kF16ExponentMask = 0x7c00;  // all ones: inf or NaN

std::atomic<uint64_t> g_hash_passes{0};

struct Entry {
  FileStamp stamp;
  std::string meta_hex;
};

bool ParseLine(const std::string& line, Entry* out) {
  std::istringstream in(line);
  if (!(in >> out->meta_hex >> out->stamp.size >> out->stamp.mtime_ns >> out->stamp.inode)) {
    return false;
  }
  if (in.get() != ' ') return false;
  std::getline(in, out->stamp.abs_path);
  return !out->stamp.abs_path.empty() && out->stamp.abs_path[0] == '/';
}

std::vector<Entry> Load(const std::string& path) {
  std::vector<Entry> entries;
  std::ifstream in(path);
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Entry e;
    if (ParseLine(line, &e)) entries.push_back(std::move(e));
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

std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::string LayerHashKey(int layer) { return absl::StrCat("blk.", layer, ".kairox.sha256"); }

void LayerDigest::Add(std::string_view name, const void* data, uint64_t bytes) {
  const uint64_t name_len = name.size();
  hasher_.Update(&name_len, sizeof(name_len));
  hasher_.Update(name);
  hasher_.Update(&bytes, sizeof(bytes));
  hasher_.Update(data, bytes);
}

absl::Status CheckF16Finite(const uint16_t* v, uint64_t n, std::string_view name) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, v + i, sizeof(h));
    if ((h & kF16ExponentMask) == kF16ExponentMask) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(name),
                                                     " holds a non-finite value (NaN or inf) at "
                                                     "element ",
                                                     i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckF32Finite(const float* v, uint64_t n, std::string_view name) {
  for (uint64_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, v + i, sizeof(x));
    if (!std::isfinite(x)) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(name), " holds a non-finite value (", x, ") at element ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFrequencies(const float* v, uint64_t n, std::string_view name) {
  for (uint64_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, v + i, sizeof(x));
    if (!(x >= 0.0f && x <= 1.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(name), " element ", i, " is ", x,
                                                     ", outside [0, 1]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FileStamp> StampOf(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
  }
  FileStamp s;
  if (char* resolved = ::realpath(path.c_str(), nullptr); resolved != nullptr) {
    s.abs_path = resolved;
    std::free(resolved);
  }
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  s.inode = static_cast<uint64_t>(st.st_ino);
  return s;
}

std::string VerifiedCachePath() {
  const std::string sha_cache = Sha256CachePath();
  const size_t slash = sha_cache.find_last_of('/');
  if (slash == std::string::npos) return "";
  return sha_cache.substr(0, slash + 1) + kCacheFileName;
}

bool VerifiedCacheContains(const FileStamp& stamp, std::string_view meta_hex) {
  const std::string path = VerifiedCachePath();
  if (path.empty() || stamp.abs_path.empty()) return false;
  std::lock_guard<std::mutex> lock(CacheMutex());
  for (const Entry& e : Load(path)) {
    if (e.stamp == stamp && e.meta_hex == meta_hex) return true;
  }
  return false;
}

void VerifiedCacheAdd(const FileStamp& stamp, std::string_view meta_hex) {
  const std::string path = VerifiedCachePath();
  if (path.empty() || stamp.abs_path.empty() ||
      stamp.abs_path.find('\n') != std::string::npos) {
    return;
  }
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t now_ns = static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  if (stamp.mtime_ns > now_ns - kRacyWindowNs) return;  // too fresh to trust its mtime
  std::lock_guard<std::mutex> lock(CacheMutex());
  std::vector<Entry> kept;
  for (Entry& e : Load(path)) {
    if (e.stamp.abs_path != stamp.abs_path) kept.push_back(std::move(e));
  }
  kept.push_back(Entry{stamp, std::string(meta_hex)});
  if (kept.size() > kMaxEntries) {
    kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(kept.size() - kMaxEntries));
  }
  if (!MakeDirs(path.substr(0, path.find_last_of('/')))) return;
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;
    out << kCacheHeader << '\n';
    for (const Entry& e : kept) {
      out << e.meta_hex << ' ' << e.stamp.size << ' ' << e.stamp.mtime_ns << ' ' << e.stamp.inode
          << ' ' << e.stamp.abs_path << '\n';
    }
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      return;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    Log().debug("verified-sidecar cache {} could not be written", path);
  }
}

uint64_t SidecarHashPasses() { return g_hash_passes.load(); }
void CountSidecarHashPass() { g_hash_passes.fetch_add(1); }

}  // namespace kx::sparse
