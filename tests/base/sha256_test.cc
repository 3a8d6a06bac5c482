// SHA-256 (libcrypto underneath): NIST vectors, chunked updates against
// one-shot, copies and Reset, file hashing, and the digest cache (hit, miss,
// invalidation, corrupt cache file).
#include "base/sha256.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "test_util.h"

namespace {

std::vector<uint8_t> RandomBytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// A fresh temporary directory, removed (files and all) at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kx_sha256_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Sets a file's mtime to `seconds_ago` in the past (the cache refuses files
// modified in the last two seconds).
void SetMtimeAgo(const std::string& path, int64_t seconds_ago, long nsec) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds_ago;
  times[0].tv_nsec = nsec;
  times[1] = times[0];
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

// Sets KAIROX_CACHE_DIR for the scope of a test.
struct CacheDirEnv {
  explicit CacheDirEnv(const std::string& dir) { ::setenv("KAIROX_CACHE_DIR", dir.c_str(), 1); }
  ~CacheDirEnv() { ::unsetenv("KAIROX_CACHE_DIR"); }
};

}  // namespace

TEST_CASE("SHA-256 NIST vectors", "[sha256]") {
  const std::string million_a(1000000, 'a');
  struct Vector {
    std::string msg;
    const char* hex;
  };
  const Vector vectors[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      // 448 bits: padding needs a second block.
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      // 896 bits.
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
       "opqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {million_a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const Vector& v : vectors) {
    INFO("message of " << v.msg.size() << " bytes");
    CHECK(kx::Sha256Hex(v.msg) == v.hex);
  }
  // The million 'a's fed in uneven pieces.
  kx::Sha256 h;
  for (size_t off = 0; off < million_a.size(); off += 4099) {
    h.Update(million_a.data() + off, std::min<size_t>(4099, million_a.size() - off));
  }
  CHECK(kx::DigestHex(h.Finish()) == vectors[4].hex);
  CHECK_FALSE(kx::Sha256::BackendName().empty());
}

TEST_CASE("SHA-256 chunked updates equal one-shot at every split point", "[sha256]") {
  auto rng = kx::test::SeededRng(4242);
  // 3 blocks + a tail: splits cross block boundaries and land inside the buffer.
  const std::vector<uint8_t> msg = RandomBytes(rng, 3 * 64 + 27);
  const std::string one_shot = kx::Sha256Hex(msg.data(), msg.size());
  for (size_t a = 0; a <= msg.size(); ++a) {
    for (size_t b = a; b <= msg.size(); b += 7) {  // three pieces: [0,a) [a,b) [b,n)
      kx::Sha256 h;
      h.Update(msg.data(), a);
      h.Update(msg.data() + a, b - a);
      h.Update(msg.data() + b, msg.size() - b);
      const std::string got = kx::DigestHex(h.Finish());
      if (got != one_shot) FAIL("split at " << a << ", " << b);
    }
  }
  // Byte by byte, and Reset() reuses the object.
  kx::Sha256 h;
  h.Update("garbage", 7);
  (void)h.Finish();
  h.Reset();
  for (uint8_t byte : msg) h.Update(&byte, 1);
  CHECK(kx::DigestHex(h.Finish()) == one_shot);
}

