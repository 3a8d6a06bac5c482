// GGUF parsing and validation. Every length and count read from the file is
// checked against the bytes that remain before anything is reserved or read,
// so a hostile file can neither read out of bounds nor make us allocate more
// than a small multiple of its own size.
#include "model/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "base/heap_bytes.h"

namespace kx {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMinVersion = 2;
constexpr uint32_t kMaxVersion = 3;
constexpr uint32_t kMaxTypeId = static_cast<uint32_t>(GgufType::kF64);
// Arrays may nest; real files never go past 2 levels. Bounding the depth
// bounds the parser's recursion.
constexpr int kMaxArrayDepth = 8;
// The spec limits keys to 65535 bytes; names of tensors are far shorter in
// practice, but we only need a bound that keeps messages and maps sane.
constexpr uint64_t kMaxKeyBytes = 65535;
constexpr uint64_t kMaxTensorNameBytes = 65535;
// Alignment is a power of two; a bound keeps align-up arithmetic far from overflow.
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// Smallest encodings, for rejecting counts the remaining bytes cannot hold.
constexpr uint64_t kStringLenBytes = 8;
constexpr uint64_t kMinKvBytes = kStringLenBytes + 4 + 1;  // key len, type, u8 value
constexpr uint64_t kMinArrayBytes = 4 + 8;                 // elem type, count
constexpr uint64_t kMinTensorInfoBytes = kStringLenBytes + 4 + 8 + 4 + 8;  // name, 1 dim
constexpr char kAlignmentKey[] = "general.alignment";

std::string Quote(std::string_view s) {
  constexpr size_t kMaxQuoted = 64;
  std::string out = "'";
  for (char c : s.substr(0, kMaxQuoted)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out.push_back(c);
    }
  }
  if (s.size() > kMaxQuoted) out += "...";
  out += "'";
  return out;
}

}  // namespace

class GgufFile::Parser {
 public:
  explicit Parser(GgufFile& f) : f_(f), data_(f.data_), size_(f.size_) {}

  absl::Status Run() {
    KX_RETURN_IF_ERROR(ParseHeader());
    KX_RETURN_IF_ERROR(ParseKvs());
    KX_RETURN_IF_ERROR(ParseAlignment());
    KX_RETURN_IF_ERROR(ParseTensorInfos());
    return CheckTensorData();
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status Need(uint64_t n, absl::string_view what) const {
    if (n > remaining()) {
      return absl::DataLossError(absl::StrCat("truncated GGUF: ", what, " at offset ", pos_,
                                              " needs ", n, " bytes but only ", remaining(),
                                              " remain"));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    KX_RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string_view> ReadString(absl::string_view what, uint64_t max_len) {
    KX_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > remaining()) {
      return absl::DataLossError(absl::StrCat("truncated GGUF: ", what, " has length ", len,
                                              " at offset ", pos_, " but only ", remaining(),
                                              " bytes remain"));
    }
    if (len > max_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is ", len, " bytes long; the limit is ", max_len));
    }
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  absl::StatusOr<GgufType> ReadType(absl::string_view what) {
    KX_ASSIGN_OR_RETURN(uint32_t id, Read<uint32_t>(what));
    if (id > kMaxTypeId) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": unknown GGUF value type ", id));
    }
    return static_cast<GgufType>(id);
  }

