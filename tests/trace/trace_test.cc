// Activity traces: random round trips (both set encodings, 16- and 32-bit
// indices, optional sets and stats), the documented byte sizes, truncation at
// every byte, version handling (older major refused, newer minor read),
// corrupt records, writer argument checks, and SummarizeTrace on known sets.
#include "sparse/trace.h"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "test_util.h"

// Counts heap allocations while g_count_allocations is set, to check the
// writer's "no allocation per record after warm-up". Sanitizers replace
// operator new themselves, so there the check is skipped.
#define KX_TEST_COUNTS_ALLOCATIONS (!KX_TEST_SANITIZED)

std::atomic<bool> g_count_allocations{false};
std::atomic<uint64_t> g_allocations{0};

#if KX_TEST_COUNTS_ALLOCATIONS
// GCC warns that the inlined replacement delete frees what new returned: here
// that is malloc's memory, so free is the right call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t size) {
  if (g_count_allocations.load(std::memory_order_relaxed)) ++g_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

namespace {

using kx::sparse::LayerStats;
using kx::sparse::TraceHeader;
using kx::sparse::TraceReader;
using kx::sparse::TraceRecord;
using kx::sparse::TraceWriter;

std::string TempPath(const std::string& tag) {
  return "/tmp/kx_trace_test_" + tag + "_" + std::to_string(::getpid()) + ".kxtr";
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
  REQUIRE(out.good());
}

// Reads every record; the first error, or OK after the end record.
absl::Status ReadToEnd(const std::string& path, std::vector<TraceRecord>* out = nullptr) {
  auto reader = TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  TraceRecord rec;
  for (;;) {
    auto more = reader->Next(&rec);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (out != nullptr) out->push_back(rec);
  }
  // Next after the end keeps answering "no more".
  auto again = reader->Next(&rec);
  REQUIRE(again.ok());
  REQUIRE_FALSE(*again);
  return absl::OkStatus();
}

std::vector<uint64_t> RandomBits(std::mt19937_64& rng, uint32_t n_ff, double density) {
  std::vector<uint64_t> bits((n_ff + 63) / 64, 0);
  std::bernoulli_distribution on(density);
  for (uint32_t n = 0; n < n_ff; ++n) {
    if (on(rng)) bits[n / 64] |= uint64_t{1} << (n % 64);
  }
  return bits;
}

uint64_t SetBytes(uint32_t n_ff, const std::vector<uint64_t>& bits) {
  uint64_t count = 0;
  for (uint64_t w : bits) count += static_cast<uint64_t>(std::popcount(w));
  const uint64_t bitset = (n_ff + 7) / 8;
  const uint64_t list = 4 + count * (n_ff <= 65536 ? 2 : 4);
  return std::min(bitset, list);
}

TraceHeader SmallHeader() {
  TraceHeader h;
  h.model_sha256 = std::string(64, 'a');
  h.n_ff = {100, 40};
  h.group_size = 4;
  h.sparsity = 0.9f;
  h.metadata_json = R"({"prompt_set":"test"})";
  return h;
}

// A small trace with every kind of record: lists, bitsets, absent sets, stats.
std::string WriteSmallTrace(const std::string& tag) {
  const std::string path = TempPath(tag);
  auto writer = TraceWriter::Create(path, SmallHeader());
  REQUIRE(writer.ok());
  auto rng = kx::test::SeededRng(5);
  LayerStats stats;
  stats.present = LayerStats::kBytesRead | LayerStats::kLambda;
  stats.bytes_read = 4096;
  stats.lambda = 0.67;
  for (int step = 0; step < 3; ++step) {
    const auto p0 = RandomBits(rng, 100, 0.03);  // a list
    const auto a0 = RandomBits(rng, 100, 0.6);   // a bitset
    REQUIRE((*writer)->AddLayer(step, 0, p0.data(), a0.data(), step == 1 ? &stats : nullptr).ok());
    const auto a1 = RandomBits(rng, 40, 0.5);
    REQUIRE((*writer)->AddLayer(step, 1, nullptr, a1.data(), nullptr).ok());
  }
  REQUIRE((*writer)->Close().ok());
  return path;
}

}  // namespace

