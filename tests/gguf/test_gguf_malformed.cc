// Malformed GGUF files, built byte by byte: each must be refused with a
// message naming the problem, never crash, never read out of bounds (the
// buffers are exactly sized, so ASan builds catch over-reads).
#include <catch2/catch.hpp>
#include <limits>

#include "gguf_test_util.h"
#include "model/gguf_info.h"
#include "test_util.h"

namespace kx {
namespace {

using test::Bytes;
using test::ParseExact;

constexpr uint32_t kTypeU32 = static_cast<uint32_t>(GgufType::kU32);
constexpr uint32_t kTypeString = static_cast<uint32_t>(GgufType::kString);
constexpr uint32_t kTypeArray = static_cast<uint32_t>(GgufType::kArray);
constexpr uint32_t kTypeBool = static_cast<uint32_t>(GgufType::kBool);
constexpr uint32_t kF32 = static_cast<uint32_t>(GgmlType::kF32);
constexpr uint32_t kQ4_0 = static_cast<uint32_t>(GgmlType::kQ4_0);
constexpr uint64_t kHuge = uint64_t{1} << 62;

// Parses `b` and requires an error whose message contains `substring`.
void ExpectError(const Bytes& b, const std::string& substring) {
  auto p = ParseExact(b.b);
  INFO("expected error containing: " << substring);
  REQUIRE_FALSE(p.file.ok());
  CHECK_THAT(std::string(p.file.status().message()), Catch::Contains(substring));
  CHECK((absl::IsInvalidArgument(p.file.status()) || absl::IsDataLoss(p.file.status())));
}

// One F32 tensor of 4 elements at offset 0, after `kvs` already appended.
Bytes& OneTensorTail(Bytes& b, uint64_t alignment = 32) {
  b.Tensor("t", {4}, kF32, 0).PadTo(alignment);
  return b.Zeros(16);
}

TEST_CASE("a small valid file parses, and every truncation of it fails", "[gguf]") {
  auto rng = test::SeededRng(7);
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 2);
  w.SetF32("eps", 1e-5f);
  w.SetBool("flag", true);
  w.SetArrayString("tokens", {"a", "bc", "", "def"});
  w.SetArrayI32("types", {1, -2, 3});
  std::vector<uint8_t> nested;
  GgufWriter::PutU32(nested, kTypeArray);
  GgufWriter::PutU64(nested, 1);
  GgufWriter::PutU32(nested, kTypeString);
  GgufWriter::PutU64(nested, 1);
  GgufWriter::PutString(nested, "xyz");
  w.SetRaw("nested", GgufType::kArray, nested);
  std::vector<uint8_t> d1(4 * 8), d2(18 * 2);
  for (auto& b : d1) b = static_cast<uint8_t>(rng());
  for (auto& b : d2) b = static_cast<uint8_t>(rng());
  REQUIRE(w.AddTensor("a", GgmlType::kF32, {8}, d1.data(), d1.size()).ok());
  REQUIRE(w.AddTensor("b", GgmlType::kQ4_0, {32, 2}, d2.data(), d2.size()).ok());
  const std::vector<uint8_t> good = w.WriteToBuffer().value();

