// Activity traces: per decode step and FFN layer, which neurons the predictor
// said would be active and which actually were, plus optional statistics the
// hybrid runtime adds (resident groups, reads, bytes, stalls, λ). A trace is
// what the engine hands to the simulator and what the hybrid runtime's
// policies are evaluated on.
//
// Neurons are numbered in the sidecar's permuted, group-major order (neuron =
// group · group_size + slot), so a group's intensity is the count of set bits
// in its group_size-bit slice. The byte-level format is in docs/trace.md:
// header ("KXTR", version, model SHA-256, n_ff per layer, group size,
// sparsity, JSON metadata), then records, then an end record; each neuron set
// stored as a bitset or a sorted index list, whichever is smaller.
//
//   kx::sparse::TraceHeader h;
//   h.model_sha256 = hex; h.n_ff = std::vector<uint32_t>(30, 1536); h.group_size = 16;
//   KX_ASSIGN_OR_RETURN(auto writer, kx::sparse::TraceWriter::Create(path, h));
//   KX_RETURN_IF_ERROR(writer->AddLayer(step, layer, predicted_bits, actual_bits, nullptr));
//   KX_RETURN_IF_ERROR(writer->Close());
//
//   KX_ASSIGN_OR_RETURN(auto reader, kx::sparse::TraceReader::Open(path));
//   kx::sparse::TraceRecord rec;
//   for (;;) {
//     KX_ASSIGN_OR_RETURN(bool more, reader.Next(&rec));
//     if (!more) break;
//     ...
//   }
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace kx::sparse {

// Format version. A reader accepts any minor version of its major: minors only
// add header bytes (skipped through header_bytes) and optional record fields
// (new bits of the stats mask, 8 bytes each, skipped by count).
inline constexpr uint16_t kTraceVersionMajor = 1;
inline constexpr uint16_t kTraceVersionMinor = 0;

// Largest FFN width and layer count a trace may describe (sanity bounds
// checked before anything is allocated from a file's numbers).
inline constexpr uint32_t kTraceMaxNeurons = 1u << 20;
inline constexpr uint32_t kTraceMaxLayers = 1u << 12;
inline constexpr uint32_t kTraceMaxMetadataBytes = 16u << 20;

struct TraceHeader {
  uint16_t version_major = kTraceVersionMajor;  // set by the writer; read from the file
  uint16_t version_minor = kTraceVersionMinor;
  std::string model_sha256;    // 64 lowercase hex digits, or empty when unknown
  std::vector<uint32_t> n_ff;  // per layer; n_layer = n_ff.size()
  uint32_t group_size = 1;     // neurons per group in the permuted order
  float sparsity = 0.0f;       // the sidecar's target sparsity (fraction inactive), informative
  std::string metadata_json;   // free-form JSON (prompt set, predictor, policy, ...); may be empty

  int n_layer() const { return static_cast<int>(n_ff.size()); }
  // Words of a layer's bitset (64 neurons per word).
  int words(int layer) const {
    return static_cast<int>((n_ff[static_cast<size_t>(layer)] + 63) / 64);
  }
};

// Checks that a trace was made for the model/sidecar described by `expected`:
// same layer count, n_ff per layer and group size, and the same model SHA-256
// when both are known. FailedPrecondition naming the first difference.
absl::Status CheckTraceMatches(const TraceHeader& trace, const TraceHeader& expected);

// Optional per-layer statistics. Bit i of `present` says field i is set; the
// order of bits is the order of fields on disk and never changes. New fields
// get new bits (each 8 bytes on disk), so old readers skip them.
struct LayerStats {
  enum Field : uint32_t {
    kResidentGroups = 1u << 0,  // groups of this layer resident in the fast tier
    kReads = 1u << 1,           // read / transfer operations issued for this layer
    kBytesRead = 1u << 2,       // bytes moved into the fast tier for this layer
    kStallNs = 1u << 3,         // ns compute waited on I/O for this layer
    kLambda = 1u << 4,          // the TAM decay λ in force (a double)
  };
  static constexpr uint32_t kKnownFields = 0x1F;
  static constexpr int kNumKnownFields = 5;

  uint32_t present = 0;
  uint64_t resident_groups = 0;
  uint64_t reads = 0;
  uint64_t bytes_read = 0;
  uint64_t stall_ns = 0;
  double lambda = 0.0;
};

// One (step, layer) record as read back. Bitsets have header.words(layer)
// words; bits at or beyond n_ff are zero.
struct TraceRecord {
  uint32_t step = 0;
  uint32_t layer = 0;
  bool has_predicted = false;
  bool has_actual = false;
  std::vector<uint64_t> predicted;    // empty when !has_predicted
  std::vector<uint64_t> actual;       // empty when !has_actual
  LayerStats stats;                   // stats.present == 0 when none
  uint32_t unknown_stats_fields = 0;  // bits of fields newer than this reader (skipped)
};

// Writes a trace. Records are encoded into an in-memory buffer and written in
// large chunks; after the first calls nothing allocates. Not thread-safe: one
// writer per file, called from one thread (the engine's main thread).
class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the header. InvalidArgument for a
  // header that cannot be written (no layers, n_ff of 0 or above
  // kTraceMaxNeurons, group_size 0, a model_sha256 that is not 64 hex digits).
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Create(const std::string& path,
                                                             const TraceHeader& header);

  // Appends one record. `predicted_bits` / `actual_bits` hold header.words(layer)
  // words (bit n = neuron n, group-major); either may be null (not recorded).
  // `stats` may be null. InvalidArgument for a layer out of range, a negative
  // step, bits set at or beyond n_ff, or unknown stats bits.
  absl::Status AddLayer(int step, int layer, const uint64_t* predicted_bits,
                        const uint64_t* actual_bits, const LayerStats* stats);

  // Writes the end record and closes the file. A trace without it reads as
  // truncated. Further AddLayer/Close calls fail.
  absl::Status Close();

  // Records written so far.
  uint64_t records() const { return records_; }

  // Closes without the end record when Close() was never called (the file then
  // reads as truncated, which it is).
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

 private:
  TraceWriter() = default;
  absl::Status Flush();
  void AppendSet(const uint64_t* bits, uint32_t n_ff, uint32_t count, uint8_t encoding);

  std::string path_;
  TraceHeader header_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;  // pending bytes; capacity reserved at Create
  uint64_t records_ = 0;
  absl::Status error_;  // first write error; sticky
};

