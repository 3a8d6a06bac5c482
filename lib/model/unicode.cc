#include "model/unicode.h"

#include <algorithm>
#include <array>

namespace kx {
namespace {

using unicode_internal::kClassRanges;
using unicode_internal::kFlagLetter;
using unicode_internal::kFlagNumber;
using unicode_internal::kFlagSplitDigit;
using unicode_internal::kNumClassRanges;

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;
constexpr uint32_t kAsciiEnd = 0x80;

uint8_t FlagsOf(uint32_t cp) {
  // ASCII is most text: answer it without the binary search.
  if (cp < kAsciiEnd) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kFlagLetter;
    if (cp >= '0' && cp <= '9') return kFlagNumber | kFlagSplitDigit;
    return 0;
  }
  const auto* end = kClassRanges + kNumClassRanges;
  const auto* it = std::upper_bound(kClassRanges, end, cp,
                                    [](uint32_t v, const auto& r) { return v < r.first; });
  if (it == kClassRanges) return 0;
  --it;
  return cp <= it->last ? it->flags : 0;
}

// Byte -> code point table of the GPT-2 byte-level encoding, and its inverse
// over the code points < 0x200 it uses.
struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x200> to_byte{};
  ByteTables() {
    to_byte.fill(-1);
    uint32_t next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : 0x100 + next_extra++;
      to_cp[b] = cp;
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Bytes() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte, or overlong 2-byte lead
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  const int len = Utf8SequenceLength(lead);
  constexpr Utf8Char kInvalid{kInvalidCodepoint, 1};
  if (len == 1) return {lead, 1};
  if (len == 0 || pos + len > text.size()) return kInvalid;
  uint32_t cp = lead & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const uint8_t c = byte(pos + k);
    if ((c & 0xC0) != 0x80) return kInvalid;
    cp = (cp << 6) | (c & 0x3F);
  }
  // Reject overlong forms (the shortest encoding is the only valid one),
  // surrogates and code points past U+10FFFF.
  static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLen[len] || cp > kMaxCodepoint || (cp >= kSurrogateFirst && cp <= kSurrogateLast))
    return kInvalid;
  return {cp, len};
}

void AppendUtf8(uint32_t cp, std::string& dst) {
  if (cp < 0x80) {
    dst.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    dst.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    dst.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    dst.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    dst.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    dst.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    dst.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    dst.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    dst.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    dst.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsLetter(uint32_t cp) { return FlagsOf(cp) & kFlagLetter; }
bool IsNumber(uint32_t cp) { return FlagsOf(cp) & kFlagNumber; }
bool IsSplitDigit(uint32_t cp) { return FlagsOf(cp) & kFlagSplitDigit; }

bool IsWhitespace(uint32_t cp) {
  // The White_Space property (PropList.txt); short enough to spell out.
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint32_t ByteToCodepoint(uint8_t b) { return Bytes().to_cp[b]; }

int CodepointToByte(uint32_t cp) { return cp < Bytes().to_byte.size() ? Bytes().to_byte[cp] : -1; }

}  // namespace kx
