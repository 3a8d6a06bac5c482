// GGUF reader: the llama.cpp model container (header, key/value metadata,
// tensor infos, aligned tensor data). The whole file is validated when it is
// opened, so every accessor afterwards works on bytes known to be in bounds.
//
// Usage:
//   KX_ASSIGN_OR_RETURN(kx::GgufFile f, kx::GgufFile::Open(path));
//   KX_ASSIGN_OR_RETURN(uint64_t n_layer, f.GetUint("llama.block_count"));
//   KX_ASSIGN_OR_RETURN(kx::GgufArray tokens, f.GetArray("tokenizer.ggml.tokens"));
//   for (uint64_t i = 0; i < tokens.size(); ++i) use(tokens.StringAtUnchecked(i));
//   const kx::GgufTensorInfo* t = f.FindTensor("token_embd.weight");
//   const uint8_t* bytes = f.TensorData(*t);  // valid while `f` lives
//
// Thread-safety: a GgufFile is immutable after Open/FromBuffer; const methods
// may be called from any number of threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace kx {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u8", "string", "array", ...; "unknown" for ids outside the enum.
const char* GgufTypeName(GgufType type);

// Bytes of one value of a fixed-size type; 0 for string/array (variable size).
uint64_t GgufFixedSize(GgufType type);

inline bool GgufIsInteger(GgufType t) {
  return t == GgufType::kU8 || t == GgufType::kI8 || t == GgufType::kU16 || t == GgufType::kI16 ||
         t == GgufType::kU32 || t == GgufType::kI32 || t == GgufType::kU64 || t == GgufType::kI64;
}

inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr uint64_t kGgufDefaultAlignment = 32;

struct GgufTensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  int64_t ne[kGgufMaxDims] = {1, 1, 1, 1};  // innermost first; unused dims = 1
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t size_bytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

namespace gguf_internal {
// Debian's abseil has its own string_view type (ABSL_OPTION_USE_STD_STRING_VIEW
// is 0), which absl::StrCat needs; this converts without copying.
inline absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }

// One parsed array. Elements of variable size (strings, nested arrays) get an
// offsets table built once at parse time, so element access is O(1).
struct ArrayDesc {
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  uint64_t first = 0;           // file offset of element 0
  uint64_t offsets_begin = 0;   // into the file's offsets pool (variable-size elements)
  uint64_t children_begin = 0;  // into the file's array pool (arrays of arrays)
};
}  // namespace gguf_internal

// A view of one array value. Valid while the GgufFile it came from lives
// (moving the GgufFile keeps it valid). Element access is O(1).
class GgufArray {
 public:
  GgufArray() = default;

  GgufType type() const { return desc_ ? desc_->elem_type : GgufType::kU8; }
  uint64_t size() const { return desc_ ? desc_->count : 0; }
  bool empty() const { return size() == 0; }

  // Checked access: errors on an index past the end or a type mismatch.
  // IntAt/UintAt accept any integer element type whose value fits; FloatAt
  // accepts F32/F64 and integers.
  absl::StatusOr<std::string_view> StringAt(uint64_t i) const;
  absl::StatusOr<int64_t> IntAt(uint64_t i) const;
  absl::StatusOr<uint64_t> UintAt(uint64_t i) const;
  absl::StatusOr<double> FloatAt(uint64_t i) const;
  absl::StatusOr<bool> BoolAt(uint64_t i) const;
  absl::StatusOr<GgufArray> ArrayAt(uint64_t i) const;

  // Fast access for hot loops after the caller checked type() and size():
  // aborts (KX_CHECK) on misuse rather than reading out of bounds.
  std::string_view StringAtUnchecked(uint64_t i) const;

  // Whole-array conversions (one type check, then a tight loop).
  absl::StatusOr<std::vector<std::string_view>> ToStrings() const;
  absl::StatusOr<std::vector<int64_t>> ToInts() const;
  absl::StatusOr<std::vector<float>> ToFloats() const;