  absl::Status ParseHeader() {
    KX_RETURN_IF_ERROR(Need(sizeof(kMagic), "magic"));
    if (std::memcmp(data_, kMagic, sizeof(kMagic)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bad magic: not a GGUF file (first bytes %02x %02x %02x %02x)", data_[0],
                          data_[1], data_[2], data_[3]));
    }
    pos_ = sizeof(kMagic);
    KX_ASSIGN_OR_RETURN(uint32_t version, Read<uint32_t>("version"));
    if (version < kMinVersion || version > kMaxVersion) {
      // A byte-swapped small number is a big-endian file.
      const bool swapped = (version & 0xffffu) == 0 && version != 0;
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported GGUF version ", version,
                       swapped        ? " (a big-endian GGUF; only little-endian is supported)"
                       : version == 1 ? " (v1 used 32-bit lengths; re-convert the model)"
                                      : " (supported: 2 and 3)"));
    }
    f_.version_ = version;
    KX_ASSIGN_OR_RETURN(n_tensors_, Read<uint64_t>("tensor count"));
    KX_ASSIGN_OR_RETURN(n_kv_, Read<uint64_t>("metadata key count"));
    // Everything after the header: first the KVs, then the tensor infos.
    if (n_kv_ > remaining() / kMinKvBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metadata key count ", n_kv_, " is impossible for a file of ", size_, " bytes"));
    }
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor count ", n_tensors_, " is impossible for a file of ", size_, " bytes"));
    }
    return absl::OkStatus();
  }

  absl::Status ParseKvs() {
    f_.kvs_.reserve(n_kv_);
    f_.kv_index_.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      KX_ASSIGN_OR_RETURN(std::string_view key,
                          ReadString(absl::StrCat("key of metadata entry ", i), kMaxKeyBytes));
      if (key.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("metadata entry ", i, " has an empty key"));
      }
      const std::string ctx = absl::StrCat("key ", Quote(key));
      KX_ASSIGN_OR_RETURN(GgufType type, ReadType(ctx));
      KvEntry e{key, type, pos_, 0, 0};
      if (type == GgufType::kArray) {
        e.array = f_.arrays_.size();
        f_.arrays_.emplace_back();
        KX_RETURN_IF_ERROR(ParseArray(e.array, 1, ctx));
      } else {
        KX_RETURN_IF_ERROR(SkipScalar(type, ctx));
      }
      e.value_end = pos_;
      if (!f_.kv_index_.emplace(key, f_.kvs_.size()).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate metadata ", ctx));
      }
      f_.kvs_.push_back(e);
    }
    return absl::OkStatus();
  }

  // Steps over one non-array value, checking it is in bounds and valid.
  absl::Status SkipScalar(GgufType type, const std::string& ctx) {
    if (type == GgufType::kString) return ReadString(ctx, remaining()).status();
    const uint64_t n = GgufFixedSize(type);
    KX_RETURN_IF_ERROR(Need(n, ctx));
    if (type == GgufType::kBool && data_[pos_] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx, ": bool value ", static_cast<int>(data_[pos_]), " is neither 0 nor 1"));
    }
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status ParseArray(uint64_t index, int depth, const std::string& ctx) {
    KX_ASSIGN_OR_RETURN(GgufType elem, ReadType(absl::StrCat(ctx, ": array element type")));
    KX_ASSIGN_OR_RETURN(uint64_t count, Read<uint64_t>(absl::StrCat(ctx, ": array length")));
    f_.arrays_[index].elem_type = elem;
    f_.arrays_[index].count = count;
    f_.arrays_[index].first = pos_;
    const uint64_t fixed = GgufFixedSize(elem);
    if (fixed != 0) {
      if (count > remaining() / fixed) {
        return absl::DataLossError(absl::StrCat(ctx, ": array of ", count, " ", GgufTypeName(elem),
                                                " runs past the end of the file"));
      }
      if (elem == GgufType::kBool) {
        for (uint64_t i = 0; i < count; ++i) {
          if (data_[pos_ + i] > 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(ctx, ": bool array element ", i, " is neither 0 nor 1"));
          }
        }
      }
      pos_ += count * fixed;
      return absl::OkStatus();
    }
    if (elem == GgufType::kString) {
      if (count > remaining() / kStringLenBytes) {
        return absl::DataLossError(
            absl::StrCat(ctx, ": array of ", count, " strings runs past the end of the file"));
      }
      // Each string takes >= 8 bytes of file, so the pool stays <= file size.
      const uint64_t base = f_.offsets_.size();
      f_.arrays_[index].offsets_begin = base;
      f_.offsets_.resize(base + count);
      // Inline rather than ReadString: vocabularies have ~10^5 strings, and
      // the error context is only built when something is wrong.
      for (uint64_t i = 0; i < count; ++i) {
        f_.offsets_[base + i] = pos_;
        uint64_t len = std::numeric_limits<uint64_t>::max();
        if (remaining() >= kStringLenBytes) std::memcpy(&len, data_ + pos_, kStringLenBytes);
        if (remaining() < kStringLenBytes || len > remaining() - kStringLenBytes) {
          return absl::DataLossError(absl::StrCat(ctx, ": string array element ", i, " at offset ",
                                                  pos_, " runs past the end of the file"));
        }
        pos_ += kStringLenBytes + len;
      }
      return absl::OkStatus();
    }
    // Nested arrays.
    if (depth >= kMaxArrayDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx, ": arrays nested deeper than ", kMaxArrayDepth, " levels"));
    }
    if (count > remaining() / kMinArrayBytes) {
      return absl::DataLossError(
          absl::StrCat(ctx, ": array of ", count, " arrays runs past the end of the file"));
    }
    // Children are contiguous in the pool; grandchildren go after them.
    const uint64_t base = f_.arrays_.size();
    f_.arrays_[index].children_begin = base;
    f_.arrays_.resize(base + count);
    for (uint64_t i = 0; i < count; ++i) {
      KX_RETURN_IF_ERROR(ParseArray(base + i, depth + 1, absl::StrCat(ctx, "[", i, "]")));
    }
    return absl::OkStatus();
  }

  absl::Status ParseAlignment() {
    const KvEntry* e = f_.Find(kAlignmentKey);
    if (e == nullptr) return absl::OkStatus();
    auto a = f_.GetUint(kAlignmentKey);
    if (!a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kAlignmentKey, " must be an integer, not ", GgufTypeName(e->type)));
    }
    if (*a == 0 || !std::has_single_bit(*a) || *a > kMaxAlignment) {
      return absl::InvalidArgumentError(absl::StrCat(
          kAlignmentKey, " = ", *a, " is not a power of two between 1 and ", kMaxAlignment));
    }
    f_.alignment_ = *a;
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfos() {
    // The header check used the bytes after the header; recheck with what is left now.
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return absl::DataLossError(absl::StrCat("tensor count ", n_tensors_, " cannot fit in the ",
                                              remaining(), " bytes after the metadata"));
    }
    f_.tensors_.reserve(n_tensors_);
    f_.tensor_index_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      KX_ASSIGN_OR_RETURN(std::string_view name,
                          ReadString(absl::StrCat("name of tensor ", i), kMaxTensorNameBytes));
      const std::string ctx = absl::StrCat("tensor ", Quote(name));
      KX_RETURN_IF_ERROR(ParseTensorInfo(name, ctx));
      if (!f_.tensor_index_.emplace(name, f_.tensors_.size() - 1).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate ", ctx));
      }
    }
    // Align up; pos_ <= size_ and alignment <= 2^30, so this cannot overflow.
    f_.data_offset_ = (pos_ + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfo(std::string_view name, const std::string& ctx) {
    GgufTensorInfo t;
    t.name = std::string(name);
    KX_ASSIGN_OR_RETURN(t.n_dims, Read<uint32_t>(absl::StrCat(ctx, ": n_dims")));
    if (t.n_dims == 0 || t.n_dims > kGgufMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx, " has ", t.n_dims, " dimensions (must be 1 to ", kGgufMaxDims, ")"));
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      KX_ASSIGN_OR_RETURN(uint64_t ne, Read<uint64_t>(absl::StrCat(ctx, ": ne[", d, "]")));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat(ctx, ": dimension ", d, " has invalid size ", ne));
      }
      t.ne[d] = static_cast<int64_t>(ne);
      if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
        return absl::InvalidArgumentError(absl::StrCat(ctx, ": element count overflows 64 bits"));
      }
    }
    KX_ASSIGN_OR_RETURN(uint32_t type_id, Read<uint32_t>(absl::StrCat(ctx, ": type")));
    const TypeInfo* info = FindTypeInfo(type_id);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(ctx, " has unknown ggml type id ", type_id));
    }
    t.type = static_cast<GgmlType>(type_id);
    if (t.ne[0] % info->block_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(ctx, ": row of ", t.ne[0],
                                                     " elements is not a whole number of ",
                                                     info->name, " blocks of ", info->block_size));
    }
    auto bytes = TypeBytes(t.type, n_elements);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(ctx, ": ", bytes.status().message()));
    }
    t.size_bytes = *bytes;
    KX_ASSIGN_OR_RETURN(t.offset, Read<uint64_t>(absl::StrCat(ctx, ": offset")));
    if (t.offset % f_.alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          ctx, ": data offset ", t.offset, " is not a multiple of the alignment ", f_.alignment_));
    }
    f_.tensors_.push_back(std::move(t));
    return absl::OkStatus();
  }

  absl::Status CheckTensorData() {
    if (f_.tensors_.empty()) return absl::OkStatus();
    if (f_.data_offset_ > size_) {
      return absl::DataLossError(absl::StrCat("data section starts at ", f_.data_offset_,
                                              ", past the end of the ", size_, "-byte file"));
    }
    const uint64_t data_size = size_ - f_.data_offset_;
    for (const GgufTensorInfo& t : f_.tensors_) {
      if (t.offset > data_size || t.size_bytes > data_size - t.offset) {
        return absl::DataLossError(absl::StrCat("tensor ", Quote(t.name), " data [", t.offset,
                                                ", +", t.size_bytes, ") lies outside the ",
                                                data_size, "-byte data section"));
      }
    }
    std::vector<size_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [this](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& prev = f_.tensors_[order[i - 1]];
      const GgufTensorInfo& cur = f_.tensors_[order[i]];
      if (prev.offset + prev.size_bytes > cur.offset) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensors ", Quote(prev.name), " and ", Quote(cur.name), " overlap"));
      }
    }
    return absl::OkStatus();
  }

  GgufFile& f_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

