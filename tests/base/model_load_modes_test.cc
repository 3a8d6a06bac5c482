// kx::Model loaded mapped and read into memory (ModelOptions::use_mmap) gives
// bit-identical logits; mlock is a warning, never a failure.
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "model/model.h"
#include "test_util.h"

namespace {

std::string TempPath(const std::string& tag) {
  return "/tmp/kx_test_load_modes_" + tag + "_" + std::to_string(::getpid()) + ".gguf";
}

// Logits of every position of `tokens`, copied out of the engine.
std::vector<std::vector<float>> AllLogits(std::shared_ptr<const kx::Model> model,
                                          const std::vector<int32_t>& tokens) {
  kx::EngineOptions opts;
  opts.n_threads = 1;
  auto engine = kx::Engine::Create(std::move(model), opts);
  REQUIRE(engine.ok());
  REQUIRE((*engine)->Eval(tokens, /*all_logits=*/true).ok());
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto l = (*engine)->Logits(static_cast<int>(i));
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

}  // namespace

TEST_CASE("a model read into memory gives the mapped model's logits bit for bit", "[model][load]") {
  for (kx::GgmlType type : {kx::GgmlType::kQ4_1, kx::GgmlType::kF16}) {
    INFO(kx::TypeName(type));
    kx::test::TinyModelSpec spec;
    spec.weight_type = type;
    spec.seed = 4321;
    const std::string path = TempPath(kx::TypeName(type));
    REQUIRE(kx::test::WriteTinyModel(path, spec, nullptr).ok());
    kx::ModelOptions mapped_opts;
    kx::ModelOptions read_opts;
    read_opts.use_mmap = false;
    auto mapped = kx::Model::Load(path, mapped_opts);
    auto read = kx::Model::Load(path, read_opts);
    ::unlink(path.c_str());
    REQUIRE(mapped.ok());
    REQUIRE(read.ok());
    CHECK((*mapped)->mapped());
    CHECK(!(*read)->mapped());
    CHECK((*read)->ParameterCount() == (*mapped)->ParameterCount());

    auto rng = kx::test::SeededRng(99);
    std::vector<int32_t> tokens(12);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 256);
    const auto a = AllLogits(*mapped, tokens);
    const auto b = AllLogits(*read, tokens);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      REQUIRE(a[i].size() == b[i].size());
      REQUIRE(!a[i].empty());
      CHECK(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("mlock never fails a load", "[model][load]") {
  const std::string path = TempPath("mlock");
  REQUIRE(kx::test::WriteTinyModel(path, {}, nullptr).ok());
  for (bool use_mmap : {true, false}) {
    kx::ModelOptions opts;
    opts.use_mmap = use_mmap;
    opts.mlock = true;
    auto m = kx::Model::Load(path, opts);
    REQUIRE(m.ok());  // locked or not (RLIMIT_MEMLOCK), the model loads
    CHECK((*m)->mapped() == use_mmap);
  }
  ::unlink(path.c_str());
}

TEST_CASE("read mode reports a bad file like mapped mode", "[model][load]") {
  const std::string path = TempPath("bad");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fputs("GGUF but not really", f);
    std::fclose(f);
  }
  kx::ModelOptions read_opts;
  read_opts.use_mmap = false;
  auto mapped = kx::Model::Load(path, {});
  auto read = kx::Model::Load(path, read_opts);
  ::unlink(path.c_str());
  REQUIRE(!mapped.ok());
  REQUIRE(!read.ok());
  CHECK(mapped.status() == read.status());
  CHECK(std::string(read.status().message()).find(path) != std::string::npos);
  auto missing = kx::Model::Load("/nonexistent/model.gguf", read_opts);
  CHECK(absl::IsNotFound(missing.status()));
}
