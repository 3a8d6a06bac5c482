// MemoryBudget: a hard limit with named accounting.
#include "base/memory_budget.h"

#include <string>

#include "catch2/catch.hpp"

TEST_CASE("a budget refuses what would cross its limit and changes nothing then") {
  kx::MemoryBudget b(1000);
  REQUIRE(b.Reserve("KV cache", 600).ok());
  REQUIRE(b.Reserve("scratch", 300).ok());
  CHECK(b.used() == 900);
  absl::Status st = b.Reserve("resident bundles", 101);
  REQUIRE(!st.ok());
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  const std::string msg(st.message());
  CHECK_THAT(msg, Catch::Contains("resident bundles"));
  CHECK_THAT(msg, Catch::Contains("101 B"));
  CHECK(b.used() == 900);
  CHECK(b.held("resident bundles") == 0);
  REQUIRE(b.Reserve("resident bundles", 100).ok());  // exactly the limit is fine
  CHECK(b.used() == 1000);
  CHECK(b.peak() == 1000);
  b.Release("KV cache", 600);
  CHECK(b.used() == 400);
  CHECK(b.peak() == 1000);
  CHECK(b.held("KV cache") == 0);
  REQUIRE(b.entries().size() == 2);  // empty entries are left out
  CHECK(b.entries()[0].first == "scratch");
}

TEST_CASE("a budget's limit can be set to what is held, not below") {
  kx::MemoryBudget b;
  CHECK(b.unlimited());
  REQUIRE(b.Reserve("a", 12345).ok());
  CHECK(!b.SetLimit(12344).ok());
  REQUIRE(b.SetLimit(12345).ok());
  CHECK(!b.Reserve("b", 1).ok());
  CHECK(b.Reserve("b", 0).ok());
  CHECK_THAT(b.Report(), Catch::Contains("a 12.1 KiB"));
  CHECK_THAT(b.Report(), Catch::Contains("of 12.1 KiB"));
}

TEST_CASE("repeated reservations under one name add up") {
  kx::MemoryBudget b(100);
  for (int i = 0; i < 10; ++i) REQUIRE(b.Reserve("x", 10).ok());
  CHECK(!b.Reserve("x", 1).ok());
  CHECK(b.held("x") == 100);
  b.Release("x", 50);
  CHECK(b.Reserve("y", 50).ok());
}
