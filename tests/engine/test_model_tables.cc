// A model's tables (tokenizer, GGUF index) are what a session's RAM budget
// charges for them: the estimate equals what building them took from the heap
// (mallinfo2), and every session's budget holds them under "model tables".
#include <malloc.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "base/memory_budget.h"
#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "test_util.h"

namespace {

int64_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

// |estimate − measured| within 10 % of measured (allocator headers and rounding are
// what the estimate leaves out: a few percent for tables of small strings).
void CheckClose(uint64_t estimate, int64_t measured) {
  INFO("estimate " << estimate << " bytes, measured " << measured << " bytes");
  REQUIRE(measured > 0);
  const double diff = static_cast<double>(estimate) - static_cast<double>(measured);
  CHECK(std::abs(diff) <= 0.10 * static_cast<double>(measured));
}

}  // namespace

TEST_CASE("the GGUF index and the tokenizer: estimated heap bytes match the heap they took") {
  const std::string path = kx::test::DefaultModelOrSkip();
  const int64_t before_file = HeapInUse();
  auto file = kx::GgufFile::Open(path);
  REQUIRE(file.ok());
  auto held = std::make_unique<kx::GgufFile>(std::move(*file));
  const int64_t file_bytes = HeapInUse() - before_file;
  CheckClose(held->HeapBytes(), file_bytes - static_cast<int64_t>(sizeof(kx::GgufFile)));

  const int64_t before_tok = HeapInUse();
  auto tok = kx::Tokenizer::FromGguf(*held);
  REQUIRE(tok.ok());
  const int64_t tok_bytes = HeapInUse() - before_tok;
  CheckClose((*tok)->HeapBytes(), tok_bytes - static_cast<int64_t>(sizeof(kx::Tokenizer)));
  // SmolLM2's 49152-token vocabulary: megabytes, not a rounding error.
  CHECK((*tok)->HeapBytes() > (4u << 20));
}

TEST_CASE("every session's RAM budget holds the model's tables") {
  const std::string path = kx::test::DefaultModelOrSkip();
  auto model = kx::Model::Load(path);
  REQUIRE(model.ok());
  kx::EngineOptions o;
  o.n_ctx = 256;
  auto e = kx::Engine::Create(*model, o);
  REQUIRE(e.ok());
  CHECK((*e)->ram_budget().held("model tables") == (*model)->TableBytes());
  CHECK((*model)->TableBytes() > (*model)->tokenizer().HeapBytes());

  // A byte budget below what KV cache, scratch and the tables need together is refused
  // and names the tables.
  const uint64_t kv_and_scratch =
      (*e)->ram_budget().held("KV cache") + (*e)->ram_budget().held("scratch");
  o.ram_budget = std::to_string(kv_and_scratch + (*model)->TableBytes() / 2);
  auto small = kx::Engine::Create(*model, o);
  REQUIRE(!small.ok());
  CHECK_THAT(std::string(small.status().message()), Catch::Contains("model tables"));
}
