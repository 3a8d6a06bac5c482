// kairox-prepare's pipeline and the sparse engine on writer-made tiny models:
// the sidecar is built, validated, loaded, and the sparse FFN over bundles
// gives the same logits as the masked-dense reference.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model.h"
#include "prepare/prepare.h"
#include "sparse/sidecar.h"
#include "test_util.h"

namespace {

using kx::test::TinyModelSpec;

std::string TempDir() { return kx::test::TempDir("prepare"); }

TinyModelSpec Spec() {
  TinyModelSpec s;
  s.n_layer = 3;
  s.n_embd = 64;
  s.n_ff = 256;
  s.seed = 77;
  return s;
}

// A tiny model and its sidecar, built once per (tag, down type).
struct Prepared {
  std::string model, sidecar;
  kx::PrepareReport report;
};

// down = kQ4_1 with blocks: the model's own Q4_1 down blocks (GS 32); else
// down_t rows of `down` (GS 16).
Prepared PrepareTiny(const std::string& tag, kx::GgmlType down, float sparsity = 0.5f,
                     bool predictors = true, bool blocks = false) {
  Prepared p;
  p.model = TempDir() + "/" + tag + ".gguf";
  p.sidecar = TempDir() + "/" + tag + ".kairox.gguf";
  auto st = kx::test::WriteTinyModel(p.model, Spec(), nullptr);
  INFO(st.message());
  REQUIRE(st.ok());
  kx::PrepareOptions o;
  o.model_path = p.model;
  o.sidecar_path = p.sidecar;
  o.sparsity = sparsity;
  o.levels = {0.0f, 0.5f, 0.8f};
  o.group_size = 16;
  o.auto_down_type = false;
  o.down_type = down;
  o.down_layout = blocks ? kx::PrepareOptions::DownLayoutChoice::kBlocks
                         : kx::PrepareOptions::DownLayoutChoice::kRows;
  o.n_threads = 2;
  o.calibration.token_budget = 1500;
  o.calibration.max_new_tokens = 48;
  o.train_predictors = predictors;
  o.predictor.ranks = {16, 32};
  o.predictor.max_rank = 32;
  o.predictor.train.epochs = 4;
  auto rep = kx::Prepare(o);
  INFO(rep.status().message());
  REQUIRE(rep.ok());
  p.report = *rep;
  return p;
}

std::unique_ptr<kx::Engine> Load(const Prepared& p, kx::EngineOptions o) {
  o.n_threads = 2;
  o.sidecar = p.sidecar;
  auto e = kx::Engine::Load(p.model, o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  return std::move(*e);
}

using kx::test::MaxAbsDiff;
using kx::test::TeacherForced;

TEST_CASE("prepare writes a sidecar the engine loads, with a report per layer") {
  const Prepared p = PrepareTiny("basic", kx::GgmlType::kQ8_0);
  const TinyModelSpec spec = Spec();
  REQUIRE(p.report.layers.size() == static_cast<size_t>(spec.n_layer));
  for (const kx::LayerReport& l : p.report.layers) {
    CHECK(l.threshold > 0.0f);
    // The threshold puts about half the calibration values at or below it.
    CHECK(l.calib_sparsity == Approx(0.5).margin(0.02));
    CHECK(l.predictor.rank > 0);
  }
  CHECK(p.report.bundle_bytes > 0);
  CHECK(p.report.predictor_bytes > 0);

  auto model = kx::Model::Load(p.model);
  REQUIRE(model.ok());
  auto sc = kx::sparse::Sidecar::Open(p.sidecar, **model);
  INFO(sc.status().message());
  REQUIRE(sc.ok());
  CHECK((*sc)->group_size() == 16);
  CHECK((*sc)->n_layer() == spec.n_layer);
  CHECK((*sc)->sparsity() == Approx(0.5f));
  CHECK((*sc)->layer(0).has_predictor);
  CHECK((*sc)->layer(0).layout.down_type == kx::GgmlType::kQ8_0);

  // Found beside the model without being named (unless the environment says
  // not to, as the test suite's does).
  REQUIRE(kx::sparse::DefaultSidecarPath(p.model) == p.sidecar);
  {
    kx::EngineOptions eo;
    eo.n_threads = 2;
    ::setenv("KAIROX_SIDECAR_AUTO", "1", 1);
    auto found = kx::Engine::Load(p.model, eo);
    REQUIRE(found.ok());
    CHECK((*found)->sparse() != nullptr);
    ::setenv("KAIROX_SIDECAR_AUTO", "0", 1);
    auto ignored = kx::Engine::Load(p.model, eo);
    REQUIRE(ignored.ok());
    CHECK((*ignored)->sparse() == nullptr);
  }

  auto e = Load(p, {});
  REQUIRE(e->sparse() != nullptr);
  CHECK(e->sparse()->sparsity() == Approx(0.5f));
  std::vector<int32_t> prompt = kx::test::RandomTokens(5, 12);
  REQUIRE(e->Eval(prompt).ok());
  for (int i = 0; i < 8; ++i) {
    const int32_t t = static_cast<int32_t>(1 + i * 31 % 255);
    REQUIRE(e->Eval(std::span<const int32_t>(&t, 1)).ok());
  }
  // Decode computed fewer neurons than the dense FFN would.
  const kx::SparseStats& s = e->sparse()->stats();
  CHECK(s.layer_tokens > 0);
  CHECK(s.predicted < s.layer_tokens * spec.n_ff);
  CHECK(s.kept <= s.predicted);
}

// Sparse decode over p's bundles vs masked-dense at the sidecar's level 0
// (threshold 0, so the kept set is exactly the predicted set in both paths:
// a neuron whose |act| sits on the threshold cannot flip between them on the
// last bit of a dot product), teacher-forced from seeded tokens. Returns the
// worst |logit difference| relative to the largest |logit|; checks that the
// same neurons were kept.
double WorstVsMaskedDense(const Prepared& p, uint64_t seed) {
  kx::EngineOptions sparse_opts;
  sparse_opts.sparsity = 0.0f;
  kx::EngineOptions dense_masked = sparse_opts;
  dense_masked.masked_dense = true;
  auto ref = Load(p, dense_masked);
  auto sparse = Load(p, sparse_opts);
  REQUIRE(sparse->sparse()->UsesBundles(1));
  REQUIRE_FALSE(ref->sparse()->UsesBundles(1));
  const auto prompt = kx::test::RandomTokens(seed, 10);
  const auto forced = kx::test::RandomTokens(seed + 1, 24);
  const auto a = TeacherForced(*ref, prompt, forced);
  const auto b = TeacherForced(*sparse, prompt, forced);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, MaxAbsDiff(a[i], b[i]));
    for (float v : a[i]) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  }
  INFO("worst |logit diff| " << worst << " of max |logit| " << scale);
  CHECK(ref->sparse()->stats().kept == sparse->sparse()->stats().kept);
  REQUIRE(scale > 0.0);
  return worst / scale;
}

