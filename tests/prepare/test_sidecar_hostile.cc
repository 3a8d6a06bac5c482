// Hostile sidecars: whatever a sidecar file holds, Sidecar::Open refuses it with a message
// naming what is wrong — no KX_CHECK, abort or out-of-bounds read is reachable from its
// contents. The files are written by WriteSidecar from data built here (so every other part
// is valid and the content hashes match), or are a valid file with header bytes patched.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/tiny_model.h"
#include "model/gguf.h"
#include "model/model.h"
#include "sparse/bundle.h"
#include "sparse/sidecar.h"
#include "test_util.h"

namespace {

using kx::sparse::SidecarData;

std::string TempDir() { return kx::test::TempDir("sidecar_hostile"); }

const kx::Model& TinyModel() {
  static const std::shared_ptr<const kx::Model> model = [] {
    const std::string path = TempDir() + "/tiny.gguf";
    kx::test::TinyModelSpec spec;
    spec.n_layer = 2;
    spec.n_embd = 64;
    spec.n_ff = 128;
    auto st = kx::test::WriteTinyModel(path, spec, nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
    auto m = kx::Model::Load(path);
    INFO(m.status().message());
    REQUIRE(m.ok());
    return std::shared_ptr<const kx::Model>(std::move(*m));
  }();
  return *model;
}

constexpr int kGroupSize = 16;

// A valid sidecar for TinyModel(): identity permutation, down_t rows of Q8_0, no predictors.
SidecarData ValidData() {
  const kx::Model& m = TinyModel();
  const kx::LlamaHParams& hp = m.hparams();
  SidecarData d;
  d.model_sha256 = std::string(64, '0');  // not compared: check_model_sha256 = false
  d.model_arch = hp.arch;
  d.n_layer = hp.n_layer;
  d.n_embd = hp.n_embd;
  d.n_ff = hp.n_ff;
  d.sparsity = 0.5f;
  d.sparsity_levels = {0.5f};
  d.group_size = kGroupSize;
  d.down_layout = kx::sparse::DownLayout::kRows;
  d.activation_rule = kx::sparse::ActivationRuleFor(hp.ffn_act);
  d.calibration_json = "{}";
  for (int l = 0; l < hp.n_layer; ++l) {
    const kx::LlamaLayerWeights& w = m.weights().layers[l];
    kx::sparse::SidecarLayerData L;
    L.perm.resize(hp.n_ff);
    std::iota(L.perm.begin(), L.perm.end(), 0);
    L.freq.assign(hp.n_ff, 0.5f);
    L.thresholds = {0.1f};
    auto layout = kx::sparse::MakeBundleLayout(hp.n_embd, hp.n_ff, kGroupSize, w.ffn_up.type,
                                               w.ffn_gate.type, kx::GgmlType::kQ8_0,
                                               kx::sparse::DownLayout::kRows);
    REQUIRE(layout.ok());
    L.layout = *layout;
    L.bundles.assign(L.layout.bundle_stride * L.layout.n_groups, 0);
    d.layers.push_back(std::move(L));
  }
  return d;
}

// Adds a predictor of `rank` to layer l (zero weights), its W2 of `w2_rows` rows.
void AddPredictor(SidecarData& d, int l, int rank, int w2_rows) {
  kx::sparse::SidecarLayerData& L = d.layers[l];
  L.has_predictor = true;
  L.pred_rank = rank;
  L.pred_threshold = 0.5f;
  L.w1.assign(static_cast<size_t>(d.n_embd) * rank, 0);
  L.b1.assign(rank, 0.0f);
  L.w2t.assign(static_cast<size_t>(d.n_ff) * w2_rows, 0);
  L.b2.assign(d.n_ff, 0.0f);
}

absl::Status OpenFile(const std::string& path) {
  kx::sparse::SidecarOptions o;
  o.check_model_sha256 = false;
  return kx::sparse::Sidecar::Open(path, TinyModel(), o).status();
}

// Writes `d` and opens it: the status of Open.
absl::Status WriteAndOpen(const SidecarData& d, const std::string& tag) {
  const std::string path = TempDir() + "/" + tag + ".kairox.gguf";
  absl::Status st = kx::sparse::WriteSidecar(d, path);
  INFO(st.message());
  REQUIRE(st.ok());
  return OpenFile(path);
}

void ExpectRefused(const absl::Status& st, const std::string& needle) {
  INFO(st.message());
  CHECK_FALSE(st.ok());
  CHECK_THAT(std::string(st.message()), Catch::Contains(needle));
}

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace

TEST_CASE("a valid sidecar written here opens (the hostile variants below differ in one thing)") {
  CHECK(WriteAndOpen(ValidData(), "valid").ok());
  SidecarData d = ValidData();
  AddPredictor(d, 1, 8, 8);
  const absl::Status st = WriteAndOpen(d, "valid-pred");
  INFO(st.message());
  CHECK(st.ok());
}

TEST_CASE("unknown bundle type ids are refused, naming the key and the id") {
  // up (compared with the model's type while the message is built) and down (rows: not
  // compared, reaches the bundle layout), then the largest u32 and a negative id.
  struct Case {
    int layer, slot;
    int64_t id;
  };
  for (const Case c : {Case{1, 0, 999}, Case{0, 1, 999}, Case{1, 2, 999}, Case{0, 2, 40},
                       Case{0, 0, std::numeric_limits<uint32_t>::max()}}) {
    SidecarData d = ValidData();
    kx::sparse::BundleLayout& layout = d.layers[c.layer].layout;
    kx::GgmlType* types[3] = {&layout.up_type, &layout.gate_type, &layout.down_type};
    *types[c.slot] = static_cast<kx::GgmlType>(c.id);
    ExpectRefused(WriteAndOpen(d, "type"),
                  "blk." + std::to_string(c.layer) + ".kairox.bundle_types[" +
                      std::to_string(c.slot) + "] is " + std::to_string(c.id) +
                      ", not a known ggml type id");
  }
}

TEST_CASE("known types the bundles cannot hold are refused with their names") {
  SidecarData d = ValidData();
  d.layers[0].layout.down_type = kx::GgmlType::kI32;  // a known id with no quantizer
  ExpectRefused(WriteAndOpen(d, "down-i32"), "no quantizer for down type I32");
  d = ValidData();
  d.layers[1].layout.up_type = kx::GgmlType::kF64;
  ExpectRefused(WriteAndOpen(d, "up-f64"), "bundles hold F64/");
}

TEST_CASE("predictors with bad dimensions are refused") {
  {
    SidecarData d = ValidData();
    AddPredictor(d, 0, d.n_ff + 1, d.n_ff + 1);  // rank above n_ff
    ExpectRefused(WriteAndOpen(d, "rank"), "predictor w1 has a bad shape");
  }
  for (float threshold : {0.0f, 1.5f}) {
    SidecarData d = ValidData();
    AddPredictor(d, 1, 8, 8);
    d.layers[1].pred_threshold = threshold;
    ExpectRefused(WriteAndOpen(d, "threshold"), "layer 1: bad predictor threshold");
  }
}

TEST_CASE("bundles of the wrong size and a bad group size are refused") {
  {
    SidecarData d = ValidData();
    d.layers[1].bundles.resize(d.layers[1].bundles.size() - 4096);
    ExpectRefused(WriteAndOpen(d, "bundles"), "blk.1.kairox.bundles");
  }
  for (int gs : {0, 7, 64}) {
    SidecarData d = ValidData();
    d.group_size = gs;
    ExpectRefused(WriteAndOpen(d, "gs"), "group size " + std::to_string(gs));
  }
}

TEST_CASE("tensor dimensions that overflow and offsets past the end are refused") {
  const std::string valid = TempDir() + "/patch-src.kairox.gguf";
  REQUIRE(kx::sparse::WriteSidecar(ValidData(), valid).ok());
  const std::vector<char> bytes = ReadBytes(valid);
  // The tensor info of blk.0.kairox.perm: name, n_dims (u32), ne[n_dims] (u64), type (u32),
  // offset (u64).
  const std::string name = "blk.0.kairox.perm";
  auto it = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  REQUIRE(it != bytes.end());
  const size_t at = static_cast<size_t>(it - bytes.begin()) + name.size();
  uint32_t n_dims = 0;
  std::memcpy(&n_dims, &bytes[at], 4);
  REQUIRE(n_dims == 1);
  const size_t ne0 = at + 4, type = ne0 + 8, offset = type + 4;
  auto patched = [&](size_t pos, uint64_t value, int width) {
    std::vector<char> b = bytes;
    std::memcpy(&b[pos], &value, width);
    const std::string path = TempDir() + "/patched.kairox.gguf";
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), b.size());
    return OpenFile(path);
  };
  for (uint64_t ne : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{1} << 40}) {
    const absl::Status st = patched(ne0, ne, 8);
    INFO("ne[0] = " << ne << ": " << st.message());
    CHECK_FALSE(st.ok());
  }
  for (uint64_t off : {uint64_t{1} << 40, ~uint64_t{0} - 4095, uint64_t{bytes.size()}}) {
    const absl::Status st = patched(offset, off, 8);
    INFO("offset = " << off << ": " << st.message());
    CHECK_FALSE(st.ok());
  }
  {
    const absl::Status st = patched(type, 999, 4);  // a tensor type id: the GGUF reader's
    ExpectRefused(st, "999");
  }
}

TEST_CASE("a tensor of another type under a layer's predictor name is refused, not read past its end") {
  // Found by sidecar_fuzz: tensor names are outside the metadata digest, and the hash pass
  // value-checked blk.0.kairox.pred.b2 as n floats although it was an I8 tensor of n bytes
  // (layer 0 has no predictor, so nothing had checked its type): an ASan heap-buffer-overflow.
  const std::string path = TempDir() + "/renamed.kairox.gguf";
  REQUIRE(kx::sparse::WriteSidecar(ValidData(), path).ok());
  std::vector<char> bytes = ReadBytes(path);
  const std::string from = "blk.1.kairox.bundles", to = "blk.0.kairox.pred.b2";  // same length
  auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
  REQUIRE(it != bytes.end());
  std::copy(to.begin(), to.end(), it);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  ExpectRefused(OpenFile(path), "tensor blk.0.kairox.pred.b2 is I8, expected F32");
}
