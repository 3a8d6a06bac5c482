// GGUF writer: builds small models for tests and, later, sidecar files.
// Keys keep insertion order (setting a key again replaces its value in place);
// tensors are laid out in insertion order, each padded to the alignment.
//
// Usage:
//   kx::GgufWriter w;
//   w.SetString("general.architecture", "llama");
//   w.SetU32("llama.block_count", 2);
//   w.SetArrayString("tokenizer.ggml.tokens", {"a", "b"});
//   KX_RETURN_IF_ERROR(w.AddTensor("t", kx::GgmlType::kF32, {4, 2}, data, 32));
//   KX_RETURN_IF_ERROR(w.WriteFile(path));  // atomic: path.tmp, fsync, rename
//
// Not thread-safe; one writer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/gguf.h"
#include "tensor/dtype.h"

namespace kx {

class GgufWriter {
 public:
  GgufWriter() = default;

  // 3 by default; 2 has the same layout and exists for tests.
  void SetVersion(uint32_t version) { version_ = version; }
  // Power of two; written as general.alignment (u32). Default 32.
  absl::Status SetAlignment(uint64_t alignment);

  void SetU8(std::string_view key, uint8_t v);
  void SetI8(std::string_view key, int8_t v);
  void SetU16(std::string_view key, uint16_t v);
  void SetI16(std::string_view key, int16_t v);
  void SetU32(std::string_view key, uint32_t v);
  void SetI32(std::string_view key, int32_t v);
  void SetU64(std::string_view key, uint64_t v);
  void SetI64(std::string_view key, int64_t v);
  void SetF32(std::string_view key, float v);
  void SetF64(std::string_view key, double v);
  void SetBool(std::string_view key, bool v);
  void SetString(std::string_view key, std::string_view v);

  void SetArrayU8(std::string_view key, const std::vector<uint8_t>& v);
  void SetArrayI8(std::string_view key, const std::vector<int8_t>& v);
  void SetArrayU16(std::string_view key, const std::vector<uint16_t>& v);
  void SetArrayI16(std::string_view key, const std::vector<int16_t>& v);
  void SetArrayU32(std::string_view key, const std::vector<uint32_t>& v);
  void SetArrayI32(std::string_view key, const std::vector<int32_t>& v);
  void SetArrayU64(std::string_view key, const std::vector<uint64_t>& v);
  void SetArrayI64(std::string_view key, const std::vector<int64_t>& v);
  void SetArrayF32(std::string_view key, const std::vector<float>& v);
  void SetArrayF64(std::string_view key, const std::vector<double>& v);
  void SetArrayBool(std::string_view key, const std::vector<bool>& v);
  void SetArrayString(std::string_view key, const std::vector<std::string>& v);

  // The encoded value bytes of `type` as they follow the type field, written
  // verbatim (nested arrays; tests that need malformed values). Build them
  // with the Put* helpers below.
  void SetRaw(std::string_view key, GgufType type, std::vector<uint8_t> value);

  // Copies `bytes` of data. Fails on a duplicate name, 0 or > 4 dims, a
  // dimension <= 0, a row that is not whole blocks, or bytes != TypeBytes.
  absl::Status AddTensor(std::string_view name, GgmlType type, const std::vector<int64_t>& ne,
                         const void* data, uint64_t bytes);
  // The same without a copy: `data` must stay valid until the last Write*.
  absl::Status AddTensorView(std::string_view name, GgmlType type, const std::vector<int64_t>& ne,
                             const void* data, uint64_t bytes);

  // Fills a tensor's bytes when the file is written (dst holds exactly the
  // tensor's bytes). A failure aborts the write with that status.
  using Producer = std::function<absl::Status(uint8_t* dst, uint64_t bytes)>;
  // A tensor whose bytes are made while the file is written, one tensor at a
  // time: writing a file of these holds only its largest tensor in memory
  // (kairox-synth writes 4-8 GB models this way). Same checks as AddTensor.
  absl::Status AddTensorProduced(std::string_view name, GgmlType type,
                                 const std::vector<int64_t>& ne, Producer produce);

  size_t num_kv() const { return kvs_.size(); }
  // The metadata in the order it is written (a digest over it, as the
  // sidecar's kairox.sha256.meta; GgufFile::RawValueAt reads the same bytes).
  std::string_view KeyAt(size_t i) const { return kvs_[i].key; }
  GgufType TypeAt(size_t i) const { return kvs_[i].type; }
  std::string_view RawValueAt(size_t i) const {
    return {reinterpret_cast<const char*>(kvs_[i].value.data()), kvs_[i].value.size()};
  }
  size_t num_tensors() const { return tensors_.size(); }

  // The whole file in memory.
  absl::StatusOr<std::vector<uint8_t>> WriteToBuffer() const;
  // Writes path.tmp, fsyncs it, renames it over `path`: a reader never sees a
  // half-written file under the final name. On failure path.tmp is removed.
  absl::Status WriteFile(const std::string& path) const;

  // Little-endian encoders for SetRaw and for tests that hand-build files.
  static void PutU32(std::vector<uint8_t>& dst, uint32_t v);
  static void PutU64(std::vector<uint8_t>& dst, uint64_t v);
  static void PutString(std::vector<uint8_t>& dst, std::string_view s);  // u64 len + bytes
  static void PutBytes(std::vector<uint8_t>& dst, const void* src, uint64_t n);

 private:
  struct Kv {
    std::string key;
    GgufType type;
    std::vector<uint8_t> value;
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;  // empty for views
    const uint8_t* data;         // null for produced tensors
    uint64_t bytes;
    Producer produce;  // set for produced tensors
  };
  // Receives the file's bytes in order.
  using Sink = absl::Status (*)(void* ctx, const uint8_t* src, uint64_t n);

  template <typename T>
  void SetScalar(std::string_view key, GgufType type, T v);
  template <typename T>
  void SetArrayFixed(std::string_view key, GgufType elem, const std::vector<T>& v);
  absl::Status CheckTensor(std::string_view name, GgmlType type, const std::vector<int64_t>& ne,
                           uint64_t bytes) const;
  uint64_t EffectiveAlignment() const;
  absl::Status Emit(Sink sink, void* ctx) const;

  uint32_t version_ = 3;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace kx
