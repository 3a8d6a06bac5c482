// Writer -> reader round trips: every value type, arrays, nested arrays,
// tensors of several types under several alignments, files on disk.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "gguf_test_util.h"
#include "model/gguf_info.h"
#include "test_util.h"

namespace kx {
namespace {

using test::ParseExact;

std::string RandomString(std::mt19937_64& rng, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(len(rng), '\0');
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

TEST_CASE("scalars of every type round-trip", "[gguf]") {
  GgufWriter w;
  w.SetU8("u8", 0xfe);
  w.SetI8("i8", -7);
  w.SetU16("u16", 0xfedc);
  w.SetI16("i16", -30000);
  w.SetU32("u32", 0xfedcba98u);
  w.SetI32("i32", std::numeric_limits<int32_t>::min());
  w.SetU64("u64", std::numeric_limits<uint64_t>::max());
  w.SetI64("i64", std::numeric_limits<int64_t>::min());
  w.SetF32("f32", 1.5f);
  w.SetF64("f64", -2.25e300);
  w.SetBool("yes", true);
  w.SetBool("no", false);
  w.SetString("str", std::string("a\0b\xc3\xa9", 5));
  w.SetString("empty", "");
  w.SetU32("replaced", 1);
  w.SetU32("replaced", 2);  // replaced in place, order kept
  auto bytes = w.WriteToBuffer();
  REQUIRE(bytes.ok());
  auto p = ParseExact(*bytes);
  REQUIRE(p.file.ok());
  const GgufFile& f = *p.file;

  CHECK(f.version() == 3);
  CHECK(f.num_kv() == 15);
  CHECK(f.KeyAt(0) == "u8");
  CHECK(f.KeyAt(14) == "replaced");
  CHECK(f.GetUint("replaced").value() == 2);
  CHECK(f.GetUint("u8").value() == 0xfe);
  CHECK(f.GetInt("i8").value() == -7);
  CHECK(f.GetUint("u16").value() == 0xfedc);
  CHECK(f.GetInt("i16").value() == -30000);
  CHECK(f.GetUint("u32").value() == 0xfedcba98u);
  CHECK(f.GetInt("i32").value() == std::numeric_limits<int32_t>::min());
  CHECK(f.GetUint("u64").value() == std::numeric_limits<uint64_t>::max());
  CHECK(f.GetInt("i64").value() == std::numeric_limits<int64_t>::min());
  CHECK(f.GetFloat("f32").value() == 1.5);
  CHECK(f.GetFloat("f64").value() == -2.25e300);
  CHECK(f.GetFloat("u32").value() == static_cast<double>(0xfedcba98u));
  CHECK(f.GetBool("yes").value());
  CHECK_FALSE(f.GetBool("no").value());
  CHECK(f.GetString("str").value() == std::string_view("a\0b\xc3\xa9", 5));
  CHECK(f.GetString("empty").value().empty());
  CHECK(f.KeyType("f64") == GgufType::kF64);
  CHECK_FALSE(f.KeyType("nope").has_value());
  CHECK(f.HasKey("i16"));
  CHECK_FALSE(f.HasKey("i1"));
  CHECK(f.tensors().empty());

  // Type and range errors name the key and the problem.
  auto neg = f.GetUint("i8");
  REQUIRE_FALSE(neg.ok());
  CHECK_THAT(std::string(neg.status().message()), Catch::Contains("'i8' is negative"));
  auto big = f.GetInt("u64");
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(std::string(big.status().message()), Catch::Contains("does not fit in int64"));
  auto wrong = f.GetString("u8");
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(std::string(wrong.status().message()), Catch::Contains("expected string"));
  CHECK_FALSE(f.GetBool("u8").ok());
  CHECK_FALSE(f.GetFloat("str").ok());
  CHECK_FALSE(f.GetArray("u8").ok());
  auto missing = f.GetUint("missing.key");
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("missing.key"));

  // Printable values.
  CHECK(f.ValueToString(0) == "254");
  CHECK(f.ValueToString(1) == "-7");
  CHECK(f.ValueToString(10) == "true");
  CHECK(f.ValueToString(12) == "\"a\\x00b\xc3\xa9\"");
}

TEST_CASE("arrays of every type round-trip with O(1) element access", "[gguf]") {
  auto rng = test::SeededRng(1234);
  std::uniform_int_distribution<int64_t> any(std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max());
  std::vector<uint8_t> u8(37);
  std::vector<int8_t> i8(5);
  std::vector<uint16_t> u16(9);
  std::vector<int16_t> i16(11);
  std::vector<uint32_t> u32(13);
  std::vector<int32_t> i32(17);
  std::vector<uint64_t> u64(3);
  std::vector<int64_t> i64(7);
  std::vector<float> f32(19);
  std::vector<double> f64(4);
  std::vector<bool> bools(23);
  for (auto& v : u8) v = static_cast<uint8_t>(any(rng));
  for (auto& v : i8) v = static_cast<int8_t>(any(rng));
  for (auto& v : u16) v = static_cast<uint16_t>(any(rng));
  for (auto& v : i16) v = static_cast<int16_t>(any(rng));
  for (auto& v : u32) v = static_cast<uint32_t>(any(rng));
  for (auto& v : i32) v = static_cast<int32_t>(any(rng));
  for (auto& v : u64) v = static_cast<uint64_t>(any(rng));
  for (auto& v : i64) v = any(rng);
  for (auto& v : f32) v = static_cast<float>(any(rng)) * 1e-15f;
  for (auto& v : f64) v = static_cast<double>(any(rng)) * 1e-9;
  for (size_t i = 0; i < bools.size(); ++i) bools[i] = (any(rng) & 1) != 0;
  constexpr size_t kVocab = 49152;
  std::vector<std::string> tokens(kVocab);
  for (auto& s : tokens) s = RandomString(rng, 12);

  GgufWriter w;
  w.SetArrayU8("u8", u8);
  w.SetArrayI8("i8", i8);
  w.SetArrayU16("u16", u16);
  w.SetArrayI16("i16", i16);
  w.SetArrayU32("u32", u32);
  w.SetArrayI32("i32", i32);
  w.SetArrayU64("u64", u64);
  w.SetArrayI64("i64", i64);
  w.SetArrayF32("f32", f32);
  w.SetArrayF64("f64", f64);
  w.SetArrayBool("bool", bools);
  w.SetArrayString("tokens", tokens);
  w.SetArrayI32("empty", {});
  // [[1, 2], [], [3]] as nested u32 arrays, built by hand.
  std::vector<uint8_t> nested;
  GgufWriter::PutU32(nested, static_cast<uint32_t>(GgufType::kArray));
  GgufWriter::PutU64(nested, 3);
  for (const std::vector<uint32_t>& inner : {std::vector<uint32_t>{1, 2}, {}, {3}}) {
    GgufWriter::PutU32(nested, static_cast<uint32_t>(GgufType::kU32));
    GgufWriter::PutU64(nested, inner.size());
    GgufWriter::PutBytes(nested, inner.data(), inner.size() * 4);
  }
  w.SetRaw("nested", GgufType::kArray, nested);
  auto bytes = w.WriteToBuffer();
  REQUIRE(bytes.ok());
  auto p = ParseExact(*bytes);
  REQUIRE(p.file.ok());
  const GgufFile& f = *p.file;

  auto check_ints = [&](const char* key, GgufType type, const auto& want) {
    INFO(key);
    auto a = f.GetArray(key);
    REQUIRE(a.ok());
    CHECK(a->type() == type);
    REQUIRE(a->size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(a->IntAt(i).value() == static_cast<int64_t>(want[i]));
    }
    auto all = a->ToInts();
    REQUIRE(all.ok());
    CHECK(all->size() == want.size());
    auto past = a->IntAt(want.size());
    REQUIRE_FALSE(past.ok());
    CHECK_THAT(std::string(past.status().message()), Catch::Contains("out of range"));
  };
  check_ints("u8", GgufType::kU8, u8);
  check_ints("i8", GgufType::kI8, i8);
  check_ints("u16", GgufType::kU16, u16);
  check_ints("i16", GgufType::kI16, i16);
  check_ints("u32", GgufType::kU32, u32);
  check_ints("i32", GgufType::kI32, i32);
  check_ints("i64", GgufType::kI64, i64);

  auto a64 = f.GetArray("u64").value();
  for (size_t i = 0; i < u64.size(); ++i) CHECK(a64.UintAt(i).value() == u64[i]);
  auto af = f.GetArray("f32").value();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(af.FloatAt(i).value() == f32[i]);
  CHECK(af.ToFloats().value() == f32);
  CHECK(std::memcmp(af.raw_data(), f32.data(), f32.size() * 4) == 0);
  CHECK_FALSE(af.StringAt(0).ok());
  auto ad = f.GetArray("f64").value();
  for (size_t i = 0; i < f64.size(); ++i) CHECK(ad.FloatAt(i).value() == f64[i]);
  auto ab = f.GetArray("bool").value();
  for (size_t i = 0; i < bools.size(); ++i) CHECK(ab.BoolAt(i).value() == bools[i]);

  auto at = f.GetArray("tokens").value();
  CHECK(at.type() == GgufType::kString);
  REQUIRE(at.size() == kVocab);
  CHECK(at.raw_data() == nullptr);
  CHECK_FALSE(at.IntAt(0).ok());
  size_t mismatches = 0;
  for (size_t i = 0; i < kVocab; ++i) {
    if (at.StringAtUnchecked(i) != tokens[i]) ++mismatches;
  }
  CHECK(mismatches == 0);
  CHECK(at.StringAt(kVocab - 1).value() == tokens.back());
  auto strs = at.ToStrings();
  REQUIRE(strs.ok());
  CHECK((*strs)[kVocab / 2] == tokens[kVocab / 2]);

  auto ae = f.GetArray("empty").value();
  CHECK(ae.empty());
  CHECK(ae.raw_data() != nullptr);
  CHECK_FALSE(ae.IntAt(0).ok());

  auto an = f.GetArray("nested").value();
  REQUIRE(an.size() == 3);
  CHECK(an.type() == GgufType::kArray);
  CHECK(an.ArrayAt(0)->size() == 2);
  CHECK(an.ArrayAt(0)->UintAt(1).value() == 2);
  CHECK(an.ArrayAt(1)->empty());
  CHECK(an.ArrayAt(2)->IntAt(0).value() == 3);
  CHECK_FALSE(an.ArrayAt(3).ok());

  // Printable values: abbreviated arrays.
  for (size_t i = 0; i < f.num_kv(); ++i) {
    const std::string v = f.ValueToString(i, 80);
    CHECK(v.size() <= 80 + 24);  // one cut element may overshoot the budget a little
    if (f.KeyAt(i) == "tokens") CHECK_THAT(v, Catch::StartsWith("[string \xc3\x97 49152]"));
    if (f.KeyAt(i) == "nested")
      CHECK(v == "[array \xc3\x97 3] [u32 \xc3\x97 2], [u32 \xc3\x97 0], [u32 \xc3\x97 1]");
    if (f.KeyAt(i) == "empty") CHECK(v == "[i32 \xc3\x97 0]");
  }
}

// Random bytes for a tensor of `type` and `ne`; returns them.
std::vector<uint8_t> RandomTensorBytes(std::mt19937_64& rng, GgmlType type, int64_t n) {
  const uint64_t bytes = TypeBytes(type, n).value();
  std::vector<uint8_t> v(bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_CASE("tensors of several types and alignments round-trip", "[gguf]") {
  auto rng = test::SeededRng(99);
  for (uint64_t alignment :
       {uint64_t{1}, uint64_t{8}, uint64_t{32}, uint64_t{64}, uint64_t{4096}}) {
    INFO("alignment " << alignment);
    struct Spec {
      const char* name;
      GgmlType type;
      std::vector<int64_t> ne;
    };
    const std::vector<Spec> specs = {
        {"norm.weight", GgmlType::kF32, {7}},
        {"emb.weight", GgmlType::kQ8_0, {64, 3}},
        {"blk.0.ffn_up.weight", GgmlType::kQ4_1, {96, 5}},
        {"h", GgmlType::kF16, {3, 2, 2}},
        {"k", GgmlType::kQ4_K, {256, 1, 1, 2}},
        {"b", GgmlType::kBF16, {5, 1}},
    };
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    if (alignment != kGgufDefaultAlignment) REQUIRE(w.SetAlignment(alignment).ok());
    std::vector<std::vector<uint8_t>> data;
    for (const Spec& s : specs) {
      int64_t n = 1;
      for (int64_t d : s.ne) n *= d;
      data.push_back(RandomTensorBytes(rng, s.type, n));
      REQUIRE(w.AddTensor(s.name, s.type, s.ne, data.back().data(), data.back().size()).ok());
    }
    auto bytes = w.WriteToBuffer();
    REQUIRE(bytes.ok());
    auto p = ParseExact(*bytes);
    REQUIRE(p.file.ok());
    const GgufFile& f = *p.file;
    CHECK(f.alignment() == alignment);
    CHECK(f.data_offset() % alignment == 0);
    REQUIRE(f.tensors().size() == specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const GgufTensorInfo* t = f.FindTensor(specs[i].name);
      REQUIRE(t != nullptr);
      CHECK(t == &f.tensors()[i]);
      CHECK(t->type == specs[i].type);
      CHECK(t->n_dims == specs[i].ne.size());
      for (uint32_t d = 0; d < kGgufMaxDims; ++d) {
        CHECK(t->ne[d] == (d < specs[i].ne.size() ? specs[i].ne[d] : 1));
      }
      CHECK(t->offset % alignment == 0);
      CHECK(t->size_bytes == data[i].size());
      CHECK(std::memcmp(f.TensorData(*t), data[i].data(), data[i].size()) == 0);
    }
    CHECK(f.FindTensor("nope") == nullptr);
    const std::string info = DescribeGguf(f, true);
    CHECK_THAT(info, Catch::Contains("blk.0.ffn_up.weight"));
    CHECK_THAT(info, Catch::Contains("Q4_1"));
    CHECK_THAT(info, Catch::Contains("[96, 5]"));
    CHECK_THAT(info, Catch::Contains("6 tensors"));
  }
}

TEST_CASE("produced tensors are written in order, the same bytes as copied ones", "[gguf]") {
  auto rng = test::SeededRng(1717);
  const std::vector<uint8_t> a = RandomTensorBytes(rng, GgmlType::kQ8_0, 64 * 3);
  const std::vector<uint8_t> b = RandomTensorBytes(rng, GgmlType::kQ4_0, 32 * 5);
  GgufWriter copied, produced;
  for (GgufWriter* w : {&copied, &produced}) w->SetString("general.architecture", "llama");
  REQUIRE(copied.AddTensor("a", GgmlType::kQ8_0, {64, 3}, a.data(), a.size()).ok());
  REQUIRE(copied.AddTensor("b", GgmlType::kQ4_0, {32, 5}, b.data(), b.size()).ok());
  std::vector<std::string> calls;
  auto from = [&calls](const std::string& name, const std::vector<uint8_t>& src) {
    return [&calls, name, &src](uint8_t* dst, uint64_t bytes) {
      calls.push_back(name);
      if (bytes != src.size()) return absl::InternalError("wrong size");
      std::memcpy(dst, src.data(), bytes);
      return absl::OkStatus();
    };
  };
  REQUIRE(produced.AddTensorProduced("a", GgmlType::kQ8_0, {64, 3}, from("a", a)).ok());
  REQUIRE(produced.AddTensorProduced("b", GgmlType::kQ4_0, {32, 5}, from("b", b)).ok());
  auto want = copied.WriteToBuffer();
  auto got = produced.WriteToBuffer();
  REQUIRE(want.ok());
  REQUIRE(got.ok());
  CHECK(*got == *want);
  CHECK(calls == std::vector<std::string>{"a", "b"});
  // The producer's error aborts the write; bad shapes are refused up front.
  REQUIRE(produced
              .AddTensorProduced("c", GgmlType::kF32, {4},
                                 [](uint8_t*, uint64_t) { return absl::DataLossError("boom"); })
              .ok());
  auto failed = produced.WriteToBuffer();
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(std::string(failed.status().message()), Catch::Contains("boom"));
  auto noop = [](uint8_t*, uint64_t) { return absl::OkStatus(); };
  CHECK_FALSE(produced.AddTensorProduced("d", GgmlType::kQ4_0, {16, 2}, noop).ok());
  CHECK_FALSE(produced.AddTensorProduced("e", GgmlType::kF32, {}, noop).ok());
  CHECK_FALSE(produced.AddTensorProduced("f", GgmlType::kF32, {0}, noop).ok());
  CHECK(absl::IsAlreadyExists(produced.AddTensorProduced("a", GgmlType::kF32, {4}, noop)));
  CHECK_FALSE(produced.AddTensorProduced("g", GgmlType::kF32, {4}, nullptr).ok());
}

TEST_CASE("writer rejects inconsistent tensors", "[gguf]") {
  GgufWriter w;
  std::vector<uint8_t> buf(1024, 0x5a);
  CHECK(w.AddTensor("a", GgmlType::kF32, {4}, buf.data(), 16).ok());
  CHECK(absl::IsAlreadyExists(w.AddTensor("a", GgmlType::kF32, {4}, buf.data(), 16)));
  CHECK_FALSE(w.AddTensor("b", GgmlType::kF32, {4}, buf.data(), 15).ok());
  CHECK_FALSE(w.AddTensor("c", GgmlType::kF32, {}, buf.data(), 4).ok());
  CHECK_FALSE(w.AddTensor("d", GgmlType::kF32, {1, 1, 1, 1, 1}, buf.data(), 4).ok());
  CHECK_FALSE(w.AddTensor("e", GgmlType::kF32, {0}, buf.data(), 0).ok());
  CHECK_FALSE(w.AddTensor("f", GgmlType::kQ4_0, {16, 2}, buf.data(), 18).ok());
  CHECK_FALSE(w.SetAlignment(0).ok());
  CHECK_FALSE(w.SetAlignment(48).ok());
  CHECK(w.num_tensors() == 1);
}

TEST_CASE("version 2 is read; WriteFile is atomic and readable with Open", "[gguf]") {
  const std::string dir = test::MakeTempDir();
  const std::string path = dir + "/roundtrip.gguf";
  GgufWriter w;
  w.SetVersion(2);
  w.SetU32("llama.block_count", 30);
  const float x[4] = {1.f, -2.f, 3.5f, 0.25f};
  REQUIRE(w.AddTensor("x", GgmlType::kF32, {4}, x, sizeof(x)).ok());
  REQUIRE(w.WriteFile(path).ok());
  CHECK(::access((path + ".tmp").c_str(), F_OK) != 0);
  auto f = GgufFile::Open(path);
  REQUIRE(f.ok());
  CHECK(f->version() == 2);
  CHECK(f->GetUint("llama.block_count").value() == 30);
  CHECK(std::memcmp(f->TensorData(f->tensors()[0]), x, sizeof(x)) == 0);
  // Moving the file keeps the views valid.
  GgufFile moved = std::move(*f);
  CHECK(std::memcmp(moved.TensorData(*moved.FindTensor("x")), x, sizeof(x)) == 0);

  auto bad = w.WriteFile(dir + "/no/such/dir/x.gguf");
  CHECK_FALSE(bad.ok());
  auto absent = GgufFile::Open(dir + "/absent.gguf");
  CHECK(absl::IsNotFound(absent.status()));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kx