absl::StatusOr<GgufFile> GgufFile::Parse(GgufFile file) {
  Parser parser(file);
  KX_RETURN_IF_ERROR(parser.Run());
  return file;
}

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path, MappedFile::Mode mode) {
  KX_ASSIGN_OR_RETURN(MappedFile mapping, MappedFile::Open(path, mode));
  GgufFile file;
  file.data_ = mapping.data();
  file.size_ = mapping.size();
  file.mapping_ = std::move(mapping);  // the mapping's address does not change
  auto parsed = Parse(std::move(file));
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path, ": ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<GgufFile> GgufFile::FromBuffer(const uint8_t* data, uint64_t size) {
  if (data == nullptr && size != 0) return absl::InvalidArgumentError("null GGUF buffer");
  GgufFile file;
  file.data_ = data;
  file.size_ = size;
  return Parse(std::move(file));
}

uint64_t GgufFile::HeapBytes() const {
  uint64_t bytes = kx::HeapBytes(kvs_) + kx::HeapBytes(kv_index_) + kx::HeapBytes(arrays_) +
                   kx::HeapBytes(offsets_) + kx::HeapBytes(tensors_) + kx::HeapBytes(tensor_index_);
  for (const GgufTensorInfo& t : tensors_) bytes += kx::HeapBytes(t.name);
  return bytes;
}

}  // namespace kx
