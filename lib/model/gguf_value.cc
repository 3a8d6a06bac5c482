// Typed access to GGUF metadata values and arrays. The parser (gguf.cc) has
// already checked that every value lies inside the file, so these only check
// types, indices and numeric ranges.
#include <cstring>
#include <limits>

#include "base/check.h"
#include "model/gguf.h"

namespace kx {
namespace {

// An integer of any GGUF integer type, without losing range: non-negative
// values in `u`, negative ones in `s`.
struct IntVal {
  bool negative = false;
  uint64_t u = 0;
  int64_t s = 0;
};

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

IntVal FromSigned(int64_t v) {
  IntVal r;
  if (v < 0) {
    r.negative = true;
    r.s = v;
  } else {
    r.u = static_cast<uint64_t>(v);
  }
  return r;
}

// False when `t` is not an integer type.
bool LoadInt(const uint8_t* p, GgufType t, IntVal* out) {
  switch (t) {
    case GgufType::kU8:
      out->u = Load<uint8_t>(p);
      return true;
    case GgufType::kU16:
      out->u = Load<uint16_t>(p);
      return true;
    case GgufType::kU32:
      out->u = Load<uint32_t>(p);
      return true;
    case GgufType::kU64:
      out->u = Load<uint64_t>(p);
      return true;
    case GgufType::kI8:
      *out = FromSigned(Load<int8_t>(p));
      return true;
    case GgufType::kI16:
      *out = FromSigned(Load<int16_t>(p));
      return true;
    case GgufType::kI32:
      *out = FromSigned(Load<int32_t>(p));
      return true;
    case GgufType::kI64:
      *out = FromSigned(Load<int64_t>(p));
      return true;
    default:
      return false;
  }
}

absl::Status TypeError(absl::string_view what, GgufType have, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has type ", GgufTypeName(have), ", expected ", want));
}

absl::StatusOr<uint64_t> ToUint(const uint8_t* p, GgufType t, absl::string_view what) {
  IntVal v;
  if (!LoadInt(p, t, &v)) return TypeError(what, t, "an unsigned integer");
  if (v.negative) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is negative (", v.s, ")"));
  }
  return v.u;
}

absl::StatusOr<int64_t> ToInt(const uint8_t* p, GgufType t, absl::string_view what) {
  IntVal v;
  if (!LoadInt(p, t, &v)) return TypeError(what, t, "an integer");
  if (v.negative) return v.s;
  if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " = ", v.u, " does not fit in int64"));
  }
  return static_cast<int64_t>(v.u);
}

absl::StatusOr<double> ToFloat(const uint8_t* p, GgufType t, absl::string_view what) {
  if (t == GgufType::kF32) return static_cast<double>(Load<float>(p));
  if (t == GgufType::kF64) return Load<double>(p);
  IntVal v;
  if (!LoadInt(p, t, &v)) return TypeError(what, t, "a number");
  return v.negative ? static_cast<double>(v.s) : static_cast<double>(v.u);
}

std::string_view LoadString(const uint8_t* file, uint64_t offset) {
  const uint64_t len = Load<uint64_t>(file + offset);
  return {reinterpret_cast<const char*>(file + offset + sizeof(uint64_t)), len};
}