TEST_CASE("trace round trip of random records", "[trace]") {
  auto rng = kx::test::SeededRng(2024);
  TraceHeader h;
  h.model_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  h.n_ff = {1536, 100, 70000, 64, 1};  // 70000 > 65536: 32-bit list indices
  h.group_size = 16;
  h.sparsity = 0.85f;
  h.metadata_json = R"json({"predictor":"fc2·relu(fc1·x)","threshold":0.5})json";
  const std::string path = TempPath("roundtrip");
  auto writer = TraceWriter::Create(path, h);
  REQUIRE(writer.ok());

  const double densities[] = {0.0, 0.005, 0.02, 0.1, 0.5, 1.0};
  std::vector<TraceRecord> written;
  uint64_t expected_bytes = 0;
  for (int step = 0; step < 40; ++step) {
    for (int layer = 0; layer < h.n_layer(); ++layer) {
      const uint32_t n_ff = h.n_ff[static_cast<size_t>(layer)];
      TraceRecord r;
      r.step = static_cast<uint32_t>(step);
      r.layer = static_cast<uint32_t>(layer);
      r.has_predicted = rng() % 5 != 0;
      r.has_actual = rng() % 7 != 0;
      if (r.has_predicted) r.predicted = RandomBits(rng, n_ff, densities[rng() % 6]);
      if (r.has_actual) r.actual = RandomBits(rng, n_ff, densities[rng() % 6]);
      r.stats.present = static_cast<uint32_t>(rng()) & LayerStats::kKnownFields;
      r.stats.resident_groups = rng() % 1024;
      r.stats.reads = rng();
      r.stats.bytes_read = rng();
      r.stats.stall_ns = rng();
      r.stats.lambda = std::uniform_real_distribution<double>(0.1, 0.9)(rng);
      REQUIRE((*writer)
                  ->AddLayer(step, layer, r.has_predicted ? r.predicted.data() : nullptr,
                             r.has_actual ? r.actual.data() : nullptr, &r.stats)
                  .ok());
      expected_bytes += 20 + 8 * static_cast<uint64_t>(std::popcount(r.stats.present));
      if (r.has_predicted) expected_bytes += SetBytes(n_ff, r.predicted);
      if (r.has_actual) expected_bytes += SetBytes(n_ff, r.actual);
      written.push_back(std::move(r));
    }
  }
  CHECK((*writer)->records() == written.size());
  REQUIRE((*writer)->Close().ok());
  CHECK_FALSE((*writer)->Close().ok());  // twice
  CHECK_FALSE((*writer)->AddLayer(0, 0, nullptr, nullptr, nullptr).ok());

  // Sizes as docs/trace.md gives them: header + records + 16-byte end record.
  const uint64_t header_bytes = 28 + 64 + 4 * h.n_ff.size() + 4 + h.metadata_json.size();
  CHECK(ReadAll(path).size() == header_bytes + expected_bytes + 16);

  auto reader = TraceReader::Open(path);
  REQUIRE(reader.ok());
  const TraceHeader& got_h = reader->header();
  CHECK(got_h.version_major == kx::sparse::kTraceVersionMajor);
  CHECK(got_h.model_sha256 == h.model_sha256);
  CHECK(got_h.n_ff == h.n_ff);
  CHECK(got_h.group_size == h.group_size);
  CHECK(got_h.sparsity == h.sparsity);
  CHECK(got_h.metadata_json == h.metadata_json);
  CHECK(kx::sparse::CheckTraceMatches(got_h, h).ok());

  TraceRecord rec;
  rec.predicted.assign(5000, ~uint64_t{0});  // poison: must be replaced
  rec.actual.assign(3, ~uint64_t{0});
  size_t i = 0;
  for (;; ++i) {
    auto more = reader->Next(&rec);
    REQUIRE(more.ok());
    if (!*more) break;
    REQUIRE(i < written.size());
    const TraceRecord& w = written[i];
    INFO("record " << i << " step " << w.step << " layer " << w.layer);
    REQUIRE(rec.step == w.step);
    REQUIRE(rec.layer == w.layer);
    REQUIRE(rec.has_predicted == w.has_predicted);
    REQUIRE(rec.has_actual == w.has_actual);
    REQUIRE(rec.predicted == w.predicted);
    REQUIRE(rec.actual == w.actual);
    REQUIRE(rec.stats.present == w.stats.present);
    REQUIRE(rec.unknown_stats_fields == 0);
    const uint32_t p = w.stats.present;
    if (p & LayerStats::kResidentGroups)
      CHECK(rec.stats.resident_groups == w.stats.resident_groups);
    if (p & LayerStats::kReads) CHECK(rec.stats.reads == w.stats.reads);
    if (p & LayerStats::kBytesRead) CHECK(rec.stats.bytes_read == w.stats.bytes_read);
    if (p & LayerStats::kStallNs) CHECK(rec.stats.stall_ns == w.stats.stall_ns);
    if (p & LayerStats::kLambda) CHECK(rec.stats.lambda == w.stats.lambda);
  }
  CHECK(i == written.size());
  CHECK(reader->records() == written.size());
  ::unlink(path.c_str());
}

