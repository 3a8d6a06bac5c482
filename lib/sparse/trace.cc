// Trace writer and reader. The byte layout is documented in docs/trace.md;
// the offsets below follow it. Everything on disk is little-endian (the only
// byte order kairox runs on; static_assert below).
#include "sparse/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace kx::sparse {
namespace {

static_assert(std::endian::native == std::endian::little, "trace I/O assumes little-endian");

constexpr char kMagic[4] = {'K', 'X', 'T', 'R'};
// Fixed part of the header: magic, major, minor, header_bytes, n_layer,
// group_size, sparsity, sha256 length.
constexpr uint32_t kHeaderFixedBytes = 28;
// Header bytes a future minor may add beyond what this reader knows.
constexpr uint32_t kMaxHeaderExtensionBytes = 1u << 20;
constexpr uint32_t kSha256HexChars = 64;

constexpr uint8_t kKindLayer = 1;
constexpr uint8_t kKindEnd = 2;
constexpr uint32_t kLayerRecordFixedBytes = 20;
constexpr uint32_t kEndRecordBytes = 16;
constexpr uint32_t kRecordLengthBytes = 4;
constexpr uint32_t kMinRecordBytes = 8;  // length + kind + 3 reserved
constexpr uint32_t kStatFieldBytes = 8;
constexpr uint32_t kMaxStatFields = 32;

constexpr uint8_t kSetAbsent = 0;
constexpr uint8_t kSetBitset = 1;
constexpr uint8_t kSetList = 2;
constexpr uint32_t kListCountBytes = 4;
// Index lists use 16-bit indices when every neuron id fits.
constexpr uint32_t kMaxNeuronsFor16BitIndex = 1u << 16;

// Writes are batched into chunks of this size.
constexpr size_t kWriteChunkBytes = size_t{1} << 20;

uint32_t BitsetBytes(uint32_t n_ff) { return (n_ff + 7) / 8; }
uint32_t IndexBytes(uint32_t n_ff) { return n_ff <= kMaxNeuronsFor16BitIndex ? 2 : 4; }
uint64_t ListBytes(uint32_t n_ff, uint64_t count) {
  return kListCountBytes + count * IndexBytes(n_ff);
}
// The largest a record of this layer can legally be.
uint64_t MaxLayerRecordBytes(uint32_t n_ff) {
  const uint64_t max_set = std::max<uint64_t>(BitsetBytes(n_ff), ListBytes(n_ff, n_ff));
  return kLayerRecordFixedBytes + 2 * max_set + uint64_t{kStatFieldBytes} * kMaxStatFields;
}

template <typename T>
void Put(std::vector<uint8_t>* buf, T v) {
  const size_t at = buf->size();
  buf->resize(at + sizeof(T));
  std::memcpy(buf->data() + at, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool IsLowerHex(const std::string& s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status ValidateHeader(const TraceHeader& h) {
  if (h.n_ff.empty() || h.n_ff.size() > kTraceMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("trace header: n_layer ", h.n_ff.size(),
                                                   " not in [1, ", kTraceMaxLayers, "]"));
  }
  for (size_t l = 0; l < h.n_ff.size(); ++l) {
    if (h.n_ff[l] == 0 || h.n_ff[l] > kTraceMaxNeurons) {
      return absl::InvalidArgumentError(absl::StrCat("trace header: n_ff ", h.n_ff[l], " of layer ",
                                                     l, " not in [1, ", kTraceMaxNeurons, "]"));
    }
  }
  if (h.group_size == 0 || h.group_size > kTraceMaxNeurons) {
    return absl::InvalidArgumentError(absl::StrCat("trace header: group_size ", h.group_size,
                                                   " not in [1, ", kTraceMaxNeurons, "]"));
  }
  if (!h.model_sha256.empty() &&
      (h.model_sha256.size() != kSha256HexChars || !IsLowerHex(h.model_sha256))) {
    return absl::InvalidArgumentError(absl::StrCat("trace header: model_sha256 \"", h.model_sha256,
                                                   "\" is not 64 lowercase hex digits"));
  }
  if (h.metadata_json.size() > kTraceMaxMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("trace header: metadata of ",
                                                   h.metadata_json.size(), " bytes exceeds ",
                                                   kTraceMaxMetadataBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTraceMatches(const TraceHeader& trace, const TraceHeader& expected) {
  if (trace.n_ff.size() != expected.n_ff.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trace has ", trace.n_ff.size(), " layers, expected ", expected.n_ff.size()));
  }
  for (size_t l = 0; l < trace.n_ff.size(); ++l) {
    if (trace.n_ff[l] != expected.n_ff[l]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trace layer ", l, " has n_ff ", trace.n_ff[l], ", expected ", expected.n_ff[l]));
    }
  }
  if (trace.group_size != expected.group_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("trace group_size ", trace.group_size, ", expected ", expected.group_size));
  }
  if (!trace.model_sha256.empty() && !expected.model_sha256.empty() &&
      trace.model_sha256 != expected.model_sha256) {
    return absl::FailedPreconditionError(absl::StrCat("trace was made for model sha256 ",
                                                      trace.model_sha256, ", expected ",
                                                      expected.model_sha256));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- writer

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Create(const std::string& path,
                                                                 const TraceHeader& header) {
  KX_RETURN_IF_ERROR(ValidateHeader(header));
  std::unique_ptr<TraceWriter> w(new TraceWriter());
  w->path_ = path;
  w->header_ = header;
  w->header_.version_major = kTraceVersionMajor;
  w->header_.version_minor = kTraceVersionMinor;
  uint64_t max_record = kEndRecordBytes;
  for (uint32_t n : header.n_ff) max_record = std::max(max_record, MaxLayerRecordBytes(n));
  // Room for a full chunk plus one record, and for the header: no growth later.
  const uint64_t header_bytes = kHeaderFixedBytes + header.model_sha256.size() +
                                4 * header.n_ff.size() + 4 + header.metadata_json.size();
  w->buffer_.reserve(std::max<uint64_t>(kWriteChunkBytes + max_record, header_bytes));

  w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) {
    return absl::InternalError(absl::StrCat("creating trace ", path, ": ", std::strerror(errno)));
  }
  std::vector<uint8_t>& b = w->buffer_;
  b.insert(b.end(), kMagic, kMagic + sizeof(kMagic));
  Put<uint16_t>(&b, kTraceVersionMajor);
  Put<uint16_t>(&b, kTraceVersionMinor);
  Put<uint32_t>(&b, static_cast<uint32_t>(header_bytes));
  Put<uint32_t>(&b, static_cast<uint32_t>(header.n_ff.size()));
  Put<uint32_t>(&b, header.group_size);
  Put<float>(&b, header.sparsity);
  Put<uint32_t>(&b, static_cast<uint32_t>(header.model_sha256.size()));
  b.insert(b.end(), header.model_sha256.begin(), header.model_sha256.end());
  for (uint32_t n : header.n_ff) Put<uint32_t>(&b, n);
  Put<uint32_t>(&b, static_cast<uint32_t>(header.metadata_json.size()));
  b.insert(b.end(), header.metadata_json.begin(), header.metadata_json.end());
  KX_CHECK(b.size() == header_bytes);
  KX_RETURN_IF_ERROR(w->Flush());
  return w;
}

TraceWriter::~TraceWriter() {
  if (fd_ >= 0) {
    (void)Flush();
    ::close(fd_);
  }
}

absl::Status TraceWriter::Flush() {
  size_t done = 0;
  while (error_.ok() && done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = absl::InternalError(absl::StrCat("writing trace ", path_, ": ",
                                                n < 0 ? std::strerror(errno) : "short write"));
    } else {
      done += static_cast<size_t>(n);
    }
  }
  buffer_.clear();  // keeps capacity
  return error_;
}

void TraceWriter::AppendSet(const uint64_t* bits, uint32_t n_ff, uint32_t count, uint8_t encoding) {
  if (encoding == kSetBitset) {
    const size_t at = buffer_.size();
    buffer_.resize(at + BitsetBytes(n_ff));
    std::memcpy(buffer_.data() + at, bits, BitsetBytes(n_ff));  // little-endian words = bytes
    return;
  }
  Put<uint32_t>(&buffer_, count);
  const bool narrow = IndexBytes(n_ff) == 2;
  const uint32_t n_words = (n_ff + 63) / 64;
  for (uint32_t w = 0; w < n_words; ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      const uint32_t index = w * 64 + static_cast<uint32_t>(std::countr_zero(word));
      if (narrow) {
        Put<uint16_t>(&buffer_, static_cast<uint16_t>(index));
      } else {
        Put<uint32_t>(&buffer_, index);
      }
    }
  }
}

absl::Status TraceWriter::AddLayer(int step, int layer, const uint64_t* predicted_bits,
                                   const uint64_t* actual_bits, const LayerStats* stats) {
  if (fd_ < 0) return absl::FailedPreconditionError("TraceWriter::AddLayer after Close");
  KX_RETURN_IF_ERROR(error_);
  if (layer < 0 || layer >= header_.n_layer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace: layer ", layer, " not in [0, ", header_.n_layer(), ")"));
  }
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("trace: negative step ", step));
  const uint32_t stats_mask = stats != nullptr ? stats->present : 0;
  if ((stats_mask & ~LayerStats::kKnownFields) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace: unknown LayerStats bits 0x", absl::Hex(stats_mask)));
  }
  const uint32_t n_ff = header_.n_ff[static_cast<size_t>(layer)];
  const uint32_t n_words = (n_ff + 63) / 64;
  const uint64_t tail_mask = n_ff % 64 == 0 ? 0 : ~uint64_t{0} << (n_ff % 64);

  // Per set: count the bits (and refuse bits past n_ff), then pick the
  // smaller encoding.
  const uint64_t* sets[2] = {predicted_bits, actual_bits};
  uint32_t counts[2] = {0, 0};
  uint8_t encodings[2] = {kSetAbsent, kSetAbsent};
  uint64_t record_bytes =
      kLayerRecordFixedBytes +
      uint64_t{kStatFieldBytes} * static_cast<uint32_t>(std::popcount(stats_mask));
  for (int s = 0; s < 2; ++s) {
    if (sets[s] == nullptr) continue;
    if ((sets[s][n_words - 1] & tail_mask) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("trace: ", s == 0 ? "predicted" : "actual",
                                                     " bits set at or beyond n_ff ", n_ff,
                                                     " (layer ", layer, ", step ", step, ")"));
    }
    for (uint32_t w = 0; w < n_words; ++w)
      counts[s] += static_cast<uint32_t>(std::popcount(sets[s][w]));
    const uint64_t list = ListBytes(n_ff, counts[s]);
    encodings[s] = list < BitsetBytes(n_ff) ? kSetList : kSetBitset;
    record_bytes += encodings[s] == kSetList ? list : BitsetBytes(n_ff);
  }

  Put<uint32_t>(&buffer_, static_cast<uint32_t>(record_bytes));
  Put<uint8_t>(&buffer_, kKindLayer);
  Put<uint8_t>(&buffer_, encodings[0]);
  Put<uint8_t>(&buffer_, encodings[1]);
  Put<uint8_t>(&buffer_, 0);  // reserved
  Put<uint32_t>(&buffer_, static_cast<uint32_t>(step));
  Put<uint32_t>(&buffer_, static_cast<uint32_t>(layer));
  Put<uint32_t>(&buffer_, stats_mask);
  for (int s = 0; s < 2; ++s) {
    if (encodings[s] != kSetAbsent) AppendSet(sets[s], n_ff, counts[s], encodings[s]);
  }
  if (stats_mask & LayerStats::kResidentGroups) Put<uint64_t>(&buffer_, stats->resident_groups);
  if (stats_mask & LayerStats::kReads) Put<uint64_t>(&buffer_, stats->reads);
  if (stats_mask & LayerStats::kBytesRead) Put<uint64_t>(&buffer_, stats->bytes_read);
  if (stats_mask & LayerStats::kStallNs) Put<uint64_t>(&buffer_, stats->stall_ns);
  if (stats_mask & LayerStats::kLambda) Put<double>(&buffer_, stats->lambda);
  ++records_;
  if (buffer_.size() >= kWriteChunkBytes) return Flush();
  return absl::OkStatus();
}

absl::Status TraceWriter::Close() {
  if (fd_ < 0) return absl::FailedPreconditionError("TraceWriter::Close called twice");
  Put<uint32_t>(&buffer_, kEndRecordBytes);
  Put<uint8_t>(&buffer_, kKindEnd);
  for (int i = 0; i < 3; ++i) Put<uint8_t>(&buffer_, 0);  // reserved
  Put<uint64_t>(&buffer_, records_);
  absl::Status st = Flush();
  if (::close(fd_) != 0 && st.ok()) {
    st = absl::InternalError(absl::StrCat("closing trace ", path_, ": ", std::strerror(errno)));
  }
  fd_ = -1;
  return st;
}

// ---------------------------------------------------------------- reader

absl::Status TraceReader::ReadExact(void* dst, size_t n, const char* what) {
  const size_t got = n == 0 ? 0 : std::fread(dst, 1, n, file_.get());
  if (got != n) {
    return absl::DataLossError(absl::StrCat("trace ", path_, " truncated at byte ", offset_ + got,
                                            " while reading ", what, " (", n, " bytes needed)"));
  }
  offset_ += n;
  return absl::OkStatus();
}

absl::StatusOr<TraceReader> TraceReader::Open(const std::string& path) {
  TraceReader r;
  r.path_ = path;
  r.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.file_) {
    const std::string msg = absl::StrCat("opening trace ", path, ": ", std::strerror(errno));
    return errno == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
  }
  uint8_t fixed[kHeaderFixedBytes];
  KX_RETURN_IF_ERROR(r.ReadExact(fixed, sizeof(fixed), "the header"));
  if (std::memcmp(fixed, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a kairox trace (magic is not \"KXTR\")"));
  }
  TraceHeader& h = r.header_;
  h.version_major = Get<uint16_t>(fixed + 4);
  h.version_minor = Get<uint16_t>(fixed + 6);
  if (h.version_major != kTraceVersionMajor) {
    return absl::FailedPreconditionError(
        absl::StrCat("trace ", path, " has format version ", h.version_major, ".", h.version_minor,
                     "; this reader understands version ", kTraceVersionMajor, ".x"));
  }
  const uint32_t header_bytes = Get<uint32_t>(fixed + 8);
  const uint32_t n_layer = Get<uint32_t>(fixed + 12);
  h.group_size = Get<uint32_t>(fixed + 16);
  h.sparsity = Get<float>(fixed + 20);
  const uint32_t sha_len = Get<uint32_t>(fixed + 24);
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("trace ", path, ": bad header: ", why));
  };
  if (n_layer == 0 || n_layer > kTraceMaxLayers) {
    return bad(absl::StrCat("n_layer ", n_layer, " not in [1, ", kTraceMaxLayers, "]"));
  }
  if (sha_len != 0 && sha_len != kSha256HexChars) {
    return bad(absl::StrCat("model sha256 length ", sha_len, " (want 0 or 64)"));
  }
  const uint64_t min_header = uint64_t{kHeaderFixedBytes} + sha_len + 4ull * n_layer + 4;
  const uint64_t max_header =
      min_header + kTraceMaxMetadataBytes + uint64_t{kMaxHeaderExtensionBytes};
  if (header_bytes < min_header || header_bytes > max_header) {
    return bad(absl::StrCat("header_bytes ", header_bytes, " not in [", min_header, ", ",
                            max_header, "]"));
  }
  // Check the claim against the file before allocating for it.
  struct stat st;
  if (::fstat(::fileno(r.file_.get()), &st) == 0 &&
      static_cast<uint64_t>(st.st_size) < header_bytes) {
    return absl::DataLossError(absl::StrCat("trace ", path, " truncated: the header claims ",
                                            header_bytes, " bytes, the file has ", st.st_size));
  }
  std::vector<uint8_t> rest(header_bytes - kHeaderFixedBytes);
  KX_RETURN_IF_ERROR(r.ReadExact(rest.data(), rest.size(), "the header"));
  const uint8_t* p = rest.data();
  h.model_sha256.assign(reinterpret_cast<const char*>(p), sha_len);
  p += sha_len;
  if (!IsLowerHex(h.model_sha256)) return bad("model sha256 is not lowercase hex");
  h.n_ff.resize(n_layer);
  for (uint32_t l = 0; l < n_layer; ++l, p += 4) h.n_ff[l] = Get<uint32_t>(p);
  const uint32_t meta_len = Get<uint32_t>(p);
  p += 4;
  if (meta_len > header_bytes - min_header || meta_len > kTraceMaxMetadataBytes) {
    return bad(absl::StrCat("metadata length ", meta_len, " exceeds the header"));
  }
  h.metadata_json.assign(reinterpret_cast<const char*>(p), meta_len);
  // Bytes after the metadata belong to newer minor versions: skipped.
  if (absl::Status st = ValidateHeader(h); !st.ok()) return bad(std::string(st.message()));
  r.max_record_bytes_ = kEndRecordBytes;
  for (uint32_t n : h.n_ff)
    r.max_record_bytes_ = std::max(r.max_record_bytes_, MaxLayerRecordBytes(n));
  return r;
}

