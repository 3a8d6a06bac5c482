#include "model/tokenizer.h"

#include <algorithm>
#include <queue>

#include "base/heap_bytes.h"
#include "base/log.h"
#include "model/unicode.h"

namespace kx {
namespace {

// Control tokens that end a turn in the chat formats we know, besides EOS/EOT.
// Gemma ends each turn with <end_of_turn> and its files name no EOT id.
constexpr std::string_view kEndOfTurnTokens[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>",
                                                  "<end_of_turn>"};

// Debian's Abseil has its own string_view type: heterogeneous lookups need it.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsSpecialType(TokenType t) { return t == TokenType::kControl || t == TokenType::kUserDefined; }

// The raw bytes a byte-level vocabulary entry stands for. Code points outside
// the byte mapping (not produced by GPT-2 converters) are kept as UTF-8.
std::string ByteLevelDecode(std::string_view text) {
  std::string dst;
  dst.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char c = DecodeUtf8(text, pos);
    const int b = c.cp == kInvalidCodepoint ? -1 : CodepointToByte(c.cp);
    if (b >= 0) {
      dst.push_back(static_cast<char>(b));
    } else {
      dst.append(text.substr(pos, c.len));
    }
    pos += c.len;
  }
  return dst;
}

absl::Status CheckId(const char* what, int32_t id, size_t n_vocab) {
  if (id < -1 || id >= static_cast<int64_t>(n_vocab)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tokenizer: %s id %d is outside the vocabulary of %d tokens", what, id,
                        static_cast<int64_t>(n_vocab)));
  }
  return absl::OkStatus();
}