TEST_CASE("sparse decode over bundles equals masked-dense (F32 down_t)") {
  const Prepared p = PrepareTiny("equal", kx::GgmlType::kF32);
  // Same neurons, same weights. What differs: masked-dense feeds the FFN's
  // hidden vector to ffn_down through 16-bit block activations (relative
  // error <= 2^-15 of each block's max) while the bundles' down_t rows take
  // it in float, and the down sums run in another order. Through 3 layers
  // that stays well below 1e-3 of the logits' scale.
  CHECK(WorstVsMaskedDense(p, 11) < 1e-3);
}

TEST_CASE("sparse decode over the model's own down blocks equals masked-dense") {
  const Prepared p = PrepareTiny("blocks", kx::GgmlType::kQ4_1, 0.5f, true, /*blocks=*/true);
  CHECK(p.report.down_layout == "blocks");
  CHECK(p.report.group_size == 32);
  // The same bytes of ffn_down and the same 16-bit blocks of the hidden
  // vector (groups are its blocks; masked neurons are 0 in both): only the
  // order of the float sums differs, far below the F32 down_t case's bound.
  CHECK(WorstVsMaskedDense(p, 13) < 1e-4);
  auto model = kx::Model::Load(p.model);
  REQUIRE(model.ok());
  auto sc = kx::sparse::Sidecar::Open(p.sidecar, **model);
  REQUIRE(sc.ok());
  CHECK((*sc)->down_layout() == kx::sparse::DownLayout::kBlocks);
}

TEST_CASE("a down-blocks sidecar is refused when its groups are not whole blocks") {
  const Prepared p = PrepareTiny("blocks-bad", kx::GgmlType::kQ4_1, 0.5f, false, true);
  auto model = kx::Model::Load(p.model);
  REQUIRE(model.ok());
  REQUIRE(kx::sparse::Sidecar::Open(p.sidecar, **model).ok());
  std::ifstream in(p.sidecar, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  auto write = [&](const std::string& path, const std::vector<char>& b) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(),
                                                                   static_cast<std::streamsize>(b.size()));
  };
  // Two neurons of different blocks swapped in layer 1's permutation: still
  // a permutation, but group 0 is no longer one block.
  {
    auto g = kx::GgufFile::Open(p.sidecar);
    REQUIRE(g.ok());
    const kx::GgufTensorInfo* t = g->FindTensor("blk.1.kairox.perm");
    REQUIRE(t != nullptr);
    std::vector<char> b = bytes;
    const uint64_t at = g->data_offset() + t->offset;
    int32_t first, other;
    std::memcpy(&first, &b[at], 4);
    std::memcpy(&other, &b[at + 4 * 40], 4);
    std::memcpy(&b[at], &other, 4);
    std::memcpy(&b[at + 4 * 40], &first, 4);
    const std::string path = TempDir() + "/blocks-perm.kairox.gguf";
    write(path, b);
    auto s = kx::sparse::Sidecar::Open(path, **model);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("not whole blocks"));
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("kairox-prepare"));
  }
  // A layout name changed in place: the metadata digest no longer matches
  // (an unknown layout with matching digests is refused by name:
  // test_sidecar_verify.cc).
  {
    const std::string key = "blocks";
    std::vector<char> b = bytes;
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    REQUIRE(it != b.end());
    it[5] = 'z';
    const std::string path = TempDir() + "/blocks-layout.kairox.gguf";
    write(path, b);
    auto s = kx::sparse::Sidecar::Open(path, **model);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("kairox.sha256.meta"));
  }
  // A model whose ffn_down is not Q4_1 cannot have down blocks.
  {
    const std::string f32 = TempDir() + "/f32.gguf";
    TinyModelSpec spec = Spec();
    spec.weight_type = kx::GgmlType::kF32;
    REQUIRE(kx::test::WriteTinyModel(f32, spec, nullptr).ok());
    kx::PrepareOptions o;
    o.model_path = f32;
    o.sidecar_path = TempDir() + "/f32.kairox.gguf";
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kBlocks;
    o.train_predictors = false;
    o.calibration.token_budget = 256;
    o.calibration.max_new_tokens = 16;
    auto rep = kx::Prepare(o);
    REQUIRE_FALSE(rep.ok());
    CHECK_THAT(std::string(rep.status().message()), Catch::Contains("--down-layout rows"));
  }
}

