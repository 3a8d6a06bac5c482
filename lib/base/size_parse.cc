#include "base/size_parse.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace kx {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr double kMaxPercent = 100.0;
// Percentages are resolved exactly after rounding to this many parts per unit.
constexpr uint64_t kNanoPerUnit = 1'000'000'000;
// Fraction digits that affect the result: 10^19 still fits in 64 bits, and
// digits beyond it change a value by far less than one byte even in TiB.
constexpr int kMaxFractionDigits = 19;

struct Unit {
  const char* name;  // lowercase
  uint64_t bytes;
};
constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"k", kKiB},
    {"kb", kKiB},
    {"kib", kKiB},
    {"m", kKiB << 10},
    {"mb", kKiB << 10},
    {"mib", kKiB << 10},
    {"g", kKiB << 20},
    {"gb", kKiB << 20},
    {"gib", kKiB << 20},
    {"t", kKiB << 30},
    {"tb", kKiB << 30},
    {"tib", kKiB << 30},
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

absl::Status Invalid(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid size \"", std::string(text), "\": ", std::string(why),
                   " (expected e.g. 123, 512M, 1.5GiB or 50%; units B/K/M/G/T are binary)"));
}

}  // namespace

absl::StatusOr<SizeSpec> ParseSize(std::string_view text) {
  const std::string_view s = Trim(text);
  if (s.empty()) return Invalid(text, "empty");
  if (s.front() == '-') return Invalid(text, "negative sizes are not allowed");
  if (s.front() == '+') return Invalid(text, "a sign is not allowed");

  // Number: digits, optionally '.' and more digits.
  size_t pos = 0;
  const size_t int_begin = pos;
  while (pos < s.size() && IsDigit(s[pos])) ++pos;
  const std::string_view int_digits = s.substr(int_begin, pos - int_begin);
  std::string_view frac_digits;
  bool has_point = false;
  if (pos < s.size() && s[pos] == '.') {
    has_point = true;
    const size_t frac_begin = ++pos;
    while (pos < s.size() && IsDigit(s[pos])) ++pos;
    frac_digits = s.substr(frac_begin, pos - frac_begin);
  }
  if (int_digits.empty() && frac_digits.empty()) return Invalid(text, "no number");
  if (has_point && frac_digits.empty()) return Invalid(text, "no digits after the decimal point");
  const std::string_view number = s.substr(0, pos);

  std::string_view unit_text = s.substr(pos);
  while (!unit_text.empty() && IsSpace(unit_text.front())) unit_text.remove_prefix(1);

  SizeSpec spec;
  if (unit_text == "%") {
    const std::string number_str(number);
    const double p = std::strtod(number_str.c_str(), nullptr);
    if (!(p > 0.0) || p > kMaxPercent) {
      return Invalid(text, "a percentage must be greater than 0 and at most 100");
    }
    spec.is_percent = true;
    spec.percent = p;
    return spec;
  }

  std::string unit_lower(unit_text);
  for (char& c : unit_lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  uint64_t multiplier = 0;
  for (const Unit& u : kUnits) {
    if (unit_lower == u.name) multiplier = u.bytes;
  }
  if (multiplier == 0) {
    return Invalid(text, absl::StrCat("unknown unit \"", std::string(unit_text), "\""));
  }

  // Exact arithmetic in 128 bits: whole part, then the fraction rounded to the
  // nearest byte.
  using u128 = unsigned __int128;
  constexpr u128 kMax = std::numeric_limits<uint64_t>::max();
  u128 whole = 0;
  for (char c : int_digits) {
    whole = whole * 10 + static_cast<u128>(c - '0');
    if (whole > kMax) return Invalid(text, "too large (more than 2^64-1 bytes)");
  }
  u128 total = whole * multiplier;
  u128 frac_num = 0, frac_den = 1;
  for (size_t i = 0; i < frac_digits.size() && static_cast<int>(i) < kMaxFractionDigits; ++i) {
    frac_num = frac_num * 10 + static_cast<u128>(frac_digits[i] - '0');
    frac_den *= 10;
  }
  if (frac_num != 0) {
    if (multiplier == 1) {
      return Invalid(text, "a byte count must be a whole number (use a unit, e.g. 1.5K)");
    }
    total += (frac_num * multiplier + frac_den / 2) / frac_den;
  }
  if (total > kMax) return Invalid(text, "too large (more than 2^64-1 bytes)");
  spec.bytes = static_cast<uint64_t>(total);
  return spec;
}

uint64_t ResolveSize(const SizeSpec& spec, uint64_t whole) {
  if (!spec.is_percent) return spec.bytes;
  if (spec.percent >= kMaxPercent) return whole;
  if (!(spec.percent > 0.0)) return 0;
  // The double nearest 33.3 is a hair below it, so whole·p/100 in floating
  // point gives 332 of 1000. Percentages are typed in decimal: round to
  // 1e-9 percent and compute exactly in 128 bits (2^64 · 10^11 < 2^128).
  using u128 = unsigned __int128;
  const auto nano_percent = static_cast<u128>(std::llround(spec.percent * kNanoPerUnit));
  const u128 share =
      static_cast<u128>(whole) * nano_percent / (static_cast<u128>(kMaxPercent) * kNanoPerUnit);
  return share >= whole ? whole : static_cast<uint64_t>(share);
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  constexpr int kLastUnit = 6;
  if (bytes < kKiB) return absl::StrCat(bytes, " B");
  int unit = 0;
  long double value = static_cast<long double>(bytes);
  while (value >= static_cast<long double>(kKiB) && unit < kLastUnit) {
    value /= kKiB;
    ++unit;
  }
  // 1023.96 KiB would print as "1024.0 KiB": move up a unit instead.
  if (std::round(value * 10) >= static_cast<long double>(kKiB * 10) && unit < kLastUnit) {
    value /= kKiB;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", static_cast<double>(value), kNames[unit]);
}

std::string FormatSizeSpec(const SizeSpec& spec) {
  if (spec.is_percent) return absl::StrFormat("%g%%", spec.percent);
  return absl::StrCat(spec.bytes);
}

}  // namespace kx
