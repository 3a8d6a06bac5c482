#include "model/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace kx {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr char kAlignmentKey[] = "general.alignment";
constexpr uint8_t kZeros[256] = {};

absl::Status SinkToVector(void* ctx, const uint8_t* src, uint64_t n) {
  auto* v = static_cast<std::vector<uint8_t>*>(ctx);
  v->insert(v->end(), src, src + n);
  return absl::OkStatus();
}

struct FdSink {
  int fd;
  const std::string* path;
};

absl::Status SinkToFd(void* ctx, const uint8_t* src, uint64_t n) {
  auto* s = static_cast<FdSink*>(ctx);
  while (n > 0) {
    // write() moves at most ~2 GiB per call on Linux; loop over partial writes.
    const ssize_t w = ::write(s->fd, src, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("write to '", *s->path, "' failed: ", std::strerror(errno)));
    }
    src += w;
    n -= static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

absl::Status Pad(absl::Status (*sink)(void*, const uint8_t*, uint64_t), void* ctx, uint64_t n) {
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, sizeof(kZeros));
    KX_RETURN_IF_ERROR(sink(ctx, kZeros, k));
    n -= k;
  }
  return absl::OkStatus();
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void GgufWriter::PutU32(std::vector<uint8_t>& dst, uint32_t v) { PutBytes(dst, &v, sizeof(v)); }
void GgufWriter::PutU64(std::vector<uint8_t>& dst, uint64_t v) { PutBytes(dst, &v, sizeof(v)); }
void GgufWriter::PutString(std::vector<uint8_t>& dst, std::string_view s) {
  PutU64(dst, s.size());
  PutBytes(dst, s.data(), s.size());
}
void GgufWriter::PutBytes(std::vector<uint8_t>& dst, const void* src, uint64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  dst.insert(dst.end(), p, p + n);
}

void GgufWriter::SetRaw(std::string_view key, GgufType type, std::vector<uint8_t> value) {
  for (Kv& kv : kvs_) {
    if (kv.key == key) {
      kv.type = type;
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(Kv{std::string(key), type, std::move(value)});
}

template <typename T>
void GgufWriter::SetScalar(std::string_view key, GgufType type, T v) {
  std::vector<uint8_t> bytes;
  PutBytes(bytes, &v, sizeof(v));
  SetRaw(key, type, std::move(bytes));
}

template <typename T>
void GgufWriter::SetArrayFixed(std::string_view key, GgufType elem, const std::vector<T>& v) {
  std::vector<uint8_t> bytes;
  PutU32(bytes, static_cast<uint32_t>(elem));
  PutU64(bytes, v.size());
  PutBytes(bytes, v.data(), v.size() * sizeof(T));
  SetRaw(key, GgufType::kArray, std::move(bytes));
}

absl::Status GgufWriter::SetAlignment(uint64_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) ||
      alignment > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("alignment ", alignment, " is not a power of two that fits in u32"));
  }
  SetU32(kAlignmentKey, static_cast<uint32_t>(alignment));
  return absl::OkStatus();
}

void GgufWriter::SetU8(std::string_view k, uint8_t v) { SetScalar(k, GgufType::kU8, v); }
void GgufWriter::SetI8(std::string_view k, int8_t v) { SetScalar(k, GgufType::kI8, v); }
void GgufWriter::SetU16(std::string_view k, uint16_t v) { SetScalar(k, GgufType::kU16, v); }
void GgufWriter::SetI16(std::string_view k, int16_t v) { SetScalar(k, GgufType::kI16, v); }
void GgufWriter::SetU32(std::string_view k, uint32_t v) { SetScalar(k, GgufType::kU32, v); }
void GgufWriter::SetI32(std::string_view k, int32_t v) { SetScalar(k, GgufType::kI32, v); }
void GgufWriter::SetU64(std::string_view k, uint64_t v) { SetScalar(k, GgufType::kU64, v); }
void GgufWriter::SetI64(std::string_view k, int64_t v) { SetScalar(k, GgufType::kI64, v); }
void GgufWriter::SetF32(std::string_view k, float v) { SetScalar(k, GgufType::kF32, v); }
void GgufWriter::SetF64(std::string_view k, double v) { SetScalar(k, GgufType::kF64, v); }
void GgufWriter::SetBool(std::string_view k, bool v) {
  SetScalar(k, GgufType::kBool, static_cast<uint8_t>(v ? 1 : 0));
}
void GgufWriter::SetString(std::string_view k, std::string_view v) {
  std::vector<uint8_t> bytes;
  PutString(bytes, v);
  SetRaw(k, GgufType::kString, std::move(bytes));
}