  // Raw little-endian bytes of a fixed-size element array (may be unaligned);
  // null for string/array elements.
  const uint8_t* raw_data() const;

 private:
  friend class GgufFile;
  GgufArray(const uint8_t* file, const gguf_internal::ArrayDesc* desc,
            const gguf_internal::ArrayDesc* arrays, const uint64_t* offsets)
      : file_(file), desc_(desc), arrays_(arrays), offsets_(offsets) {}
  absl::Status Check(uint64_t i) const;
  uint64_t ElemOffset(uint64_t i) const;

  const uint8_t* file_ = nullptr;
  const gguf_internal::ArrayDesc* desc_ = nullptr;
  const gguf_internal::ArrayDesc* arrays_ = nullptr;  // pool of all arrays
  const uint64_t* offsets_ = nullptr;                 // pool of element offsets
};

class GgufFile {
 public:
  // Maps `path` (in `mode`: kMapHuge for files decode streams, e.g. sidecars) and validates
  // all of it. Errors name the problem, and the key or tensor concerned.
  static absl::StatusOr<GgufFile> Open(const std::string& path,
                                       MappedFile::Mode mode = MappedFile::Mode::kMap);
  // How the file is held (kNotTried for FromBuffer).
  const MappedFile& mapping() const { return mapping_; }
  // The same validation over caller-owned bytes, which must outlive the
  // result (no copy is made).
  static absl::StatusOr<GgufFile> FromBuffer(const uint8_t* data, uint64_t size);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Start of the data section. When there are no tensors this may equal or
  // exceed file_size().
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata. Missing keys are NotFound; wrong types InvalidArgument.
  bool HasKey(std::string_view key) const;
  std::optional<GgufType> KeyType(std::string_view key) const;
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;  // any integer type, >= 0
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;    // any integer type that fits
  absl::StatusOr<double> GetFloat(std::string_view key) const;   // F32/F64 and integers
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<GgufArray> GetArray(std::string_view key) const;

  // Iteration in file order (for --info).
  size_t num_kv() const { return kvs_.size(); }
  std::string_view KeyAt(size_t i) const;
  GgufType TypeAt(size_t i) const;
  // The i-th value's bytes as stored after its type field (scalars, strings
  // with their length, arrays with element type and count): what
  // GgufWriter::RawValueAt gives for the same value, so a digest over the
  // metadata is the same whether computed from a writer or from a file.
  std::string_view RawValueAt(size_t i) const;
  // A short printable value: strings quoted and cut, arrays as
  // "[type × count] first, few, ...". At most about max_chars characters.
  std::string ValueToString(size_t i, size_t max_chars = 80) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // Pointer into the file; valid while this GgufFile lives.
  const uint8_t* TensorData(const GgufTensorInfo& t) const {
    return data_ + data_offset_ + t.offset;
  }
  const uint8_t* data() const { return data_; }
  // Heap bytes of the parsed index (key and tensor tables, array offsets; the
  // file's bytes themselves are not counted).
  uint64_t HeapBytes() const;

 private:
  struct KvEntry {
    std::string_view key;  // points into the file bytes
    GgufType type;
    uint64_t value;          // file offset of the value (scalars, strings)
    uint64_t array;          // index into arrays_ for arrays
    uint64_t value_end = 0;  // file offset one past the value's last byte
  };
  class Parser;
  friend class Parser;

  GgufFile() = default;
  static absl::StatusOr<GgufFile> Parse(GgufFile file);
  const KvEntry* Find(std::string_view key) const;
  absl::StatusOr<const KvEntry*> FindOr(std::string_view key) const;
  std::string ScalarToString(GgufType type, uint64_t offset, size_t max_chars) const;

  MappedFile mapping_;  // empty for FromBuffer
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KvEntry> kvs_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::vector<gguf_internal::ArrayDesc> arrays_;
  std::vector<uint64_t> offsets_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;  // views of tensors_[i].name
};

}  // namespace kx
