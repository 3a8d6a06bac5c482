// libFuzzer target: a tokenizer built from a hostile vocabulary, then text
// through it. The input decides everything TokenizerData holds — model kind,
// pre-tokenizer, tokens (empty ones, NUL bytes, invalid UTF-8, duplicates),
// token types inside and outside the enum, merges (well-formed pairs of
// vocabulary entries and garbage), SentencePiece scores (NaN and inf
// included), special ids in and out of range — and the text to encode. What a
// tokenizer must do with any of it: refuse it with a status, or encode and
// decode without crashing, with ids in range, and (gpt2 with every byte in the
// vocabulary) give back the text.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace {

constexpr int kMaxTokens = 512;
constexpr int kMaxMerges = 512;
constexpr size_t kMaxTokenBytes = 24;

const char* const kPre[] = {"default", "gpt2", "smollm", "llama-bpe", "llama3", "qwen2",
                            "nonsense", ""};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  kx::TokenizerData d;
  const uint8_t kind = in.ConsumeIntegralInRange<uint8_t>(0, 2);
  d.model = kind == 0 ? "gpt2" : kind == 1 ? "llama" : in.ConsumeRandomLengthString(8);
  d.pre = kPre[in.ConsumeIntegralInRange<size_t>(0, std::size(kPre) - 1)];

  // Half of the inputs start from the 256 single bytes (as gpt2 byte-level
  // vocabularies and SentencePiece byte tokens would), so encoding gets far.
  const bool with_bytes = in.ConsumeBool();
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      d.tokens.push_back(kind == 1 ? "<0x" + std::string(1, "0123456789ABCDEF"[b >> 4]) +
                                         std::string(1, "0123456789ABCDEF"[b & 15]) + ">"
                                   : std::string(1, static_cast<char>(b)));
    }
  }
  const int n_extra = in.ConsumeIntegralInRange<int>(0, kMaxTokens);
  for (int i = 0; i < n_extra && in.remaining_bytes() > 0; ++i) {
    d.tokens.push_back(in.ConsumeRandomLengthString(kMaxTokenBytes));
  }
  const int n_tokens = static_cast<int>(d.tokens.size());
  if (in.ConsumeBool()) {
    for (int i = 0; i < n_tokens; ++i) {
      d.token_types.push_back(static_cast<kx::TokenType>(in.ConsumeIntegralInRange<int32_t>(-2, 8)));
    }
    if (in.ConsumeBool() && !d.token_types.empty()) d.token_types.pop_back();  // wrong length
  }
  if (in.ConsumeBool()) {
    for (int i = 0; i < n_tokens; ++i) d.scores.push_back(in.ConsumeFloatingPoint<float>());
  }
  const int n_merges = in.ConsumeIntegralInRange<int>(0, kMaxMerges);
  for (int i = 0; i < n_merges && in.remaining_bytes() > 0; ++i) {
    if (n_tokens > 0 && in.ConsumeBool()) {
      const int a = in.ConsumeIntegralInRange<int>(0, n_tokens - 1);
      const int b = in.ConsumeIntegralInRange<int>(0, n_tokens - 1);
      d.merges.push_back(d.tokens[a] + " " + d.tokens[b]);
    } else {
      d.merges.push_back(in.ConsumeRandomLengthString(kMaxTokenBytes));
    }
  }
  auto id = [&] { return in.ConsumeIntegralInRange<int32_t>(-3, n_tokens + 2); };
  d.bos_id = id();
  d.eos_id = id();
  d.eot_id = id();
  d.unk_id = id();
  d.pad_id = id();
  d.add_bos = in.ConsumeBool();
  d.add_eos = in.ConsumeBool();
  d.add_space_prefix = in.ConsumeBool();
  const bool parse_special = in.ConsumeBool();
  const std::string text = in.ConsumeRemainingBytesAsString();

  auto tok = kx::Tokenizer::FromData(std::move(d));
  if (!tok.ok()) return 0;  // refused with a message: fine
  const kx::Tokenizer& t = **tok;
  const std::vector<int32_t> ids = t.Encode(text, /*add_special=*/true, parse_special);
  for (int32_t i : ids) {
    if (i < 0 || i >= t.n_vocab()) std::abort();  // an id the model has no row for
    (void)t.TokenToPiece(i, /*render_special=*/true);
    (void)t.TokenText(i);
    (void)t.IsEndOfGeneration(i);
  }
  const std::string back = t.Decode(ids, /*render_special=*/false);
  kx::Utf8Stream stream;
  (void)stream.Push(back);
  (void)stream.Flush();
  (void)t.HeapBytes();
  return 0;
}
