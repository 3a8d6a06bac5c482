// The default model (SmolLM2-135M-Instruct Q4_1) read through GgufFile.
#include <catch2/catch.hpp>

#include "model/gguf.h"
#include "model/gguf_info.h"
#include "test_util.h"

namespace kx {
namespace {

TEST_CASE("the default model's GGUF has the expected layout", "[gguf][model]") {
  const std::string path = test::DefaultModelOrSkip();
  auto f = GgufFile::Open(path);
  REQUIRE(f.ok());
  CHECK(f->version() == 3);
  CHECK(f->tensors().size() == 272);
  CHECK(f->GetString("general.architecture").value() == "llama");
  CHECK(f->GetUint("llama.block_count").value() == 30);
  CHECK(f->GetUint("llama.embedding_length").value() == 576);
  CHECK(f->GetUint("llama.attention.head_count").value() == 9);
  CHECK(f->GetUint("llama.attention.head_count_kv").value() == 3);
  CHECK(f->GetString("tokenizer.ggml.model").value() == "gpt2");
  CHECK(f->GetString("tokenizer.ggml.pre").value() == "smollm");

  const GgufTensorInfo* emb = f->FindTensor("token_embd.weight");
  REQUIRE(emb != nullptr);
  CHECK(emb->type == GgmlType::kQ8_0);
  CHECK(emb->n_dims == 2);
  CHECK(emb->ne[0] == 576);
  CHECK(emb->ne[1] == 49152);
  CHECK(emb->size_bytes == 576 / 32 * 34 * uint64_t{49152});
  CHECK(f->FindTensor("output.weight") == nullptr);  // tied embedding
  const GgufTensorInfo* up = f->FindTensor("blk.0.ffn_up.weight");
  REQUIRE(up != nullptr);
  CHECK(up->type == GgmlType::kQ4_1);
  CHECK(up->ne[0] == 576);
  CHECK(up->ne[1] == 1536);

  auto tokens = f->GetArray("tokenizer.ggml.tokens");
  REQUIRE(tokens.ok());
  CHECK(tokens->type() == GgufType::kString);
  CHECK(tokens->size() == 49152);
  CHECK(tokens->StringAt(0).value() == "<|endoftext|>");
  auto types = f->GetArray("tokenizer.ggml.token_type");
  REQUIRE(types.ok());
  CHECK(types->size() == 49152);
  CHECK(types->ToInts().ok());
  auto merges = f->GetArray("tokenizer.ggml.merges");
  REQUIRE(merges.ok());
  CHECK(merges->size() > 0);

  const std::string info = DescribeGguf(*f, false);
  CHECK_THAT(info, Catch::Contains("[string \xc3\x97 49152]"));
  CHECK_THAT(info, Catch::Contains("272 tensors"));
}

}  // namespace
}  // namespace kx