TEST_CASE("trace truncated at every byte gives an error, never a clean end", "[trace]") {
  const std::string path = WriteSmallTrace("trunc_src");
  const std::vector<uint8_t> bytes = ReadAll(path);
  REQUIRE(ReadToEnd(path).ok());
  const std::string cut = TempPath("trunc");
  for (size_t n = 0; n < bytes.size(); ++n) {
    WriteAll(cut, bytes, n);
    const absl::Status st = ReadToEnd(cut);
    if (st.ok()) FAIL("a trace cut to " << n << " of " << bytes.size() << " bytes read cleanly");
  }
  // A cut at a record boundary names the missing end record.
  WriteAll(cut, bytes, bytes.size() - 16);
  const absl::Status st = ReadToEnd(cut);
  CHECK(absl::IsDataLoss(st));
  CHECK(std::string(st.message()).find("no end record") != std::string::npos);
  // A writer destroyed without Close() leaves such a file too.
  {
    auto writer = TraceWriter::Create(cut, SmallHeader());
    REQUIRE(writer.ok());
    const std::vector<uint64_t> bits(2, 0x5);
    REQUIRE((*writer)->AddLayer(0, 0, bits.data(), bits.data(), nullptr).ok());
  }
  CHECK(absl::IsDataLoss(ReadToEnd(cut)));
  ::unlink(cut.c_str());
  ::unlink(path.c_str());
}