  auto full = ParseExact(good);
  REQUIRE(full.file.ok());
  uint64_t data_end = 0;
  for (const auto& t : full.file->tensors()) {
    data_end = std::max(data_end, full.file->data_offset() + t.offset + t.size_bytes);
  }
  REQUIRE(data_end <= good.size());
  // Everything before the end of the last tensor's data is needed.
  for (size_t n = 0; n < data_end; ++n) {
    auto p = ParseExact(good.data(), n);
    INFO("prefix of " << n << " bytes");
    REQUIRE_FALSE(p.file.ok());
    CHECK_FALSE(p.file.status().message().empty());
  }
  // Only trailing padding may be cut.
  for (size_t n = data_end; n <= good.size(); ++n) CHECK(ParseExact(good.data(), n).file.ok());
  CHECK_THAT(std::string(ParseExact(good.data(), 10).file.status().message()),
             Catch::Contains("truncated"));
}

TEST_CASE("bad magic and versions are refused", "[gguf]") {
  Bytes b;
  b.Raw("GGUG", 4).U32(3).U64(0).U64(0);
  ExpectError(b, "bad magic");
  ExpectError(Bytes().Header(0, 0, 1), "unsupported GGUF version 1");
  ExpectError(Bytes().Header(0, 0, 4), "unsupported GGUF version 4");
  ExpectError(Bytes().Header(0, 0, 0x03000000), "big-endian");
  CHECK(ParseExact(Bytes().Header(0, 0, 2).b).file.ok());
  CHECK(ParseExact(Bytes().Header(0, 0, 3).b).file.ok());
  ExpectError(Bytes(), "truncated");
}

TEST_CASE("impossible counts and lengths are refused before allocating", "[gguf]") {
  ExpectError(Bytes().Header(0, kHuge), "metadata key count");
  ExpectError(Bytes().Header(kHuge, 0), "tensor count");
  ExpectError(Bytes().Header(0, std::numeric_limits<uint64_t>::max()), "metadata key count");
  // Key length past the end.
  ExpectError(Bytes().Header(0, 1).U64(kHuge).U32(kTypeU32).U32(0), "has length");
  // String value length past the end.
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeString).U64(1000).Raw("abc", 3), "key 'k'");
  // Array counts past the end, for fixed and variable element types.
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeArray).U32(kTypeU32).U64(kHuge),
              "runs past the end");
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeArray).U32(kTypeString).U64(kHuge),
              "runs past the end");
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeArray).U32(kTypeArray).U64(kHuge),
              "runs past the end");
  // A string element whose length runs past the end.
  ExpectError(
      Bytes().Header(0, 1).Str("k").U32(kTypeArray).U32(kTypeString).U64(2).Str("ok").U64(kHuge),
      "string array element 1");
  // Tensor count that fits the header check but not what follows the metadata.
  Bytes b;
  b.Header(2, 1).Str("k").U32(kTypeString).Str(std::string(40, 'x'));
  b.Tensor("t", {4}, kF32, 0);
  ExpectError(b, "tensor count 2 cannot fit");
}

TEST_CASE("unknown value types, bad bools, empty keys and duplicate keys are refused", "[gguf]") {
  ExpectError(Bytes().Header(0, 1).Str("k").U32(13).U32(0), "unknown GGUF value type 13");
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeArray).U32(99).U64(0),
              "unknown GGUF value type 99");
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeBool).U8(2), "neither 0 nor 1");
  ExpectError(Bytes().Header(0, 1).Str("k").U32(kTypeArray).U32(kTypeBool).U64(2).U8(1).U8(7),
              "bool array element 1");
  ExpectError(Bytes().Header(0, 1).Str("").U32(kTypeU32).U32(0), "empty key");
  ExpectError(Bytes().Header(0, 2).Str("k").U32(kTypeU32).U32(0).Str("k").U32(kTypeU32).U32(1),
              "duplicate metadata key 'k'");
}

TEST_CASE("array nesting depth is bounded", "[gguf]") {
  auto nested = [](int depth) {
    Bytes b;
    b.Header(0, 1).Str("deep").U32(kTypeArray);
    for (int i = 1; i < depth; ++i) b.U32(kTypeArray).U64(1);
    return b.U32(kTypeU32).U64(1).U32(42);
  };
  auto ok = ParseExact(nested(8).b);
  REQUIRE(ok.file.ok());
  auto a = ok.file->GetArray("deep").value();
  for (int i = 1; i < 8; ++i) a = a.ArrayAt(0).value();
  CHECK(a.UintAt(0).value() == 42);
  ExpectError(nested(9), "nested deeper");
  ExpectError(nested(100000), "nested deeper");
}

