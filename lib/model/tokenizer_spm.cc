// SentencePiece-style encoding (`tokenizer.ggml.model = llama`): the text,
// spaces written as U+2581, starts as one symbol per UTF-8 character; the
// adjacent pair whose concatenation is the vocabulary piece with the highest
// score is merged (leftmost on ties) until no pair forms a piece. Symbols
// that are not pieces (characters the vocabulary lacks) fall back to their
// <0xNN> byte tokens. This is SentencePiece's BPE model with byte_fallback,
// as llama.cpp runs it.
#include <queue>

#include "model/tokenizer.h"
#include "model/unicode.h"

namespace kx {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK
// "<0xNN>": the spelling of byte-fallback tokens.
constexpr size_t kByteTokenLength = 6;

absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The byte a "<0xNN>" spelling names (upper- or lower-case hex), or -1.
int ParseByteToken(std::string_view text) {
  if (text.size() != kByteTokenLength || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

std::string UnescapeSpaces(std::string_view text) {
  std::string dst;
  dst.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.substr(pos, kSpaceMarker.size()) == kSpaceMarker) {
      dst.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      dst.push_back(text[pos++]);
    }
  }
  return dst;
}

// One merge candidate: symbols `left` and its right neighbour, whose texts
// together were `size` bytes when queued.
struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t size;
  int32_t id;
  // The priority queue pops the greatest: highest score, then leftmost.
  bool operator<(const Bigram& o) const {
    return score != o.score ? score < o.score : left > o.left;
  }
};

struct Symbol {
  size_t begin;  // byte offset into the escaped text
  size_t size;   // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

}  // namespace

void Tokenizer::InitSpm() {
  byte_ids_.fill(-1);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& text = tokens_[i];
    const TokenType type = types_[i];
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      pieces_[i] = text;
      continue;
    }
    const int byte = type == TokenType::kByte ? ParseByteToken(text) : -1;
    if (byte >= 0) {
      if (byte_ids_[byte] < 0) byte_ids_[byte] = id;  // the first token of a value wins
      pieces_[i] = std::string(1, static_cast<char>(byte));
      continue;
    }
    pieces_[i] = UnescapeSpaces(text);
  }
}

bool Tokenizer::IsSpmPiece(int32_t id) const {
  // SentencePiece merges only into ordinary pieces; control, unknown, unused
  // and byte tokens are never produced by merging.
  const TokenType t = types_[id];
  return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUndefined;
}

void Tokenizer::EncodeSpm(std::string_view text, bool space_prefix,
                          std::vector<int32_t>& dst) const {
  std::string escaped;
  escaped.reserve(text.size() + kSpaceMarker.size() * 2);
  if (space_prefix && add_space_prefix_) escaped.append(kSpaceMarker);
  for (char c : text) {
    if (c == ' ') {
      escaped.append(kSpaceMarker);
    } else {
      escaped.push_back(c);
    }
  }
  const std::string_view s = escaped;

  std::vector<Symbol> symbols;
  symbols.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    // Invalid bytes are one-byte symbols (DecodeUtf8 gives len 1 for them).
    const size_t len = static_cast<size_t>(DecodeUtf8(s, pos).len);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, len, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += len;
  }
  // The piece two adjacent symbols would form, queued when it exists.
  std::priority_queue<Bigram> queue;
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].size + symbols[right].size;
    auto it = token_ids_.find(Key(s.substr(symbols[left].begin, size)));
    if (it == token_ids_.end() || !IsSpmPiece(it->second)) return;
    queue.push({scores_[it->second], left, right, size, it->second});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int32_t>(i) - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    // Stale: one side was merged away or grew since this pair was queued.
    if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = s.substr(symbols[i].begin, symbols[i].size);
    auto it = token_ids_.find(Key(piece));
    if (it != token_ids_.end() && IsSpmPiece(it->second)) {
      dst.push_back(it->second);
      continue;
    }
    // Byte fallback; a byte without a token becomes the unknown token (when
    // that is not a control token) or is dropped.
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        dst.push_back(id);
      } else if (missing_byte_id_ >= 0) {
        dst.push_back(missing_byte_id_);
      }
    }
  }
}

}  // namespace kx