// One merge candidate: the pair starting at symbol `pos`, as it was when queued.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t left;
  int32_t right;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;  // lowest rank, then leftmost, first
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromData(TokenizerData d) {
  const bool spm = d.model == "llama";
  if (d.model != "gpt2" && !spm) {
    return absl::UnimplementedError(
        "tokenizer: model '" + d.model +
        "' is not supported (byte-level BPE 'gpt2' and SentencePiece 'llama' are)");
  }
  if (d.tokens.empty()) return absl::InvalidArgumentError("tokenizer: the vocabulary is empty");
  if (d.tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer: the vocabulary has more than 2^31 tokens");
  }
  const size_t n = d.tokens.size();
  if (!d.token_types.empty() && d.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat("tokenizer: %d token types for %d tokens",
                                                      static_cast<int64_t>(d.token_types.size()),
                                                      static_cast<int64_t>(n)));
  }
  if (!d.scores.empty() && d.scores.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat("tokenizer: %d scores for %d tokens",
                                                      static_cast<int64_t>(d.scores.size()),
                                                      static_cast<int64_t>(n)));
  }
  KX_RETURN_IF_ERROR(CheckId("bos", d.bos_id, n));
  KX_RETURN_IF_ERROR(CheckId("eos", d.eos_id, n));
  KX_RETURN_IF_ERROR(CheckId("eot", d.eot_id, n));
  KX_RETURN_IF_ERROR(CheckId("unknown", d.unk_id, n));
  KX_RETURN_IF_ERROR(CheckId("padding", d.pad_id, n));

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->pre_ = PreTokenizerFromName(d.pre);
  t->bos_id_ = d.bos_id;
  t->eos_id_ = d.eos_id;
  t->eot_id_ = d.eot_id;
  t->unk_id_ = d.unk_id;
  t->pad_id_ = d.pad_id;
  t->add_bos_ = d.add_bos;
  t->add_eos_ = d.add_eos;
  t->model_ = spm ? TokenizerModel::kSentencePiece : TokenizerModel::kBytePairGpt2;
  t->add_space_prefix_ = spm && d.add_space_prefix;
  if (spm) t->scores_ = d.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(d.scores);
  t->types_ = d.token_types.empty() ? std::vector<TokenType>(n, TokenType::kNormal)
                                    : std::move(d.token_types);
  t->tokens_ = std::move(d.tokens);

  t->token_ids_.reserve(n);
  t->pieces_.resize(n);
  size_t duplicates = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    // The first spelling wins; later duplicates stay decodable but unreachable.
    if (!t->token_ids_.emplace(t->tokens_[i], id).second) ++duplicates;
    if (!spm) {
      t->pieces_[i] = IsSpecialType(t->types_[i]) ? t->tokens_[i] : ByteLevelDecode(t->tokens_[i]);
    }
    if (IsSpecialType(t->types_[i]) && !t->tokens_[i].empty()) {
      t->specials_by_byte_[static_cast<uint8_t>(t->tokens_[i][0])].push_back(id);
    }
  }
  if (duplicates) Log().warn("tokenizer: {} duplicate vocabulary entries", duplicates);
  for (auto& bucket : t->specials_by_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return t->tokens_[a].size() > t->tokens_[b].size();
    });
  }

  if (spm) t->InitSpm();  // pieces_ and byte_ids_ from the <0xNN> tokens
  int missing_bytes = 0;
  for (int b = 0; b < 256; ++b) {
    if (spm) {
      missing_bytes += t->byte_ids_[b] < 0;
      continue;
    }
    std::string spelling;
    AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(b)), spelling);
    auto it = t->token_ids_.find(spelling);
    t->byte_ids_[b] = it == t->token_ids_.end() ? -1 : it->second;
    missing_bytes += it == t->token_ids_.end();
  }
  // Bytes without a token become the unknown token, unless that is a control
  // token (SmolLM2's is <|endoftext|>: inserting it would end the document);
  // then they are dropped, as HF's BPE does without an unk token.
  t->missing_byte_id_ =
      t->unk_id_ >= 0 && t->types_[t->unk_id_] != TokenType::kControl ? t->unk_id_ : -1;
  if (missing_bytes) {
    Log().debug("tokenizer: {} byte values have no token; they encode as {}", missing_bytes,
                t->missing_byte_id_ < 0 ? std::string("nothing (dropped)")
                                        : "token " + std::to_string(t->missing_byte_id_));
  }

  if (spm) d.merges.clear();  // SentencePiece merges by score; a merges array is not used
  t->merges_.reserve(d.merges.size());
  size_t skipped = 0;
  for (size_t rank = 0; rank < d.merges.size(); ++rank) {
    const std::string_view m = d.merges[rank];
    const size_t space = m.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == m.size()) {
      ++skipped;
      continue;
    }
    const std::string_view left = m.substr(0, space), right = m.substr(space + 1);
    auto l = t->token_ids_.find(Key(left)), r = t->token_ids_.find(Key(right));
    auto res = t->token_ids_.find(std::string(left) + std::string(right));
    if (l == t->token_ids_.end() || r == t->token_ids_.end() || res == t->token_ids_.end()) {
      ++skipped;
      continue;
    }
    // An earlier (higher-priority) duplicate of the same pair keeps its rank.
    t->merges_.emplace(PairKey(l->second, r->second),
                       Merge{static_cast<int32_t>(rank), res->second});
  }
  if (skipped) Log().warn("tokenizer: skipped {} malformed or out-of-vocabulary merges", skipped);

  for (int32_t id : {t->eos_id_, t->eot_id_}) {
    if (id >= 0) t->end_of_generation_.push_back(id);
  }
  for (std::string_view name : kEndOfTurnTokens) {
    auto it = t->token_ids_.find(Key(name));
    if (it != t->token_ids_.end() && t->types_[it->second] == TokenType::kControl) {
      t->end_of_generation_.push_back(it->second);
    }
  }
  return t;
}

int32_t Tokenizer::MatchSpecial(std::string_view text, size_t pos, bool parse_special) const {
  for (int32_t id : specials_by_byte_[static_cast<uint8_t>(text[pos])]) {
    if (!parse_special && types_[id] == TokenType::kControl) continue;
    if (text.substr(pos, tokens_[id].size()) == tokens_[id]) return id;
  }
  return -1;
}