TEST_CASE("bad tensor infos are refused, naming the tensor", "[gguf]") {
  auto one = [](const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    Bytes b;
    b.Header(1, 0).Tensor("w", ne, type, offset).PadTo(32).Zeros(64);
    return b;
  };
  CHECK(ParseExact(one({4}, kF32, 0).b).file.ok());
  ExpectError(one({}, kF32, 0), "tensor 'w' has 0 dimensions");
  ExpectError(one({1, 1, 1, 1, 1}, kF32, 0), "tensor 'w' has 5 dimensions");
  ExpectError(one({4, 0}, kF32, 0), "dimension 1 has invalid size 0");
  ExpectError(one({uint64_t{1} << 63}, kF32, 0), "dimension 0 has invalid size");
  ExpectError(one({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0), "overflows");
  ExpectError(one({uint64_t{1} << 61, 2}, kF32, 0), "overflows");  // bytes overflow
  ExpectError(one({4}, 4, 0), "unknown ggml type id 4");
  ExpectError(one({4}, 99, 0), "unknown ggml type id 99");
  ExpectError(one({16, 2}, kQ4_0, 0), "not a whole number of Q4_0 blocks");
  ExpectError(one({4}, kF32, 1), "not a multiple of the alignment 32");
  ExpectError(one({4}, kF32, 64), "outside");
  ExpectError(one({17}, kF32, 0), "outside");
  ExpectError(one({4}, kF32, std::numeric_limits<uint64_t>::max() - 31), "outside");

  Bytes dup;
  dup.Header(2, 0).Tensor("w", {4}, kF32, 0).Tensor("w", {4}, kF32, 32).PadTo(32).Zeros(64);
  ExpectError(dup, "duplicate tensor 'w'");
  Bytes overlap;
  overlap.Header(2, 0).Tensor("a", {16}, kF32, 0).Tensor("b", {4}, kF32, 32).PadTo(32).Zeros(96);
  ExpectError(overlap, "tensors 'a' and 'b' overlap");
  Bytes no_data;  // data section would start past the end of the file
  no_data.Header(1, 0).Tensor("w", {4}, kF32, 0);
  ExpectError(no_data, "past the end");
}

TEST_CASE("general.alignment must be a usable power of two", "[gguf]") {
  auto with_alignment = [](uint32_t type, const std::vector<uint8_t>& value) {
    Bytes b;
    b.Header(1, 1).Str("general.alignment").U32(type).Raw(value.data(), value.size());
    return OneTensorTail(b, 64);
  };
  auto u32 = [](uint32_t v) {
    std::vector<uint8_t> out;
    GgufWriter::PutU32(out, v);
    return out;
  };
  auto good = ParseExact(with_alignment(kTypeU32, u32(64)).b);
  REQUIRE(good.file.ok());
  CHECK(good.file->alignment() == 64);
  CHECK(good.file->data_offset() % 64 == 0);
  ExpectError(with_alignment(kTypeU32, u32(0)), "not a power of two");
  ExpectError(with_alignment(kTypeU32, u32(48)), "not a power of two");
  ExpectError(with_alignment(kTypeU32, u32(1u << 31)), "not a power of two");
  std::vector<uint8_t> s;
  GgufWriter::PutString(s, "32");
  ExpectError(with_alignment(kTypeString, s), "general.alignment must be an integer");
}

TEST_CASE("DescribeGguf abbreviates long values", "[gguf]") {
  GgufWriter w;
  w.SetString("general.name", std::string(500, 'n'));
  std::vector<std::string> tokens(1000, "tok");
  w.SetArrayString("tokenizer.ggml.tokens", tokens);
  std::vector<float> x(32, 0.5f);
  for (int i = 0; i < 20; ++i) {
    REQUIRE(
        w.AddTensor("blk." + std::to_string(i) + ".w", GgmlType::kF32, {32}, x.data(), 128).ok());
  }
  auto bytes = w.WriteToBuffer().value();
  auto p = ParseExact(bytes);
  REQUIRE(p.file.ok());
  const std::string brief = DescribeGguf(*p.file, false);
  CHECK_THAT(brief, Catch::Contains("[string \xc3\x97 1000] \"tok\", \"tok\""));
  CHECK_THAT(brief, Catch::Contains("(500 bytes)"));
  CHECK(brief.find(std::string(100, 'n')) == std::string::npos);
  CHECK_THAT(brief, Catch::Contains("... 8 more"));
  CHECK_THAT(brief, Catch::Contains("20 tensors"));
  CHECK(brief.find("blk.19.w") == std::string::npos);
  CHECK_THAT(DescribeGguf(*p.file, true), Catch::Contains("blk.19.w"));
}

}  // namespace
}  // namespace kx