void GgufWriter::SetArrayU8(std::string_view k, const std::vector<uint8_t>& v) {
  SetArrayFixed(k, GgufType::kU8, v);
}
void GgufWriter::SetArrayI8(std::string_view k, const std::vector<int8_t>& v) {
  SetArrayFixed(k, GgufType::kI8, v);
}
void GgufWriter::SetArrayU16(std::string_view k, const std::vector<uint16_t>& v) {
  SetArrayFixed(k, GgufType::kU16, v);
}
void GgufWriter::SetArrayI16(std::string_view k, const std::vector<int16_t>& v) {
  SetArrayFixed(k, GgufType::kI16, v);
}
void GgufWriter::SetArrayU32(std::string_view k, const std::vector<uint32_t>& v) {
  SetArrayFixed(k, GgufType::kU32, v);
}
void GgufWriter::SetArrayI32(std::string_view k, const std::vector<int32_t>& v) {
  SetArrayFixed(k, GgufType::kI32, v);
}
void GgufWriter::SetArrayU64(std::string_view k, const std::vector<uint64_t>& v) {
  SetArrayFixed(k, GgufType::kU64, v);
}
void GgufWriter::SetArrayI64(std::string_view k, const std::vector<int64_t>& v) {
  SetArrayFixed(k, GgufType::kI64, v);
}
void GgufWriter::SetArrayF32(std::string_view k, const std::vector<float>& v) {
  SetArrayFixed(k, GgufType::kF32, v);
}
void GgufWriter::SetArrayF64(std::string_view k, const std::vector<double>& v) {
  SetArrayFixed(k, GgufType::kF64, v);
}
void GgufWriter::SetArrayBool(std::string_view k, const std::vector<bool>& v) {
  std::vector<uint8_t> b(v.begin(), v.end());  // vector<bool> is packed; GGUF bools are bytes
  SetArrayFixed(k, GgufType::kBool, b);
}
void GgufWriter::SetArrayString(std::string_view k, const std::vector<std::string>& v) {
  std::vector<uint8_t> bytes;
  PutU32(bytes, static_cast<uint32_t>(GgufType::kString));
  PutU64(bytes, v.size());
  for (const std::string& s : v) PutString(bytes, s);
  SetRaw(k, GgufType::kArray, std::move(bytes));
}