TEST_CASE("SHA-256 copies fork the state; assignment replaces it", "[sha256]") {
  kx::Sha256 prefix;
  prefix.Update("abcdbcdecdefdefgefghfghighijhijk");
  kx::Sha256 fork(prefix);
  prefix.Update("ijkljklmklmnlmnomnopnopq");
  fork.Update("ijkljklmklmnlmnomnopnopq");
  const std::string want = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
  CHECK(kx::DigestHex(prefix.Finish()) == want);
  CHECK(kx::DigestHex(fork.Finish()) == want);
  kx::Sha256 other;
  other.Update("ab");
  kx::Sha256 target;
  target.Update("unrelated bytes");
  target = other;
  target.Update("c");
  CHECK(kx::DigestHex(target.Finish()) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("Sha256File hashes whole files and names missing ones", "[sha256]") {
  auto rng = kx::test::SeededRng(7);
  TempDir dir;
  // Sizes below, at and above the 1 MiB read chunk.
  for (size_t n : {size_t{0}, size_t{1}, size_t{64}, size_t{1} << 20, (size_t{1} << 20) + 65,
                   (size_t{3} << 20) + 5}) {
    const std::vector<uint8_t> bytes = RandomBytes(rng, n);
    const std::string path = dir.path + "/f" + std::to_string(n);
    WriteFile(path, bytes);
    auto hex = kx::Sha256File(path);
    REQUIRE(hex.ok());
    CHECK(*hex == kx::Sha256Hex(bytes.data(), bytes.size()));
  }
  auto missing = kx::Sha256File(dir.path + "/nope");
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find("nope") != std::string::npos);
}

TEST_CASE("Sha256FileCached: miss, hit, invalidation on touch and rewrite", "[sha256][cache]") {
  auto rng = kx::test::SeededRng(11);
  TempDir dir;
  CacheDirEnv env(dir.path + "/cache");  // does not exist yet: created on first store
  REQUIRE(kx::Sha256CachePath() == dir.path + "/cache/sha256-cache.txt");

  const std::string path = dir.path + "/model.bin";
  std::vector<uint8_t> bytes = RandomBytes(rng, 100000);
  WriteFile(path, bytes);
  const std::string truth = kx::Sha256Hex(bytes.data(), bytes.size());

  // Just written: too recent to trust the mtime, so hashed but not stored.
  kx::Sha256CacheOutcome outcome;
  auto hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth);
  CHECK(outcome == kx::Sha256CacheOutcome::kNotStored);

  SetMtimeAgo(path, 100, 123456789);
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth);
  CHECK(outcome == kx::Sha256CacheOutcome::kMiss);

  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth);
  CHECK(outcome == kx::Sha256CacheOutcome::kHit);

  // A relative path to the same file hits the same entry.
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof(cwd)) != nullptr);
  REQUIRE(::chdir(dir.path.c_str()) == 0);
  hex = kx::Sha256FileCached("./model.bin", &outcome);
  REQUIRE(::chdir(cwd) == 0);
  REQUIRE(hex.ok());
  CHECK(outcome == kx::Sha256CacheOutcome::kHit);

  // Touch (same bytes, new mtime): rehashed, same digest.
  SetMtimeAgo(path, 50, 1);
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth);
  CHECK(outcome == kx::Sha256CacheOutcome::kMiss);

  // Rewrite in place with different bytes of the same size and the *same*
  // mtime: only the inode could tell, and in-place rewrites keep it, so this
  // is the documented blind spot; a rewrite through a new file (as editors and
  // downloaders do) changes the inode and is caught.
  bytes[500] ^= 0x5A;
  const std::string tmp = path + ".new";
  WriteFile(tmp, bytes);
  REQUIRE(::rename(tmp.c_str(), path.c_str()) == 0);
  SetMtimeAgo(path, 50, 1);
  const std::string truth2 = kx::Sha256Hex(bytes.data(), bytes.size());
  REQUIRE(truth2 != truth);
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth2);
  CHECK(outcome == kx::Sha256CacheOutcome::kMiss);

  // Rewrite with a different size (same inode, same mtime).
  bytes.push_back(0x42);
  WriteFile(path, bytes);
  SetMtimeAgo(path, 50, 1);
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == kx::Sha256Hex(bytes.data(), bytes.size()));
  CHECK(outcome == kx::Sha256CacheOutcome::kMiss);
  hex = kx::Sha256FileCached(path, &outcome);
  CHECK(outcome == kx::Sha256CacheOutcome::kHit);

  // One entry per path: the cache holds the header and a single line.
  std::ifstream in(kx::Sha256CachePath());
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  CHECK(lines == 2);
}

TEST_CASE("Sha256FileCached ignores a corrupt or unwritable cache", "[sha256][cache]") {
  auto rng = kx::test::SeededRng(12);
  TempDir dir;
  CacheDirEnv env(dir.path);
  const std::string path = dir.path + "/weights.gguf";
  const std::vector<uint8_t> bytes = RandomBytes(rng, 4096);
  WriteFile(path, bytes);
  SetMtimeAgo(path, 1000, 0);
  const std::string truth = kx::Sha256Hex(bytes.data(), bytes.size());

  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const int64_t mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const std::string key_tail = std::to_string(st.st_size) + " " + std::to_string(mtime_ns) + " " +
                               std::to_string(st.st_ino) + " " + path;
  {
    // Garbage, binary junk, a short hash, an uppercase hash and a relative
    // path for the right key: none may be used, none may be fatal.
    std::ofstream out(kx::Sha256CachePath(), std::ios::binary | std::ios::trunc);
    out << "# kairox sha256 cache v1\n";
    out << "\x01\x02\xff garbage line\n";
    out << "abcd " << key_tail << "\n";
    out << std::string(64, 'A') << " " << key_tail << "\n";
    out << std::string(64, 'f') << " " << st.st_size << " " << mtime_ns << " " << st.st_ino
        << " relative/path\n";
    out << std::string(64, 'f') << " 1 2\n";
    out << std::string(3000, 'x');  // no final newline
  }
  kx::Sha256CacheOutcome outcome;
  auto hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth);
  CHECK(outcome == kx::Sha256CacheOutcome::kMiss);
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(outcome == kx::Sha256CacheOutcome::kHit);

  // A well-formed entry with a wrong digest is trusted (that is what a cache
  // is): this proves hits come from the file, not from rehashing.
  {
    std::ofstream out(kx::Sha256CachePath(), std::ios::trunc);
    out << std::string(64, 'e') << " " << key_tail << "\n";
  }
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == std::string(64, 'e'));
  CHECK(outcome == kx::Sha256CacheOutcome::kHit);

  // The cache "directory" is a regular file: nothing can be stored, the hash
  // is still right.
  CacheDirEnv env2(path);
  hex = kx::Sha256FileCached(path, &outcome);
  REQUIRE(hex.ok());
  CHECK(*hex == truth);
  CHECK(outcome == kx::Sha256CacheOutcome::kNotStored);

  auto missing = kx::Sha256FileCached(dir.path + "/missing.gguf");
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
}