absl::Status TraceReader::DecodeSet(const uint8_t*& p, const uint8_t* end, uint8_t encoding,
                                    uint32_t n_ff, std::vector<uint64_t>* bits) {
  const uint32_t n_words = (n_ff + 63) / 64;
  bits->assign(n_words, 0);
  auto bad = [this](const std::string& why) { return BadRecord(why); };
  if (encoding == kSetBitset) {
    if (static_cast<uint64_t>(end - p) < BitsetBytes(n_ff)) return bad("bitset past the record");
    std::memcpy(bits->data(), p, BitsetBytes(n_ff));
    p += BitsetBytes(n_ff);
    const uint64_t tail_mask = n_ff % 64 == 0 ? 0 : ~uint64_t{0} << (n_ff % 64);
    if (((*bits)[n_words - 1] & tail_mask) != 0) {
      return bad(absl::StrCat("bitset has bits at or beyond n_ff ", n_ff));
    }
    return absl::OkStatus();
  }
  // kSetList
  if (end - p < static_cast<std::ptrdiff_t>(kListCountBytes)) return bad("list past the record");
  const uint32_t count = Get<uint32_t>(p);
  p += kListCountBytes;
  if (count > n_ff) return bad(absl::StrCat("list of ", count, " neurons, n_ff is ", n_ff));
  const uint32_t width = IndexBytes(n_ff);
  if (static_cast<uint64_t>(end - p) < uint64_t{count} * width) return bad("list past the record");
  int64_t prev = -1;
  for (uint32_t i = 0; i < count; ++i, p += width) {
    const uint32_t index = width == 2 ? Get<uint16_t>(p) : Get<uint32_t>(p);
    if (index >= n_ff)
      return bad(absl::StrCat("neuron ", index, " out of range (n_ff ", n_ff, ")"));
    if (static_cast<int64_t>(index) <= prev) return bad("list not strictly increasing");
    prev = index;
    (*bits)[index / 64] |= uint64_t{1} << (index % 64);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TraceReader::Next(TraceRecord* out) {
  for (;;) {
    if (ended_) return false;
    KX_ASSIGN_OR_RETURN(const uint8_t kind, ReadRecord());
    if (kind == kKindEnd) {
      ended_ = true;
      return false;
    }
    if (kind == kKindLayer) break;
    // Otherwise a record kind of a newer minor version (ReadRecord refused it
    // for files of this reader's minor): skipped.
  }
  return DecodeLayerRecord(out);
}

absl::StatusOr<uint8_t> TraceReader::ReadRecord() {
  record_start_ = offset_;
  uint8_t len_bytes[kRecordLengthBytes];
  const size_t got = std::fread(len_bytes, 1, sizeof(len_bytes), file_.get());
  if (got == 0 && std::feof(file_.get())) {
    return absl::DataLossError(absl::StrCat("trace ", path_, " truncated at byte ", offset_,
                                            " after ", records_,
                                            " records: no end record (was the writer closed?)"));
  }
  if (got != sizeof(len_bytes)) {
    return absl::DataLossError(absl::StrCat("trace ", path_, " truncated at byte ", offset_ + got,
                                            " inside a record length"));
  }
  offset_ += sizeof(len_bytes);
  const uint32_t record_bytes = Get<uint32_t>(len_bytes);
  if (record_bytes < kMinRecordBytes || record_bytes > max_record_bytes_) {
    return absl::DataLossError(
        absl::StrCat("trace ", path_, ": record at byte ", record_start_, " claims ", record_bytes,
                     " bytes (valid: ", kMinRecordBytes, "..", max_record_bytes_, ")"));
  }
  body_.resize(record_bytes - sizeof(len_bytes));
  KX_RETURN_IF_ERROR(ReadExact(body_.data(), body_.size(), "a record"));
  const uint8_t kind = body_[0];
  if (kind == kKindEnd) {
    if (record_bytes != kEndRecordBytes) return BadRecord("end record of the wrong size");
    const uint64_t count = Get<uint64_t>(body_.data() + 4);
    if (count != records_) {
      return BadRecord(
          absl::StrCat("end record counts ", count, " records, the file has ", records_));
    }
    uint8_t extra;
    if (std::fread(&extra, 1, 1, file_.get()) != 0) return BadRecord("bytes after the end record");
    return kind;
  }
  if (kind != kKindLayer && header_.version_minor <= kTraceVersionMinor) {
    return BadRecord(absl::StrCat("unknown record kind ", kind));
  }
  return kind;
}

absl::Status TraceReader::BadRecord(const std::string& why) const {
  return absl::DataLossError(
      absl::StrCat("trace ", path_, ": record at byte ", record_start_, ": ", why));
}

absl::StatusOr<bool> TraceReader::DecodeLayerRecord(TraceRecord* out) {
  const uint8_t* p = body_.data();
  const uint8_t* end = p + body_.size();
  const uint64_t record_bytes = body_.size() + kRecordLengthBytes;
  const bool newer_minor = header_.version_minor > kTraceVersionMinor;
  auto bad = [this](const std::string& why) { return BadRecord(why); };
  if (record_bytes < kLayerRecordFixedBytes) return bad("layer record too short");
  const uint8_t enc_pred = p[1], enc_act = p[2];
  out->step = Get<uint32_t>(p + 4);
  out->layer = Get<uint32_t>(p + 8);
  const uint32_t mask = Get<uint32_t>(p + 12);
  p += kLayerRecordFixedBytes - kRecordLengthBytes;
  if (out->layer >= static_cast<uint32_t>(header_.n_layer())) {
    return bad(absl::StrCat("layer ", out->layer, " but the trace has ", header_.n_layer()));
  }
  if (enc_pred > kSetList || enc_act > kSetList) return bad("unknown set encoding");
  if ((mask & ~LayerStats::kKnownFields) != 0 && !newer_minor) {
    return bad(absl::StrCat("unknown stats fields 0x", absl::Hex(mask)));
  }
  const uint32_t n_ff = header_.n_ff[out->layer];
  out->has_predicted = enc_pred != kSetAbsent;
  out->has_actual = enc_act != kSetAbsent;
  if (out->has_predicted) {
    KX_RETURN_IF_ERROR(DecodeSet(p, end, enc_pred, n_ff, &out->predicted));
  } else {
    out->predicted.clear();
  }
  if (out->has_actual) {
    KX_RETURN_IF_ERROR(DecodeSet(p, end, enc_act, n_ff, &out->actual));
  } else {
    out->actual.clear();
  }
  const uint64_t stats_bytes =
      uint64_t{kStatFieldBytes} * static_cast<uint32_t>(std::popcount(mask));
  if (static_cast<uint64_t>(end - p) != stats_bytes) {
    return bad(absl::StrCat("size ", record_bytes, " does not match its contents (n_ff ", n_ff,
                            ", ", std::popcount(mask), " stats fields)"));
  }
  LayerStats& s = out->stats;
  s = LayerStats();
  s.present = mask & LayerStats::kKnownFields;
  out->unknown_stats_fields = mask & ~LayerStats::kKnownFields;
  auto take_u64 = [&p]() {
    const uint64_t v = Get<uint64_t>(p);
    p += kStatFieldBytes;
    return v;
  };
  if (mask & LayerStats::kResidentGroups) s.resident_groups = take_u64();
  if (mask & LayerStats::kReads) s.reads = take_u64();
  if (mask & LayerStats::kBytesRead) s.bytes_read = take_u64();
  if (mask & LayerStats::kStallNs) s.stall_ns = take_u64();
  if (mask & LayerStats::kLambda) {
    s.lambda = Get<double>(p);
    p += kStatFieldBytes;
  }
  // Fields of newer minors follow (8 bytes each) and are skipped.
  ++records_;
  return true;
}

}  // namespace kx::sparse
