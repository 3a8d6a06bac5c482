// lib/base and lib/tensor: the thread pool, mapped files, the dtype table.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/cpu_features.h"
#include "base/env_flag.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "catch2/catch.hpp"
#include "tensor/dtype.h"
#include "test_util.h"

TEST_CASE("ThreadPool::Split covers [0, n) exactly, in aligned pieces") {
  for (int64_t n : {0, 1, 7, 8, 9, 100, 1536, 49152}) {
    for (int nth : {1, 2, 3, 7}) {
      for (int64_t align : {1, 4, 8}) {
        int64_t expect = 0;
        for (int ith = 0; ith < nth; ++ith) {
          int64_t b, e;
          kx::ThreadPool::Split(n, ith, nth, align, &b, &e);
          INFO("n " << n << " nth " << nth << " align " << align << " ith " << ith);
          REQUIRE(b == expect);
          REQUIRE(e >= b);
          if (e < n) REQUIRE(e % align == 0);
          expect = e;
        }
        CHECK(expect == n);
      }
    }
  }
}

TEST_CASE("ThreadPool runs every thread index once per Run, caller included") {
  for (int threads : {1, 2, 4}) {
    kx::ThreadPool pool(threads);
    REQUIRE(pool.size() == threads);
    std::vector<std::atomic<int>> hits(threads);
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> caller_index{-1};
    std::atomic<int> wrong_nth{0};  // Catch2 assertions are not thread-safe: count, check after
    constexpr int kRuns = 2000;
    {
      kx::ThreadPool::HotScope hot(pool);
      for (int r = 0; r < kRuns; ++r) {
        pool.Run([&](int ith, int nth) {
          if (nth != threads) wrong_nth.fetch_add(1, std::memory_order_relaxed);
          hits[ith].fetch_add(1, std::memory_order_relaxed);
          if (std::this_thread::get_id() == caller) caller_index.store(ith);
        });
      }
    }
    CHECK(wrong_nth.load() == 0);
    for (int i = 0; i < threads; ++i) CHECK(hits[i].load() == kRuns);
    CHECK(caller_index.load() == 0);
  }
}

TEST_CASE("ThreadPool wakes sleeping workers and sees their writes") {
  kx::ThreadPool pool(3);
  std::vector<int64_t> data(3000, 0);
  for (int round = 1; round <= 4; ++round) {
    // Outside a hot scope, idle workers go to sleep after ~2 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.Run([&](int ith, int nth) {
      int64_t b, e;
      kx::ThreadPool::Split(static_cast<int64_t>(data.size()), ith, nth, 1, &b, &e);
      for (int64_t i = b; i < e; ++i) data[i] += i * round;
    });
    for (size_t i = 0; i < data.size(); ++i) {
      REQUIRE(data[i] == static_cast<int64_t>(i) * round * (round + 1) / 2);
    }
  }
}

TEST_CASE("MappedFile maps files and refuses what it cannot map") {
  const std::string path = "/tmp/kx_test_mapped_" + std::to_string(::getpid());
  {
    int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    const char text[] = "kairox";
    REQUIRE(::write(fd, text, 6) == 6);
    ::close(fd);
  }
  auto f = kx::MappedFile::Open(path);
  REQUIRE(f.ok());
  CHECK(f->size() == 6);
  CHECK(std::string(reinterpret_cast<const char*>(f->data()), 6) == "kairox");
  kx::MappedFile moved = std::move(*f);
  CHECK(moved.size() == 6);
  ::unlink(path.c_str());

  auto missing = kx::MappedFile::Open("/nonexistent/file");
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find("/nonexistent/file") != std::string::npos);
  auto dir = kx::MappedFile::Open("/tmp");
  CHECK(absl::IsInvalidArgument(dir.status()));
}

TEST_CASE("dtype table sizes and overflow checks") {
  CHECK(kx::TypeBytes(kx::GgmlType::kQ4_1, 576).value() == 18 * 20);
  CHECK(kx::TypeBytes(kx::GgmlType::kQ8_0, 576).value() == 18 * 34);
  CHECK(kx::TypeBytes(kx::GgmlType::kF16, 3).value() == 6);
  CHECK(!kx::TypeBytes(kx::GgmlType::kQ4_1, 33).ok());  // not whole blocks
  CHECK(!kx::TypeBytes(kx::GgmlType::kF32, -1).ok());
  CHECK(!kx::TypeBytes(kx::GgmlType::kF64, INT64_MAX).ok());  // overflows 64 bits
  CHECK(kx::FindTypeInfo(4) == nullptr);                      // ids 4 and 5 were removed from ggml
  CHECK(kx::FindTypeInfo(1000) == nullptr);
  auto unknown = kx::TypeBytes(uint32_t{77}, 32);
  CHECK(std::string(unknown.status().message()).find("77") != std::string::npos);
  CHECK(std::string(kx::TypeName(kx::GgmlType::kBF16)) == "BF16");
}

TEST_CASE("cpu features: the selected ISA is one the CPU supports") {
  const kx::CpuFeatures& f = kx::GetCpuFeatures();
  const kx::Isa selected = kx::SelectedIsa();
  CHECK(static_cast<int>(selected) <= static_cast<int>(f.BestIsa()));
  std::fprintf(stderr, "cpu: %s, best ISA %s, selected %s\n", f.brand.c_str(),
               kx::IsaName(f.BestIsa()), kx::IsaName(selected));
}

TEST_CASE("EnvFlag: on/off switches from the environment, one parse everywhere", "[base]") {
  for (const char* off : {"0", "false", "OFF", "No", " 0 ", "off\n"}) {
    INFO("'" << off << "'");
    CHECK(kx::ParseFlag(off) == false);
  }
  for (const char* on : {"1", "true", "On", "YES", "\t1"}) {
    INFO("'" << on << "'");
    CHECK(kx::ParseFlag(on) == true);
  }
  for (const char* bad : {"", " ", "2", "-1", "o", "offf", "0x0", "nope"}) {
    INFO("'" << bad << "'");
    CHECK(!kx::ParseFlag(bad).has_value());
  }
  constexpr char kName[] = "KAIROX_TEST_ENV_FLAG";
  ::unsetenv(kName);
  CHECK(!kx::EnvFlag(kName).has_value());
  REQUIRE(::setenv(kName, "", 1) == 0);
  CHECK(!kx::EnvFlag(kName).has_value());
  REQUIRE(::setenv(kName, "0", 1) == 0);
  CHECK(kx::EnvFlag(kName) == false);
  REQUIRE(::setenv(kName, "yes", 1) == 0);
  CHECK(kx::EnvFlag(kName) == true);
  REQUIRE(::setenv(kName, "maybe", 1) == 0);  // warned about, then as if unset
  CHECK(!kx::EnvFlag(kName).has_value());
  CHECK(!kx::EnvFlag(kName).has_value());
  ::unsetenv(kName);
}