// Reads and validates a trace, record by record (constant memory).
class TraceReader {
 public:
  // Opens `path` and validates the header: magic, major version, sizes within
  // bounds, SHA-256 syntax. Errors say which and where.
  static absl::StatusOr<TraceReader> Open(const std::string& path);

  const TraceHeader& header() const { return header_; }

  // Reads the next record into `out` (its vectors are reused). Returns true
  // for a record, false after the end record (and on every later call), or an
  // error: DataLoss for a truncated or malformed file (with the byte offset),
  // never a crash.
  absl::StatusOr<bool> Next(TraceRecord* out);

  // Records read so far.
  uint64_t records() const { return records_; }

  TraceReader(TraceReader&&) noexcept = default;
  TraceReader& operator=(TraceReader&&) noexcept = default;

 private:
  TraceReader() = default;
  absl::Status ReadExact(void* dst, size_t n, const char* what);
  // Reads one record into body_ and checks its framing; returns its kind.
  absl::StatusOr<uint8_t> ReadRecord();
  absl::StatusOr<bool> DecodeLayerRecord(TraceRecord* out);
  absl::Status BadRecord(const std::string& why) const;
  absl::Status DecodeSet(const uint8_t*& p, const uint8_t* end, uint8_t encoding, uint32_t n_ff,
                         std::vector<uint64_t>* bits);

  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::string path_;
  TraceHeader header_;
  uint64_t offset_ = 0;        // bytes consumed, for error messages
  uint64_t record_start_ = 0;  // offset of the record being decoded
  uint64_t max_record_bytes_ = 0;
  uint64_t records_ = 0;
  bool ended_ = false;
  std::vector<uint8_t> body_;  // one record's bytes, reused
};

// Per-layer summary of a trace, for reports and policy sanity checks.
struct TraceLayerSummary {
  uint64_t records = 0;                   // records of this layer
  uint64_t records_with_both = 0;         // records with predicted and actual sets
  double mean_predicted_fraction = 0;     // mean |P| / n_ff over records with P
  double mean_actual_fraction = 0;        // mean |A| / n_ff over records with A
  double mean_actual_group_fraction = 0;  // mean share of groups with ≥1 active neuron
  double recall = 0;     // Σ|P∩A| / Σ|A| over records with both (1 when Σ|A| = 0)
  double precision = 0;  // Σ|P∩A| / Σ|P| over records with both (1 when Σ|P| = 0)
};

struct TraceSummary {
  TraceHeader header;
  uint64_t records = 0;
  uint32_t steps = 0;                     // 1 + the largest step seen (0 for an empty trace)
  std::vector<TraceLayerSummary> layers;  // one per header layer
};

// Reads a whole trace and summarises it; any read error is returned.
absl::StatusOr<TraceSummary> SummarizeTrace(const std::string& path);

// A plain-text table of a summary (one line per layer, then totals).
std::string FormatTraceSummary(const TraceSummary& summary);

}  // namespace kx::sparse