TEST_CASE("trace versions: other major refused, newer minor read", "[trace]") {
  const std::string path = WriteSmallTrace("version_src");
  const std::vector<uint8_t> bytes = ReadAll(path);
  const std::string patched = TempPath("version");

  std::vector<uint8_t> b = bytes;
  b[4] = 2;  // major 2
  WriteAll(patched, b, b.size());
  auto r = TraceReader::Open(patched);
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsFailedPrecondition(r.status()));
  CHECK(std::string(r.status().message()).find("version 2.0") != std::string::npos);

  b = bytes;
  b[0] = 'G';
  WriteAll(patched, b, b.size());
  r = TraceReader::Open(patched);
  REQUIRE_FALSE(r.ok());
  CHECK(std::string(r.status().message()).find("magic") != std::string::npos);

  // Same version but a stats bit this reader does not know: refused.
  const size_t header_bytes = 28 + 64 + 8 + 4 + SmallHeader().metadata_json.size();
  b = bytes;
  b[header_bytes + 16 + 3] = 0x80;  // stats mask of the first record, bit 31
  WriteAll(patched, b, b.size());
  CHECK(absl::IsDataLoss(ReadToEnd(patched)));

  // A newer minor: 8 extra header bytes, an unknown stats field (8 more
  // bytes) on the first record, and a record of an unknown kind. All skipped.
  b.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header_bytes));
  b[6] = 1;  // minor 1
  const uint32_t new_header_bytes = static_cast<uint32_t>(header_bytes + 8);
  std::memcpy(&b[8], &new_header_bytes, 4);
  b.insert(b.end(), 8, 0xEE);
  size_t pos = header_bytes;
  uint32_t first_len;
  std::memcpy(&first_len, &bytes[pos], 4);
  std::vector<uint8_t> first(bytes.begin() + static_cast<std::ptrdiff_t>(pos),
                             bytes.begin() + static_cast<std::ptrdiff_t>(pos + first_len));
  const uint32_t longer = first_len + 8;
  std::memcpy(&first[0], &longer, 4);
  first[16 + 3] |= 0x40;  // bit 30, after every known field
  first.insert(first.end(), 8, 0xAB);
  b.insert(b.end(), first.begin(), first.end());
  const uint8_t unknown_kind[12] = {12, 0, 0, 0, 9, 0, 0, 0, 1, 2, 3, 4};
  b.insert(b.end(), unknown_kind, unknown_kind + sizeof(unknown_kind));
  b.insert(b.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos + first_len), bytes.end());
  WriteAll(patched, b, b.size());
  std::vector<TraceRecord> newer, original;
  REQUIRE(ReadToEnd(path, &original).ok());
  const absl::Status st = ReadToEnd(patched, &newer);
  INFO(st.ToString());
  REQUIRE(st.ok());
  REQUIRE(newer.size() == original.size());
  CHECK(newer[0].unknown_stats_fields == 0x40000000u);
  CHECK(newer[0].actual == original[0].actual);
  CHECK(newer.back().actual == original.back().actual);
  ::unlink(patched.c_str());
  ::unlink(path.c_str());
}

TEST_CASE("trace reader rejects corrupt records and survives random damage", "[trace]") {
  // One record, layer 0 (n_ff 100), predicted as a list of {3, 7}.
  const std::string path = TempPath("corrupt_src");
  {
    auto writer = TraceWriter::Create(path, SmallHeader());
    REQUIRE(writer.ok());
    std::vector<uint64_t> pred(2, 0), act(2, 0);
    pred[0] = (1u << 3) | (1u << 7);
    act[0] = 0xFFFFFFFFFFULL;
    act[1] = 0xF;
    REQUIRE((*writer)->AddLayer(0, 0, pred.data(), act.data(), nullptr).ok());
    REQUIRE((*writer)->Close().ok());
  }
  const std::vector<uint8_t> bytes = ReadAll(path);
  const size_t rec = 28 + 64 + 8 + 4 + SmallHeader().metadata_json.size();
  REQUIRE(bytes[rec + 5] == 2);  // predicted: list (4 + 2·2 bytes < 13-byte bitset)
  REQUIRE(bytes[rec + 6] == 1);  // actual: bitset
  const std::string bad = TempPath("corrupt");
  auto expect_error = [&](std::vector<uint8_t> b, const char* what) {
    WriteAll(bad, b, b.size());
    const absl::Status st = ReadToEnd(bad);
    INFO(st.ToString());
    CHECK(absl::IsDataLoss(st));
    CHECK(std::string(st.message()).find(what) != std::string::npos);
  };
  std::vector<uint8_t> b = bytes;
  b[rec + 26] = 2;  // second index 7 → 2 (indices at rec+24, rec+26): not increasing
  expect_error(b, "strictly increasing");
  b = bytes;
  b[rec + 26] = 100;  // index 100 ≥ n_ff
  expect_error(b, "out of range");
  b = bytes;
  b[rec + 20] = 200;  // the list count: 200 neurons listed, n_ff is 100
  expect_error(b, "n_ff is 100");
  b = bytes;
  b[rec + 12] = 5;  // layer 5 of 2
  expect_error(b, "layer 5");
  b = bytes;
  b[rec + 28 + 12] = 0x10;  // bit 100 of the actual bitset (byte 12, bit 4)
  expect_error(b, "beyond n_ff");
  b = bytes;
  b[rec + 3] = 0x7F;  // record length ~2 GB
  expect_error(b, "claims");
  b = bytes;
  b[bytes.size() - 8] = 9;  // end record's count
  expect_error(b, "end record counts");
  b = bytes;
  b.push_back(0);
  expect_error(b, "after the end record");

  // Random byte damage: any outcome but a crash (ASan/UBSan builds check more).
  auto rng = kx::test::SeededRng(31337);
  for (int trial = 0; trial < 500; ++trial) {
    b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    WriteAll(bad, b, b.size());
    (void)ReadToEnd(bad);
  }
  ::unlink(bad.c_str());
  ::unlink(path.c_str());
}