absl::Status GgufWriter::CheckTensor(std::string_view name_view, GgmlType type,
                                     const std::vector<int64_t>& ne, uint64_t bytes) const {
  const std::string name(name_view);
  for (const Tensor& t : tensors_) {
    if (t.name == name)
      return absl::AlreadyExistsError(absl::StrCat("duplicate tensor '", name, "'"));
  }
  if (ne.empty() || ne.size() > kGgufMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", ne.size(), " dimensions (must be 1 to 4)"));
  }
  const TypeInfo* info = FindTypeInfo(static_cast<uint32_t>(type));
  if (info == nullptr) return absl::InvalidArgumentError("unknown ggml type");
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has dim ", d));
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is too large"));
    }
  }
  if (ne[0] % info->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': row of ", ne[0],
                                                   " is not whole ", info->name, " blocks"));
  }
  KX_ASSIGN_OR_RETURN(uint64_t want, TypeBytes(type, n));
  if (want != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': got ", bytes, " bytes, its shape and type need ", want));
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string_view name, GgmlType type,
                                   const std::vector<int64_t>& ne, const void* data,
                                   uint64_t bytes) {
  KX_RETURN_IF_ERROR(CheckTensor(name, type, ne, bytes));
  Tensor t{std::string(name), type, ne, {}, nullptr, bytes, nullptr};
  const auto* p = static_cast<const uint8_t*>(data);
  t.owned.assign(p, p + bytes);
  t.data = t.owned.data();  // the heap buffer survives moves of `t`
  tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorView(std::string_view name, GgmlType type,
                                       const std::vector<int64_t>& ne, const void* data,
                                       uint64_t bytes) {
  KX_RETURN_IF_ERROR(CheckTensor(name, type, ne, bytes));
  tensors_.push_back(
      Tensor{std::string(name), type, ne, {}, static_cast<const uint8_t*>(data), bytes, nullptr});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorProduced(std::string_view name, GgmlType type,
                                           const std::vector<int64_t>& ne, Producer produce) {
  // The bytes the shape needs; a shape CheckTensor refuses gets its message.
  const TypeInfo* info = FindTypeInfo(static_cast<uint32_t>(type));
  int64_t n = 1;
  bool shape_ok = info != nullptr && !ne.empty() && ne.size() <= kGgufMaxDims;
  for (int64_t d : ne) shape_ok = shape_ok && d > 0 && !__builtin_mul_overflow(n, d, &n);
  if (!shape_ok || ne[0] % info->block_size != 0) return CheckTensor(name, type, ne, 0);
  KX_ASSIGN_OR_RETURN(uint64_t bytes, TypeBytes(type, n));
  KX_RETURN_IF_ERROR(CheckTensor(name, type, ne, bytes));
  if (!produce) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", std::string(name), "' has no producer"));
  }
  tensors_.push_back(Tensor{std::string(name), type, ne, {}, nullptr, bytes, std::move(produce)});
  return absl::OkStatus();
}

// general.alignment as set (SetAlignment or a Set* of an integer), when it is a
// usable power of two; otherwise the default. An unusable value is still
// written verbatim, which is how tests make files with a bad alignment.
uint64_t GgufWriter::EffectiveAlignment() const {
  for (const Kv& kv : kvs_) {
    if (kv.key != kAlignmentKey || !GgufIsInteger(kv.type)) continue;
    uint64_t v = 0;
    std::memcpy(&v, kv.value.data(), std::min<size_t>(kv.value.size(), GgufFixedSize(kv.type)));
    if (v != 0 && std::has_single_bit(v) && v <= (uint64_t{1} << 30)) return v;
  }
  return kGgufDefaultAlignment;
}

absl::Status GgufWriter::Emit(Sink sink, void* ctx) const {
  const uint64_t align = EffectiveAlignment();
  std::vector<uint8_t> head;
  PutBytes(head, kMagic, sizeof(kMagic));
  PutU32(head, version_);
  PutU64(head, tensors_.size());
  PutU64(head, kvs_.size());
  for (const Kv& kv : kvs_) {
    PutString(head, kv.key);
    PutU32(head, static_cast<uint32_t>(kv.type));
    PutBytes(head, kv.value.data(), kv.value.size());
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(head, t.name);
    PutU32(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) PutU64(head, static_cast<uint64_t>(d));
    PutU32(head, static_cast<uint32_t>(t.type));
    PutU64(head, offset);
    offset = AlignUp(offset + t.bytes, align);
  }
  KX_RETURN_IF_ERROR(sink(ctx, head.data(), head.size()));
  KX_RETURN_IF_ERROR(Pad(sink, ctx, AlignUp(head.size(), align) - head.size()));
  std::vector<uint8_t> produced;  // one produced tensor at a time
  for (const Tensor& t : tensors_) {
    const uint8_t* data = t.data;
    if (t.produce) {
      produced.assign(t.bytes, 0);
      KX_RETURN_IF_ERROR(t.produce(produced.data(), t.bytes));
      data = produced.data();
    }
    KX_RETURN_IF_ERROR(sink(ctx, data, t.bytes));
    KX_RETURN_IF_ERROR(Pad(sink, ctx, AlignUp(t.bytes, align) - t.bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::WriteToBuffer() const {
  std::vector<uint8_t> out;
  KX_RETURN_IF_ERROR(Emit(&SinkToVector, &out));
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", tmp, "': ", std::strerror(errno)));
  }
  FdSink fs{fd, &tmp};
  absl::Status st = Emit(&SinkToFd, &fs);
  if (st.ok() && ::fsync(fd) != 0) {
    st = absl::InternalError(absl::StrCat("fsync of '", tmp, "' failed: ", std::strerror(errno)));
  }
  if (::close(fd) != 0 && st.ok()) {
    st = absl::InternalError(absl::StrCat("close of '", tmp, "' failed: ", std::strerror(errno)));
  }
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::InternalError(
        absl::StrCat("rename of '", tmp, "' to '", path, "' failed: ", std::strerror(errno)));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace kx