TEST_CASE("masked-dense at sparsity 0 without predictor is exactly the dense model") {
  const Prepared p = PrepareTiny("oracle0", kx::GgmlType::kF32, 0.5f, /*predictors=*/false);
  kx::EngineOptions dense;
  dense.sparse = false;
  kx::EngineOptions oracle;
  oracle.masked_dense = true;
  oracle.sparsity = 0.0f;
  oracle.use_predictor = false;
  auto d = Load(p, dense);
  auto o = Load(p, oracle);
  REQUIRE(d->sparse() == nullptr);
  const auto prompt = kx::test::RandomTokens(21, 8);
  const auto forced = kx::test::RandomTokens(22, 8);
  const auto a = TeacherForced(*d, prompt, forced);
  const auto b = TeacherForced(*o, prompt, forced);
  for (size_t i = 0; i < a.size(); ++i) CHECK(MaxAbsDiff(a[i], b[i]) == 0.0);
}

TEST_CASE("a sidecar for another model, another version or a damaged file is refused") {
  const Prepared p = PrepareTiny("refuse", kx::GgmlType::kQ8_0, 0.5f, false);
  // Another model (different weights, same shapes): the sha256 differs.
  TinyModelSpec other = Spec();
  other.seed = 78;
  const std::string other_path = TempDir() + "/other.gguf";
  REQUIRE(kx::test::WriteTinyModel(other_path, other, nullptr).ok());
  auto other_model = kx::Model::Load(other_path);
  REQUIRE(other_model.ok());
  auto sc = kx::sparse::Sidecar::Open(p.sidecar, **other_model);
  REQUIRE_FALSE(sc.ok());
  CHECK_THAT(std::string(sc.status().message()), Catch::Contains("sha256"));
  CHECK_THAT(std::string(sc.status().message()), Catch::Contains("kairox-prepare"));
  kx::EngineOptions eo;
  eo.sidecar = p.sidecar;
  CHECK_FALSE(kx::Engine::Load(other_path, eo).ok());

  auto model = kx::Model::Load(p.model);
  REQUIRE(model.ok());
  // Another format version.
  {
    kx::GgufWriter w;
    w.SetU32("kairox.version", 999);
    const std::string path = TempDir() + "/v999.kairox.gguf";
    REQUIRE(w.WriteFile(path).ok());
    auto s = kx::sparse::Sidecar::Open(path, **model);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("version 999"));
  }
  // Not a sidecar at all: the model itself.
  {
    auto s = kx::sparse::Sidecar::Open(p.model, **model);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("not a kairox sidecar"));
  }
  // Truncated copies: every cut gives an error, never a crash.
  {
    std::ifstream in(p.sidecar, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    REQUIRE(bytes.size() > 4096);
    const std::string cut = TempDir() + "/cut.kairox.gguf";
    // The end of the last tensor's data (the file may carry padding after it).
    uint64_t data_end = 0;
    {
      auto g = kx::GgufFile::Open(p.sidecar);
      REQUIRE(g.ok());
      for (const auto& t : g->tensors()) {
        data_end = std::max<uint64_t>(data_end, g->data_offset() + t.offset +
                                                    kx::TypeBytes(t.type, t.n_elements()).value());
      }
    }
    REQUIRE(data_end <= bytes.size());
    for (size_t len : {size_t{0}, size_t{7}, size_t{100}, bytes.size() / 3, bytes.size() / 2,
                       static_cast<size_t>(data_end - 1)}) {
      std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), len);
      auto s = kx::sparse::Sidecar::Open(cut, **model);
      INFO("cut at " << len);
      CHECK_FALSE(s.ok());
    }
  }
  // --no-sparse ignores the sidecar.
  kx::EngineOptions off;
  off.sparse = false;
  off.sidecar = p.sidecar;
  auto e = kx::Engine::Load(p.model, off);
  REQUIRE(e.ok());
  CHECK((*e)->sparse() == nullptr);
}

}  // namespace
