// Utf8Stream: holds back incomplete UTF-8 sequences between token pieces.
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace kx {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD

// Whether buf[1..] (fewer bytes than the sequence needs) can still become a
// valid sequence with lead buf[0]. The second byte's range depends on the
// lead (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidPrefix(std::string_view buf) {
  const auto lead = static_cast<uint8_t>(buf[0]);
  for (size_t k = 1; k < buf.size(); ++k) {
    const auto c = static_cast<uint8_t>(buf[k]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (c < lo || c > hi) return false;
  }
  return true;
}

}  // namespace

std::string Utf8Stream::Push(std::string_view bytes) {
  std::string buf = std::move(pending_);
  pending_.clear();
  buf.append(bytes);
  std::string dst;
  dst.reserve(buf.size());
  size_t pos = 0;
  while (pos < buf.size()) {
    const int len = Utf8SequenceLength(static_cast<uint8_t>(buf[pos]));
    if (len > 1 && pos + len > buf.size() && IsValidPrefix(std::string_view(buf).substr(pos))) {
      pending_ = buf.substr(pos);  // wait for the rest of this character
      break;
    }
    const Utf8Char c = DecodeUtf8(buf, pos);
    if (c.cp == kInvalidCodepoint) {
      dst.append(kReplacementUtf8);
    } else {
      dst.append(buf, pos, c.len);
    }
    pos += c.len;
  }
  return dst;
}

std::string Utf8Stream::Flush() {
  std::string dst = pending_.empty() ? std::string() : std::string(kReplacementUtf8);
  pending_.clear();
  return dst;
}

}  // namespace kx