void Tokenizer::EncodeWord(std::string_view word, std::vector<int32_t>& dst) const {
  // One symbol per byte. Bytes without a token become missing_byte_id_, or
  // are left out before merging (so their neighbours may merge, as in HF).
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0 || missing_byte_id_ >= 0) ids.push_back(id >= 0 ? id : missing_byte_id_);
  }
  const auto n = static_cast<int32_t>(ids.size());
  if (n <= 1) {
    dst.insert(dst.end(), ids.begin(), ids.end());
    return;
  }
  // LLaMA-3's tokenizer ignores merges for a word that is a whole token
  // ("ignore_merges" in its tokenizer.json): the merges need not reach it.
  if (pre_ == PreTokenizerKind::kLlama3) {
    std::string spelled;
    for (int32_t id : ids) spelled += tokens_[id];
    if (auto it = token_ids_.find(spelled); it != token_ids_.end()) {
      dst.push_back(it->second);
      return;
    }
  }
  // Symbols form a linked list; a merge keeps the left symbol (with the
  // merged id) and unlinks the right one. Candidates are checked when popped,
  // so stale ones are simply dropped.
  constexpr int32_t kDead = -2;
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(ids[pos], ids[next[pos]]));
    if (it != merges_.end()) queue.push({it->second.rank, pos, ids[pos], ids[next[pos]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t q = next[c.pos];
    if (ids[c.pos] != c.left || q < 0 || ids[q] != c.right) continue;  // stale
    ids[c.pos] = merges_.find(PairKey(c.left, c.right))->second.result;
    ids[q] = kDead;
    next[c.pos] = next[q];
    if (next[q] >= 0) prev[next[q]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) dst.push_back(ids[i]);
}

void Tokenizer::EncodeText(std::string_view text, bool space_prefix,
                           std::vector<int32_t>& dst) const {
  if (text.empty()) return;
  if (model_ == TokenizerModel::kSentencePiece) {
    EncodeSpm(text, space_prefix, dst);
    return;
  }
  std::vector<std::string_view> words;
  PreTokenize(pre_, text, words);
  for (std::string_view w : words) EncodeWord(w, dst);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> dst;
  dst.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_ && bos_id_ >= 0) dst.push_back(bos_id_);
  // SentencePiece's space prefix goes before the first text and before text
  // that follows a special token (as llama.cpp does it).
  bool after_special = true;
  const auto encode_plain = [&](std::string_view plain) {
    if (plain.empty()) return;
    EncodeText(plain, after_special, dst);
    after_special = false;
  };
  size_t plain_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const int32_t id = MatchSpecial(text, pos, parse_special);
    if (id < 0) {
      ++pos;
      continue;
    }
    encode_plain(text.substr(plain_begin, pos - plain_begin));
    dst.push_back(id);
    after_special = true;
    pos += tokens_[id].size();
    plain_begin = pos;
  }
  encode_plain(text.substr(plain_begin));
  // A text that already starts with the BOS token (chat templates write it)
  // gets no second one.
  if (add_special && add_bos_ && bos_id_ >= 0 && dst.size() >= 2 && dst[1] == bos_id_) {
    dst.erase(dst.begin());
  }
  if (add_special && add_eos_ && eos_id_ >= 0) dst.push_back(eos_id_);
  return dst;
}

std::string Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return {};
  if (!render_special && types_[id] == TokenType::kControl) return {};
  return pieces_[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string dst;
  // SentencePiece: the space the encoder put before the text is not part of it.
  bool strip_space = add_space_prefix_;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (!render_special && types_[id] == TokenType::kControl) continue;
    std::string_view piece = pieces_[id];
    if (strip_space && !piece.empty()) {
      if (piece[0] == ' ') piece.remove_prefix(1);
      strip_space = false;
    }
    dst += piece;
  }
  return dst;
}

float Tokenizer::score(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < scores_.size() ? scores_[id] : 0.0f;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && std::find(end_of_generation_.begin(), end_of_generation_.end(), id) !=
                        end_of_generation_.end();
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < n_vocab() ? types_[id] : TokenType::kUndefined;
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token_text) const {
  auto it = token_ids_.find(Key(token_text));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  return id >= 0 && id < n_vocab() ? std::string_view(tokens_[id]) : std::string_view();
}

uint64_t Tokenizer::HeapBytes() const {
  uint64_t bytes = kx::HeapBytes(tokens_) + kx::HeapBytes(types_) + kx::HeapBytes(pieces_) +
                   kx::HeapBytes(scores_) + kx::HeapBytes(token_ids_) + kx::HeapBytes(merges_) +
                   kx::HeapBytes(end_of_generation_);
  for (const auto& v : specials_by_byte_) bytes += kx::HeapBytes(v);
  return bytes;
}

}  // namespace kx
