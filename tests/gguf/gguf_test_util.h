// Helpers for the GGUF tests: hand-built byte strings (for malformed files)
// and parsing from an exactly-sized heap copy, so that any read past the end
// is caught by ASan.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace kx::test {

// Builds GGUF bytes field by field.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& U8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Bytes& U32(uint32_t v) {
    GgufWriter::PutU32(b, v);
    return *this;
  }
  Bytes& U64(uint64_t v) {
    GgufWriter::PutU64(b, v);
    return *this;
  }
  Bytes& Str(std::string_view s) {
    GgufWriter::PutString(b, s);
    return *this;
  }
  Bytes& Raw(const void* p, size_t n) {
    GgufWriter::PutBytes(b, p, n);
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    Raw("GGUF", 4);
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  // A tensor info: name, dims, type, offset.
  Bytes& Tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) U64(d);
    return U32(type).U64(offset);
  }
  Bytes& PadTo(uint64_t alignment) {
    while (b.size() % alignment != 0) b.push_back(0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

// The parse result keeps pointers into the buffer, so it travels with it.
struct Parsed {
  std::unique_ptr<uint8_t[]> buf;
  absl::StatusOr<GgufFile> file;
};

inline Parsed ParseExact(const uint8_t* data, size_t n) {
  Parsed p{std::unique_ptr<uint8_t[]>(new uint8_t[n > 0 ? n : 1]), absl::UnknownError("unset")};
  if (n > 0) std::memcpy(p.buf.get(), data, n);
  p.file = GgufFile::FromBuffer(n > 0 ? p.buf.get() : nullptr, n);
  return p;
}

inline Parsed ParseExact(const std::vector<uint8_t>& v) { return ParseExact(v.data(), v.size()); }

// A fresh directory under $TMPDIR (or /tmp); left for the OS to clean.
inline std::string MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kx_gguf_XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "/tmp";
  return tmpl;
}

}  // namespace kx::test
