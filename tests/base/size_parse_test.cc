// ParseSize / ResolveSize / FormatBytes: accepted forms, rejected forms with
// messages that say what is wrong, overflow at the 64-bit edge, rounding.
#include "base/size_parse.h"

#include <cstdint>
#include <limits>
#include <string>

#include "catch2/catch.hpp"

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;

uint64_t BytesOf(const std::string& text) {
  auto spec = kx::ParseSize(text);
  INFO(text << ": " << (spec.ok() ? std::string("ok") : spec.status().ToString()));
  REQUIRE(spec.ok());
  REQUIRE_FALSE(spec->is_percent);
  return spec->bytes;
}

std::string ErrorOf(const std::string& text) {
  auto spec = kx::ParseSize(text);
  INFO(text);
  REQUIRE_FALSE(spec.ok());
  CHECK(absl::IsInvalidArgument(spec.status()));
  const std::string msg(spec.status().message());
  CHECK(msg.find(text) != std::string::npos);  // the message quotes the input
  return msg;
}

}  // namespace

TEST_CASE("ParseSize accepts bytes and binary units", "[size_parse]") {
  CHECK(BytesOf("123") == 123);
  CHECK(BytesOf("0") == 0);
  CHECK(BytesOf("123B") == 123);
  CHECK(BytesOf("100K") == 100 * kKiB);
  CHECK(BytesOf("512M") == 512 * kMiB);
  CHECK(BytesOf("512MiB") == 512 * kMiB);
  CHECK(BytesOf("512mb") == 512 * kMiB);
  CHECK(BytesOf("2G") == 2 * kGiB);
  CHECK(BytesOf("2GB") == 2 * kGiB);  // binary on purpose (documented)
  CHECK(BytesOf("2gib") == 2 * kGiB);
  CHECK(BytesOf("3T") == 3 * kTiB);
  CHECK(BytesOf("1.5G") == 1610612736);
  CHECK(BytesOf("0.5K") == 512);
  CHECK(BytesOf(".25M") == kMiB / 4);
  CHECK(BytesOf("  7 KiB \t") == 7 * kKiB);
  CHECK(BytesOf("2.0") == 2);  // a whole number written with a point
  // Rounding to the nearest byte: 0.1 KiB = 102.4 → 102; 0.0005 KiB = 0.512 → 1.
  CHECK(BytesOf("0.1K") == 102);
  CHECK(BytesOf("0.0005K") == 1);
  // Exactly the 64-bit limit, and the largest whole TiB count that fits.
  CHECK(BytesOf("18446744073709551615") == std::numeric_limits<uint64_t>::max());
  CHECK(BytesOf("16777215T") == 16777215 * kTiB);
  CHECK(BytesOf("16777215.99999T") == 16777215 * kTiB + (kTiB - 10995116));  // 1e-5 TiB rounded
}

TEST_CASE("ParseSize accepts percentages in (0, 100]", "[size_parse]") {
  for (auto [text, want] : {std::pair<const char*, double>{"50%", 50.0},
                            {"100%", 100.0},
                            {"12.5%", 12.5},
                            {"0.01%", 0.01},
                            {" 30 % ", 30.0}}) {
    auto spec = kx::ParseSize(text);
    INFO(text);
    REQUIRE(spec.ok());
    CHECK(spec->is_percent);
    CHECK(spec->percent == want);
  }
  CHECK(ErrorOf("0%").find("greater than 0") != std::string::npos);
  CHECK(ErrorOf("100.5%").find("at most 100") != std::string::npos);
  CHECK(ErrorOf("250%").find("at most 100") != std::string::npos);
}

TEST_CASE("ParseSize rejects bad input with a reason", "[size_parse]") {
  CHECK(ErrorOf("").find("empty") != std::string::npos);
  CHECK(ErrorOf("   ").find("empty") != std::string::npos);
  CHECK(ErrorOf("-1G").find("negative") != std::string::npos);
  CHECK(ErrorOf("-5%").find("negative") != std::string::npos);
  CHECK(ErrorOf("+1G").find("sign") != std::string::npos);
  CHECK(ErrorOf("G").find("no number") != std::string::npos);
  CHECK(ErrorOf("abc").find("no number") != std::string::npos);
  CHECK(ErrorOf("1.G").find("decimal point") != std::string::npos);
  CHECK(ErrorOf("12X").find("unknown unit") != std::string::npos);
  CHECK(ErrorOf("1GG").find("unknown unit") != std::string::npos);
  CHECK(ErrorOf("1e9").find("unknown unit") != std::string::npos);
  CHECK(ErrorOf("1 2").find("unknown unit") != std::string::npos);
  CHECK(ErrorOf("1.5").find("whole number") != std::string::npos);
  CHECK(ErrorOf("18446744073709551616").find("too large") != std::string::npos);
  CHECK(ErrorOf("16777216T").find("too large") != std::string::npos);
  CHECK(ErrorOf("99999999999999999999999G").find("too large") != std::string::npos);
  CHECK(ErrorOf("16777215.9999999999999999999T").find("too large") != std::string::npos);
}

TEST_CASE("ResolveSize gives bytes or a floored share of the whole", "[size_parse]") {
  kx::SizeSpec bytes_spec;
  bytes_spec.bytes = 12345;
  CHECK(kx::ResolveSize(bytes_spec, 1) == 12345);  // bytes ignore the whole
  auto half = kx::ParseSize("50%");
  REQUIRE(half.ok());
  CHECK(kx::Resolve(*half, 1001) == 500);
  CHECK(kx::ResolveSize(*half, 8 * kGiB) == 4 * kGiB);
  auto all = kx::ParseSize("100%");
  REQUIRE(all.ok());
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  CHECK(kx::ResolveSize(*all, max) == max);
  auto third = kx::ParseSize("33.3%");
  REQUIRE(third.ok());
  CHECK(kx::ResolveSize(*third, 1000) == 333);
  CHECK(kx::ResolveSize(*third, 0) == 0);
  CHECK(kx::ResolveSize(*kx::ParseSize("70%"), 100) == 70);  // 0.7 is inexact in binary too
  CHECK(kx::ResolveSize(*kx::ParseSize("16.1%"), 1000) == 161);
  auto tiny = kx::ParseSize("0.01%");
  REQUIRE(tiny.ok());
  CHECK(kx::ResolveSize(*tiny, max) == max / 10000);
}

TEST_CASE("FormatBytes uses binary units with one decimal", "[size_parse]") {
  CHECK(kx::FormatBytes(0) == "0 B");
  CHECK(kx::FormatBytes(1023) == "1023 B");
  CHECK(kx::FormatBytes(1024) == "1.0 KiB");
  CHECK(kx::FormatBytes(1536) == "1.5 KiB");
  CHECK(kx::FormatBytes(102656000) == "97.9 MiB");
  CHECK(kx::FormatBytes(2 * kGiB) == "2.0 GiB");
  CHECK(kx::FormatBytes(kMiB - 1) == "1.0 MiB");  // not "1024.0 KiB"
  CHECK(kx::FormatBytes(std::numeric_limits<uint64_t>::max()) == "16.0 EiB");
  CHECK(kx::FormatSizeSpec(*kx::ParseSize("2G")) == "2147483648");
  CHECK(kx::FormatSizeSpec(*kx::ParseSize("12.5%")) == "12.5%");
}