TEST_CASE("trace writer checks its arguments", "[trace]") {
  const std::string path = TempPath("args");
  TraceHeader h = SmallHeader();
  h.model_sha256 = "ABC";
  CHECK(absl::IsInvalidArgument(TraceWriter::Create(path, h).status()));
  h = SmallHeader();
  h.n_ff.clear();
  CHECK(absl::IsInvalidArgument(TraceWriter::Create(path, h).status()));
  h = SmallHeader();
  h.n_ff[1] = 0;
  CHECK(absl::IsInvalidArgument(TraceWriter::Create(path, h).status()));
  h = SmallHeader();
  h.group_size = 0;
  CHECK(absl::IsInvalidArgument(TraceWriter::Create(path, h).status()));
  CHECK_FALSE(TraceWriter::Create("/nonexistent-dir/x.kxtr", SmallHeader()).ok());

  auto writer = TraceWriter::Create(path, SmallHeader());
  REQUIRE(writer.ok());
  std::vector<uint64_t> bits(2, 0);
  bits[1] = uint64_t{1} << 40;  // neuron 104 of a 100-neuron layer
  CHECK(absl::IsInvalidArgument((*writer)->AddLayer(0, 0, bits.data(), nullptr, nullptr)));
  bits[1] = uint64_t{1} << 35;  // neuron 99: fine
  CHECK((*writer)->AddLayer(0, 0, bits.data(), nullptr, nullptr).ok());
  CHECK(absl::IsInvalidArgument((*writer)->AddLayer(0, 2, bits.data(), nullptr, nullptr)));
  CHECK(absl::IsInvalidArgument((*writer)->AddLayer(0, -1, bits.data(), nullptr, nullptr)));
  CHECK(absl::IsInvalidArgument((*writer)->AddLayer(-1, 0, bits.data(), nullptr, nullptr)));
  LayerStats stats;
  stats.present = 1u << 20;
  CHECK(absl::IsInvalidArgument((*writer)->AddLayer(0, 0, nullptr, nullptr, &stats)));
  REQUIRE((*writer)->Close().ok());
  std::vector<TraceRecord> recs;
  REQUIRE(ReadToEnd(path, &recs).ok());
  CHECK(recs.size() == 1);

  // A trace checked against the wrong sidecar.
  TraceHeader other = SmallHeader();
  other.n_ff[1] = 41;
  const absl::Status st = kx::sparse::CheckTraceMatches(SmallHeader(), other);
  CHECK(absl::IsFailedPrecondition(st));
  CHECK(std::string(st.message()).find("layer 1 has n_ff 40, expected 41") != std::string::npos);
  other = SmallHeader();
  other.model_sha256 = std::string(64, 'b');
  CHECK(absl::IsFailedPrecondition(kx::sparse::CheckTraceMatches(SmallHeader(), other)));
  ::unlink(path.c_str());
}

