// Writes a few small valid GGUF files into <dir>/seeds (and creates <dir>/work)
// as the starting corpus for gguf_fuzz.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf_writer.h"

namespace {

bool Write(const kx::GgufWriter& w, const std::string& path) {
  absl::Status st = w.WriteFile(path);
  if (!st.ok()) std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
  return st.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::string seeds = dir + "/seeds";
  for (const std::string& d : {dir, seeds, dir + "/work"}) ::mkdir(d.c_str(), 0755);
  bool ok = true;

  kx::GgufWriter empty;
  ok &= Write(empty, seeds + "/empty.gguf");

  kx::GgufWriter scalars;
  scalars.SetVersion(2);
  scalars.SetU8("u8", 200);
  scalars.SetI8("i8", -3);
  scalars.SetU16("u16", 60000);
  scalars.SetI16("i16", -20000);
  scalars.SetU32("u32", 4000000000u);
  scalars.SetI32("i32", -5);
  scalars.SetU64("u64", ~uint64_t{0});
  scalars.SetI64("i64", -9);
  scalars.SetF32("f32", 0.5f);
  scalars.SetF64("f64", 1e-300);
  scalars.SetBool("b", true);
  scalars.SetString("general.architecture", "llama");
  ok &= Write(scalars, seeds + "/scalars.gguf");

  kx::GgufWriter arrays;
  arrays.SetArrayString("tokenizer.ggml.tokens", {"<s>", "a", "", "\xc4\xa0t"});
  arrays.SetArrayI32("tokenizer.ggml.token_type", {3, 1, 1, 1});
  arrays.SetArrayF32("tokenizer.ggml.scores", {0.f, -1.f, -2.f, -3.f});
  arrays.SetArrayBool("flags", {true, false});
  arrays.SetArrayU64("u64s", {1, 2});
  std::vector<uint8_t> nested;
  kx::GgufWriter::PutU32(nested, static_cast<uint32_t>(kx::GgufType::kArray));
  kx::GgufWriter::PutU64(nested, 2);
  for (int i = 0; i < 2; ++i) {
    kx::GgufWriter::PutU32(nested, static_cast<uint32_t>(kx::GgufType::kString));
    kx::GgufWriter::PutU64(nested, 1);
    kx::GgufWriter::PutString(nested, i ? "x" : "yz");
  }
  arrays.SetRaw("nested", kx::GgufType::kArray, nested);
  ok &= Write(arrays, seeds + "/arrays.gguf");

  kx::GgufWriter tensors;
  tensors.SetString("general.architecture", "llama");
  ok &= tensors.SetAlignment(64).ok();
  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  ok &= tensors.AddTensor("norm", kx::GgmlType::kF32, {4}, bytes.data(), 16).ok();
  ok &= tensors.AddTensor("emb", kx::GgmlType::kQ8_0, {32, 2}, bytes.data(), 68).ok();
  ok &= tensors.AddTensor("w", kx::GgmlType::kQ4_1, {32, 1, 2}, bytes.data(), 40).ok();
  ok &= tensors.AddTensor("h", kx::GgmlType::kF16, {2, 2, 2, 2}, bytes.data(), 32).ok();
  ok &= Write(tensors, seeds + "/tensors.gguf");
  return ok ? 0 : 1;
}
