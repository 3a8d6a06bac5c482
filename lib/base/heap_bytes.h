// Heap bytes held by standard containers, for memory accounting of long-lived
// tables (a model's tokenizer and GGUF index) that are charged to a RAM budget.
// Estimates of what the allocator hands out — capacities, not sizes, plus the
// containers' own node and bucket arrays — without allocator headers or
// fragmentation; tests compare them with mallinfo2().
//
//   uint64_t b = kx::HeapBytes(tokens_) + kx::HeapBytes(token_ids_);
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kx {

// A string's own buffer: 0 while it fits the small-string buffer inside the object.
inline uint64_t HeapBytes(const std::string& s) {
  const char* p = s.data();
  const char* self = reinterpret_cast<const char*>(&s);
  const bool inline_buffer = p >= self && p < self + sizeof(s);
  return inline_buffer ? 0 : s.capacity() + 1;
}

// Elements' storage, plus what each element owns when it is a string.
template <typename T>
uint64_t HeapBytes(const std::vector<T>& v) {
  uint64_t bytes = v.capacity() * sizeof(T);
  if constexpr (std::is_same_v<T, std::string>) {
    for (const std::string& s : v) bytes += HeapBytes(s);
  }
  return bytes;
}

// absl's Swiss table: one slot and one control byte per capacity entry, plus
// the cloned control bytes of one group; string keys' own buffers.
template <typename K, typename V, typename H, typename E, typename A>
uint64_t HeapBytes(const absl::flat_hash_map<K, V, H, E, A>& m) {
  if (m.capacity() == 0) return 0;
  uint64_t bytes = m.capacity() * (sizeof(typename absl::flat_hash_map<K, V, H, E, A>::value_type) + 1) +
                   16;
  if constexpr (std::is_same_v<K, std::string>) {
    for (const auto& [k, v] : m) bytes += HeapBytes(k);
  }
  return bytes;
}

// libstdc++'s node-based hash map: a bucket array and one node per element
// (next pointer, the value, the cached hash).
template <typename K, typename V, typename H, typename E, typename A>
uint64_t HeapBytes(const std::unordered_map<K, V, H, E, A>& m) {
  using Value = typename std::unordered_map<K, V, H, E, A>::value_type;
  return m.bucket_count() * sizeof(void*) +
         m.size() * (sizeof(void*) + sizeof(Value) + sizeof(size_t));
}

}  // namespace kx