// Quoted, escaped, cut to about `max_chars`.
std::string QuoteValue(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  size_t i = 0;
  for (; i < s.size() && out.size() < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (i < s.size())
    absl::StrAppend(&out, "...\" (", s.size(), " bytes)");
  else
    out += "\"";
  return out;
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "unknown";
}

uint64_t GgufFixedSize(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

// ---- GgufArray ----

absl::Status GgufArray::Check(uint64_t i) const {
  if (desc_ == nullptr || i >= desc_->count) {
    return absl::OutOfRangeError(
        absl::StrCat("array index ", i, " out of range (size ", size(), ")"));
  }
  return absl::OkStatus();
}

uint64_t GgufArray::ElemOffset(uint64_t i) const {
  if (desc_->elem_type == GgufType::kString) return offsets_[desc_->offsets_begin + i];
  return desc_->first + i * GgufFixedSize(desc_->elem_type);
}

absl::StatusOr<std::string_view> GgufArray::StringAt(uint64_t i) const {
  KX_RETURN_IF_ERROR(Check(i));
  if (desc_->elem_type != GgufType::kString) return TypeError("array element", type(), "string");
  return LoadString(file_, ElemOffset(i));
}

std::string_view GgufArray::StringAtUnchecked(uint64_t i) const {
  KX_CHECK(desc_ != nullptr && desc_->elem_type == GgufType::kString && i < desc_->count);
  return LoadString(file_, offsets_[desc_->offsets_begin + i]);
}

absl::StatusOr<int64_t> GgufArray::IntAt(uint64_t i) const {
  KX_RETURN_IF_ERROR(Check(i));
  return ToInt(file_ + ElemOffset(i), desc_->elem_type, "array element");
}

absl::StatusOr<uint64_t> GgufArray::UintAt(uint64_t i) const {
  KX_RETURN_IF_ERROR(Check(i));
  return ToUint(file_ + ElemOffset(i), desc_->elem_type, "array element");
}

absl::StatusOr<double> GgufArray::FloatAt(uint64_t i) const {
  KX_RETURN_IF_ERROR(Check(i));
  return ToFloat(file_ + ElemOffset(i), desc_->elem_type, "array element");
}

absl::StatusOr<bool> GgufArray::BoolAt(uint64_t i) const {
  KX_RETURN_IF_ERROR(Check(i));
  if (desc_->elem_type != GgufType::kBool) return TypeError("array element", type(), "bool");
  return file_[ElemOffset(i)] != 0;
}

absl::StatusOr<GgufArray> GgufArray::ArrayAt(uint64_t i) const {
  KX_RETURN_IF_ERROR(Check(i));
  if (desc_->elem_type != GgufType::kArray) return TypeError("array element", type(), "array");
  return GgufArray(file_, &arrays_[desc_->children_begin + i], arrays_, offsets_);
}

absl::StatusOr<std::vector<std::string_view>> GgufArray::ToStrings() const {
  if (desc_ == nullptr) return std::vector<std::string_view>{};
  if (desc_->elem_type != GgufType::kString) return TypeError("array", type(), "string elements");
  std::vector<std::string_view> out;
  out.reserve(desc_->count);
  for (uint64_t i = 0; i < desc_->count; ++i) out.push_back(StringAtUnchecked(i));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufArray::ToInts() const {
  std::vector<int64_t> out;
  if (desc_ == nullptr) return out;
  out.reserve(desc_->count);
  for (uint64_t i = 0; i < desc_->count; ++i) {
    KX_ASSIGN_OR_RETURN(int64_t v, ToInt(file_ + ElemOffset(i), desc_->elem_type,
                                         absl::StrCat("array element ", i)));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufArray::ToFloats() const {
  std::vector<float> out;
  if (desc_ == nullptr) return out;
  out.reserve(desc_->count);
  for (uint64_t i = 0; i < desc_->count; ++i) {
    KX_ASSIGN_OR_RETURN(double v, ToFloat(file_ + ElemOffset(i), desc_->elem_type,
                                          absl::StrCat("array element ", i)));
    out.push_back(static_cast<float>(v));
  }
  return out;
}

const uint8_t* GgufArray::raw_data() const {
  if (desc_ == nullptr || GgufFixedSize(desc_->elem_type) == 0) return nullptr;
  return file_ + desc_->first;
}

// ---- GgufFile metadata ----

const GgufFile::KvEntry* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

absl::StatusOr<const GgufFile::KvEntry*> GgufFile::FindOr(std::string_view key) const {
  const KvEntry* e = Find(key);
  if (e == nullptr)
    return absl::NotFoundError(absl::StrCat("GGUF key '", gguf_internal::Absl(key), "' not found"));
  return e;
}

bool GgufFile::HasKey(std::string_view key) const { return Find(key) != nullptr; }

std::optional<GgufType> GgufFile::KeyType(std::string_view key) const {
  const KvEntry* e = Find(key);
  if (e == nullptr) return std::nullopt;
  return e->type;
}

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  KX_ASSIGN_OR_RETURN(const KvEntry* e, FindOr(key));
  if (e->type != GgufType::kString) {
    return TypeError(absl::StrCat("key '", gguf_internal::Absl(key), "'"), e->type, "string");
  }
  return LoadString(data_, e->value);
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  KX_ASSIGN_OR_RETURN(const KvEntry* e, FindOr(key));
  return ToUint(data_ + e->value, e->type, absl::StrCat("key '", gguf_internal::Absl(key), "'"));
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  KX_ASSIGN_OR_RETURN(const KvEntry* e, FindOr(key));
  return ToInt(data_ + e->value, e->type, absl::StrCat("key '", gguf_internal::Absl(key), "'"));
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  KX_ASSIGN_OR_RETURN(const KvEntry* e, FindOr(key));
  return ToFloat(data_ + e->value, e->type, absl::StrCat("key '", gguf_internal::Absl(key), "'"));
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  KX_ASSIGN_OR_RETURN(const KvEntry* e, FindOr(key));
  if (e->type != GgufType::kBool)
    return TypeError(absl::StrCat("key '", gguf_internal::Absl(key), "'"), e->type, "bool");
  return data_[e->value] != 0;
}

absl::StatusOr<GgufArray> GgufFile::GetArray(std::string_view key) const {
  KX_ASSIGN_OR_RETURN(const KvEntry* e, FindOr(key));
  if (e->type != GgufType::kArray) {
    return TypeError(absl::StrCat("key '", gguf_internal::Absl(key), "'"), e->type, "array");
  }
  return GgufArray(data_, &arrays_[e->array], arrays_.data(), offsets_.data());
}

std::string_view GgufFile::KeyAt(size_t i) const {
  KX_CHECK(i < kvs_.size());
  return kvs_[i].key;
}

GgufType GgufFile::TypeAt(size_t i) const {
  KX_CHECK(i < kvs_.size());
  return kvs_[i].type;
}

std::string_view GgufFile::RawValueAt(size_t i) const {
  KX_CHECK(i < kvs_.size());
  const KvEntry& e = kvs_[i];
  return {reinterpret_cast<const char*>(data_ + e.value), e.value_end - e.value};
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::ScalarToString(GgufType type, uint64_t offset, size_t max_chars) const {
  const uint8_t* p = data_ + offset;
  switch (type) {
    case GgufType::kString:
      return QuoteValue(LoadString(data_, offset), max_chars);
    case GgufType::kBool:
      return *p != 0 ? "true" : "false";
    case GgufType::kF32:
      return absl::StrFormat("%g", Load<float>(p));
    case GgufType::kF64:
      return absl::StrFormat("%g", Load<double>(p));
    default:
      break;
  }
  IntVal v;
  if (!LoadInt(p, type, &v)) return "?";
  return v.negative ? absl::StrCat(v.s) : absl::StrCat(v.u);
}

std::string GgufFile::ValueToString(size_t i, size_t max_chars) const {
  KX_CHECK(i < kvs_.size());
  const KvEntry& e = kvs_[i];
  if (e.type != GgufType::kArray) return ScalarToString(e.type, e.value, max_chars);
  const GgufArray arr(data_, &arrays_[e.array], arrays_.data(), offsets_.data());
  std::string out = absl::StrCat("[", GgufTypeName(arr.type()), " \xc3\x97 ", arr.size(), "]");
  // Elements are printed while they fit; each is cut to a fraction of the budget.
  constexpr size_t kElemDivisor = 4;
  const size_t elem_chars = std::max<size_t>(max_chars / kElemDivisor, 8);
  for (uint64_t k = 0; k < arr.size(); ++k) {
    std::string elem;
    if (arr.type() == GgufType::kArray) {
      auto sub = arr.ArrayAt(k);
      elem = absl::StrCat("[", GgufTypeName(sub->type()), " \xc3\x97 ", sub->size(), "]");
    } else {
      elem = ScalarToString(arr.type(), arr.ElemOffset(k), elem_chars);
    }
    const char* sep = k == 0 ? " " : ", ";
    if (out.size() + elem.size() + 2 > max_chars) {
      out += k == 0 ? " ..." : ", ...";
      break;
    }
    absl::StrAppend(&out, sep, elem);
  }
  return out;
}

}  // namespace kx
