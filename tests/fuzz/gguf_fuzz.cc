// libFuzzer target: parse arbitrary bytes as GGUF, then touch every key,
// value, array element and tensor the parser accepted, and describe the file.
// Anything the parser accepts must be safe to read in full.
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "model/gguf.h"
#include "model/gguf_info.h"

namespace {

// Keeps reads from being optimised away.
volatile uint64_t g_sink = 0;

void Touch(const kx::GgufArray& a, int depth) {
  KX_CHECK(depth <= 16);
  for (uint64_t i = 0; i < a.size(); ++i) {
    if (auto s = a.StringAt(i); s.ok()) {
      g_sink = g_sink + s->size();
      KX_CHECK(a.StringAtUnchecked(i) == *s);
    }
    if (auto v = a.IntAt(i); v.ok()) g_sink = g_sink + static_cast<uint64_t>(*v);
    if (auto v = a.UintAt(i); v.ok()) g_sink = g_sink + *v;
    if (auto v = a.FloatAt(i); v.ok()) g_sink = g_sink + (*v == *v ? 1 : 0);
    if (auto v = a.BoolAt(i); v.ok()) g_sink = g_sink + (*v ? 1 : 0);
    if (auto v = a.ArrayAt(i); v.ok()) Touch(*v, depth + 1);
  }
  KX_CHECK(!a.IntAt(a.size()).ok());
  if (const uint8_t* raw = a.raw_data(); raw != nullptr && a.size() > 0) {
    g_sink = g_sink + raw[a.size() * kx::GgufFixedSize(a.type()) - 1];
  }
  (void)a.ToStrings();
  (void)a.ToInts();
  (void)a.ToFloats();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = kx::GgufFile::FromBuffer(data, size);
  if (!parsed.ok()) {
    KX_CHECK(!parsed.status().message().empty());
    return 0;
  }
  const kx::GgufFile& f = *parsed;
  for (size_t i = 0; i < f.num_kv(); ++i) {
    const std::string_view key = f.KeyAt(i);
    KX_CHECK(f.HasKey(key));
    KX_CHECK(f.KeyType(key) == f.TypeAt(i));
    g_sink = g_sink + f.ValueToString(i, 80).size() + f.ValueToString(i, 0).size();
    if (auto v = f.GetString(key); v.ok()) g_sink = g_sink + v->size();
    if (auto v = f.GetUint(key); v.ok()) g_sink = g_sink + *v;
    if (auto v = f.GetInt(key); v.ok()) g_sink = g_sink + static_cast<uint64_t>(*v);
    if (auto v = f.GetFloat(key); v.ok()) g_sink = g_sink + (*v == *v ? 1 : 0);
    if (auto v = f.GetBool(key); v.ok()) g_sink = g_sink + (*v ? 1 : 0);
    if (auto v = f.GetArray(key); v.ok()) Touch(*v, 0);
  }
  for (const kx::GgufTensorInfo& t : f.tensors()) {
    KX_CHECK(f.FindTensor(t.name) == &t);
    KX_CHECK(t.size_bytes > 0);
    const uint8_t* p = f.TensorData(t);
    KX_CHECK(p >= data && p + t.size_bytes <= data + size);
    g_sink = g_sink + p[0] + p[t.size_bytes - 1];
  }
  g_sink = g_sink + kx::DescribeGguf(f, true).size() + kx::DescribeGguf(f, false).size();
  return 0;
}