TEST_CASE("SummarizeTrace: densities, group fraction, recall and precision", "[trace]") {
  const std::string path = TempPath("summary");
  TraceHeader h;
  h.n_ff = {64, 128};
  h.group_size = 16;
  {
    auto writer = TraceWriter::Create(path, h);
    REQUIRE(writer.ok());
    // Layer 0, two steps: P = neurons 0..15, A = 8..23 → |P∩A| = 8.
    const uint64_t p0 = 0xFFFF, a0 = 0xFFFF00;
    for (int step = 0; step < 2; ++step)
      REQUIRE((*writer)->AddLayer(step, 0, &p0, &a0, nullptr).ok());
    // Layer 1: P = {0}, A = {0, 64, 127}; and one record with A only = {5}.
    const uint64_t p1[2] = {1, 0}, a1[2] = {1, 1 | (uint64_t{1} << 63)}, a2[2] = {1u << 5, 0};
    REQUIRE((*writer)->AddLayer(0, 1, p1, a1, nullptr).ok());
    REQUIRE((*writer)->AddLayer(4, 1, nullptr, a2, nullptr).ok());
    REQUIRE((*writer)->Close().ok());
  }
  auto s = kx::sparse::SummarizeTrace(path);
  REQUIRE(s.ok());
  CHECK(s->records == 4);
  CHECK(s->steps == 5);
  REQUIRE(s->layers.size() == 2);
  const auto& l0 = s->layers[0];
  CHECK(l0.records == 2);
  CHECK(l0.mean_predicted_fraction == Approx(16.0 / 64));
  CHECK(l0.mean_actual_fraction == Approx(16.0 / 64));
  CHECK(l0.mean_actual_group_fraction == Approx(2.0 / 4));  // groups 0 and 1
  CHECK(l0.recall == Approx(0.5));
  CHECK(l0.precision == Approx(0.5));
  const auto& l1 = s->layers[1];
  CHECK(l1.records == 2);
  CHECK(l1.records_with_both == 1);
  CHECK(l1.mean_predicted_fraction == Approx(1.0 / 128));
  CHECK(l1.mean_actual_fraction == Approx((3.0 / 128 + 1.0 / 128) / 2));
  CHECK(l1.mean_actual_group_fraction == Approx((3.0 / 8 + 1.0 / 8) / 2));
  CHECK(l1.recall == Approx(1.0 / 3));
  CHECK(l1.precision == Approx(1.0));
  const std::string table = kx::sparse::FormatTraceSummary(*s);
  CHECK(table.find("2 layers") != std::string::npos);
  CHECK(table.find("0.333") != std::string::npos);
  CHECK(absl::IsNotFound(kx::sparse::SummarizeTrace(path + ".missing").status()));
  ::unlink(path.c_str());
}

TEST_CASE("TraceWriter::AddLayer does not allocate after warm-up", "[trace]") {
  if (!KX_TEST_COUNTS_ALLOCATIONS) {
    WARN("sanitizer build: allocations are not counted");
    return;
  }
  const std::string path = TempPath("alloc");
  TraceHeader h;
  h.n_ff = std::vector<uint32_t>(30, 1536);  // SmolLM2-135M's shape
  h.group_size = 16;
  auto writer = TraceWriter::Create(path, h);
  REQUIRE(writer.ok());
  auto rng = kx::test::SeededRng(8);
  const auto sparse_bits = RandomBits(rng, 1536, 0.01);  // index lists
  const auto dense_bits = RandomBits(rng, 1536, 0.3);    // bitsets
  LayerStats stats;
  stats.present = LayerStats::kKnownFields;
  REQUIRE((*writer)->AddLayer(0, 0, sparse_bits.data(), dense_bits.data(), &stats).ok());
  g_allocations = 0;
  g_count_allocations = true;
  // ~400 bytes a record: 6000 records cross the 1 MiB flush point twice.
  bool all_ok = true;
  for (int step = 1; step <= 200; ++step) {
    for (int layer = 0; layer < 30; ++layer) {
      all_ok &=
          (*writer)->AddLayer(step, layer, sparse_bits.data(), dense_bits.data(), &stats).ok();
    }
  }
  g_count_allocations = false;
  CHECK(all_ok);
  CHECK(g_allocations.load() == 0);
  REQUIRE((*writer)->Close().ok());
  std::vector<TraceRecord> recs;
  REQUIRE(ReadToEnd(path, &recs).ok());
  CHECK(recs.size() == 6001);
  CHECK(recs.back().predicted == sparse_bits);
  ::unlink(path.c_str());
}
