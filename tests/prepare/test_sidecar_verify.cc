// The sidecar checks its own bytes (issue #15 item 6): each corruption of a
// prepared sidecar is refused with a message naming what is wrong, the
// verified-sidecar cache makes the second open skip the hash pass, and a
// write to the sidecar during a session stops the next evaluation with an
// error.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model.h"
#include "prepare/prepare.h"
#include "sparse/sidecar.h"
#include "sparse/sidecar_verify.h"
#include "test_util.h"

namespace {

std::string TempDir() {
  static const std::string dir = [] {
    const std::string d = kx::test::TempDir("sidecar_verify");
    // The verified-sidecar cache and the sha256 cache live here, not in ~.
    ::setenv("KAIROX_CACHE_DIR", (d + "/cache").c_str(), 1);
    return d;
  }();
  return dir;
}

struct Prepared {
  std::string model, sidecar;
};

// A tiny Q4_1 model and its down-blocks sidecar with predictors, built once.
const Prepared& Tiny() {
  static const Prepared p = [] {
    Prepared r;
    r.model = TempDir() + "/tiny.gguf";
    r.sidecar = TempDir() + "/tiny.kairox.gguf";
    kx::test::TinyModelSpec spec;
    spec.n_layer = 2;
    spec.n_embd = 64;
    spec.n_ff = 256;
    spec.seed = 91;
    REQUIRE(kx::test::WriteTinyModel(r.model, spec, nullptr).ok());
    kx::PrepareOptions o;
    o.model_path = r.model;
    o.sidecar_path = r.sidecar;
    o.sparsity = 0.5f;
    o.levels = {0.0f, 0.5f};
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kBlocks;
    o.n_threads = 2;
    o.calibration.token_budget = 600;
    o.calibration.max_new_tokens = 24;
    o.train_predictors = true;
    o.predictor.ranks = {16};
    o.predictor.max_rank = 16;
    o.predictor.train.epochs = 2;
    auto rep = kx::Prepare(o);
    INFO(rep.status().message());
    REQUIRE(rep.ok());
    return r;
  }();
  return p;
}

// Copies `src` to `dst` through the GGUF writer: `edit_kv` changes the
// metadata, `edit_tensor` a tensor's bytes; with `reseal` the digests are
// recomputed, as a kairox-prepare that wrote those values would have.
void Rewrite(const std::string& src, const std::string& dst,
             const std::function<void(kx::GgufWriter&)>& edit_kv,
             const std::function<void(const std::string&, std::vector<uint8_t>&)>& edit_tensor,
             bool reseal) {
  auto f = kx::GgufFile::Open(src);
  REQUIRE(f.ok());
  kx::GgufWriter w;
  for (size_t i = 0; i < f->num_kv(); ++i) {
    const std::string_view raw = f->RawValueAt(i);
    w.SetRaw(f->KeyAt(i), f->TypeAt(i), std::vector<uint8_t>(raw.begin(), raw.end()));
  }
  if (edit_kv) edit_kv(w);
  std::map<std::string, std::vector<uint8_t>> bytes;
  for (const kx::GgufTensorInfo& t : f->tensors()) {
    const uint8_t* d = f->TensorData(t);
    std::vector<uint8_t>& b = bytes[t.name];
    b.assign(d, d + t.size_bytes);
    if (edit_tensor) edit_tensor(t.name, b);
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    REQUIRE(w.AddTensor(t.name, t.type, ne, b.data(), b.size()).ok());
  }
  if (reseal) {
    for (int l = 0;; ++l) {
      const std::string prefix = "blk." + std::to_string(l) + ".kairox.";
      if (bytes.find(prefix + "perm") == bytes.end()) break;
      kx::sparse::LayerDigest d;
      for (std::string_view what : kx::sparse::kLayerHashedTensors) {
        auto it = bytes.find(prefix + std::string(what));
        if (it != bytes.end()) d.Add(what, it->second.data(), it->second.size());
      }
      w.SetString(kx::sparse::LayerHashKey(l), d.Hex());
    }
    w.SetString(kx::sparse::kSidecarMetaHashKey, kx::sparse::MetadataSha256(w));
  }
  REQUIRE(w.WriteFile(dst).ok());
}

std::string OpenError(const std::string& path) {
  auto model = kx::Model::Load(Tiny().model);
  REQUIRE(model.ok());
  auto s = kx::sparse::Sidecar::Open(path, **model);
  REQUIRE_FALSE(s.ok());
  return std::string(s.status().message());
}

template <typename T>
void Poke(std::vector<uint8_t>& b, size_t i, T v) {
  REQUIRE((i + 1) * sizeof(T) <= b.size());
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}

void SetMtimeSecondsAgo(const std::string& path, int seconds) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

}  // namespace

TEST_CASE("a prepared sidecar opens, and a faithful copy too") {
  const Prepared& p = Tiny();
  auto model = kx::Model::Load(p.model);
  REQUIRE(model.ok());
  auto s = kx::sparse::Sidecar::Open(p.sidecar, **model);
  INFO(s.status().message());
  REQUIRE(s.ok());
  CHECK((*s)->down_layout() == kx::sparse::DownLayout::kBlocks);
  CHECK((*s)->layer(1).has_predictor);
  const std::string copy = TempDir() + "/copy.kairox.gguf";
  Rewrite(p.sidecar, copy, nullptr, nullptr, /*reseal=*/false);
  auto c = kx::sparse::Sidecar::Open(copy, **model);
  INFO(c.status().message());
  CHECK(c.ok());
}

TEST_CASE("each corruption of a sidecar is refused by name") {
  const Prepared& p = Tiny();
  const std::string bad = TempDir() + "/bad.kairox.gguf";
  SECTION("a flipped bundle byte: the layer's hash") {
    Rewrite(p.sidecar, bad, nullptr,
            [](const std::string& name, std::vector<uint8_t>& b) {
              if (name == "blk.1.kairox.bundles") b[b.size() / 2] ^= 0x10;
            },
            false);
    const std::string msg = OpenError(bad);
    CHECK_THAT(msg, Catch::Contains("blk.1.kairox.sha256"));
    CHECK_THAT(msg, Catch::Contains("layer 1's bytes"));
    CHECK_THAT(msg, Catch::Contains("kairox-prepare -m"));
  }
  SECTION("kairox.down_layout changed from blocks to rows: the metadata hash") {
    Rewrite(p.sidecar, bad, [](kx::GgufWriter& w) { w.SetString("kairox.down_layout", "rows"); },
            nullptr, false);
    const std::string msg = OpenError(bad);
    CHECK_THAT(msg, Catch::Contains("kairox.sha256.meta"));
  }
  SECTION("NaN in predictor weights, even with matching hashes") {
    for (bool reseal : {false, true}) {
      Rewrite(p.sidecar, bad, nullptr,
              [](const std::string& name, std::vector<uint8_t>& b) {
                if (name == "blk.0.kairox.pred.w1") Poke<uint16_t>(b, 5, 0x7e00);  // F16 NaN
              },
              reseal);
      const std::string msg = OpenError(bad);
      CHECK_THAT(msg, Catch::Contains("blk.0.kairox.pred.w1 holds a non-finite value"));
    }
    Rewrite(p.sidecar, bad, nullptr,
            [](const std::string& name, std::vector<uint8_t>& b) {
              if (name == "blk.1.kairox.pred.b2") Poke<float>(b, 3, INFINITY);
            },
            true);
    CHECK_THAT(OpenError(bad), Catch::Contains("blk.1.kairox.pred.b2 holds a non-finite value"));
  }
  SECTION("a threshold of 1e30, even with matching hashes") {
    for (bool reseal : {false, true}) {
      Rewrite(p.sidecar, bad, nullptr,
              [](const std::string& name, std::vector<uint8_t>& b) {
                if (name == "blk.1.kairox.thresholds") Poke<float>(b, 1, 1e30f);
              },
              reseal);
      const std::string msg = OpenError(bad);
      INFO(msg);
      CHECK_THAT(msg, Catch::Contains("blk.1.kairox.thresholds[1] is 1e+30, outside [0, 10000]"));
    }
  }
  SECTION("frequencies outside [0, 1]") {
    Rewrite(p.sidecar, bad, nullptr,
            [](const std::string& name, std::vector<uint8_t>& b) {
              if (name == "blk.0.kairox.freq") Poke<float>(b, 7, 2.5f);
            },
            true);
    CHECK_THAT(OpenError(bad), Catch::Contains("blk.0.kairox.freq element 7 is 2.5"));
  }
  SECTION("an unknown layout with matching hashes is still refused by name") {
    Rewrite(p.sidecar, bad, [](kx::GgufWriter& w) { w.SetString("kairox.down_layout", "blockz"); },
            nullptr, true);
    CHECK_THAT(OpenError(bad), Catch::Contains("down_layout 'blockz'"));
  }
  SECTION("a sidecar without its hashes (as written before version 3)") {
    Rewrite(p.sidecar, bad, [](kx::GgufWriter& w) { w.SetU32("kairox.version", 2); }, nullptr,
            true);
    std::string msg = OpenError(bad);
    CHECK_THAT(msg, Catch::Contains("format version 2, this kairox reads version 3"));
    CHECK_THAT(msg, Catch::Contains("kairox-prepare -m"));
    // Version 3 but no metadata hash: a hand-made file.
    auto f = kx::GgufFile::Open(p.sidecar);
    REQUIRE(f.ok());
    kx::GgufWriter w;
    for (size_t i = 0; i < f->num_kv(); ++i) {
      if (f->KeyAt(i) == kx::sparse::kSidecarMetaHashKey) continue;
      const std::string_view raw = f->RawValueAt(i);
      w.SetRaw(f->KeyAt(i), f->TypeAt(i), std::vector<uint8_t>(raw.begin(), raw.end()));
    }
    REQUIRE(w.WriteFile(bad).ok());
    msg = OpenError(bad);
    CHECK_THAT(msg, Catch::Contains("no content hash (kairox.sha256.meta)"));
  }
}

TEST_CASE("the verified-sidecar cache makes the second open skip the hash pass") {
  const Prepared& p = Tiny();
  auto model = kx::Model::Load(p.model);
  REQUIRE(model.ok());
  const std::string path = TempDir() + "/cached.kairox.gguf";
  Rewrite(p.sidecar, path, nullptr, nullptr, false);
  // A file modified in the last 2 s is never cached (its mtime could hide a
  // rewrite): it is hashed on every open.
  const uint64_t before_fresh = kx::sparse::SidecarHashPasses();
  for (int i = 0; i < 2; ++i) {
    auto s = kx::sparse::Sidecar::Open(path, **model);
    REQUIRE(s.ok());
    CHECK_FALSE((*s)->verified_from_cache());
  }
  CHECK(kx::sparse::SidecarHashPasses() == before_fresh + 2);

  SetMtimeSecondsAgo(path, 60);
  const uint64_t before = kx::sparse::SidecarHashPasses();
  {
    auto s = kx::sparse::Sidecar::Open(path, **model);
    REQUIRE(s.ok());
    CHECK_FALSE((*s)->verified_from_cache());
  }
  CHECK(kx::sparse::SidecarHashPasses() == before + 1);
  {
    auto s = kx::sparse::Sidecar::Open(path, **model);
    REQUIRE(s.ok());
    CHECK((*s)->verified_from_cache());
  }
  CHECK(kx::sparse::SidecarHashPasses() == before + 1);  // no second pass

  // Damage that keeps the size, with an old mtime again: a new mtime (the
  // write) means a new cache key, so the damage is found.
  {
    const int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    auto f = kx::GgufFile::Open(path);
    REQUIRE(f.ok());
    const kx::GgufTensorInfo* t = f->FindTensor("blk.0.kairox.bundles");
    REQUIRE(t != nullptr);
    const uint8_t flipped = f->TensorData(*t)[100] ^ 0x01;
    REQUIRE(::pwrite(fd, &flipped, 1, static_cast<off_t>(f->data_offset() + t->offset + 100)) == 1);
    ::close(fd);
  }
  SetMtimeSecondsAgo(path, 30);
  auto s = kx::sparse::Sidecar::Open(path, **model);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.status().message()), Catch::Contains("blk.0.kairox.sha256"));
  CHECK(kx::sparse::SidecarHashPasses() == before + 2);
}

TEST_CASE("a sidecar written to during a session stops the next evaluation with an error") {
  const Prepared& p = Tiny();
  const std::string path = TempDir() + "/live.kairox.gguf";
  Rewrite(p.sidecar, path, nullptr, nullptr, false);
  kx::EngineOptions o;
  o.n_threads = 2;
  o.sidecar = path;
  auto e = kx::Engine::Load(p.model, o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  REQUIRE((*e)->sparse() != nullptr);
  const std::vector<int32_t> prompt = kx::test::RandomTokens(5, 4);
  REQUIRE((*e)->Eval(prompt).ok());
  const int n_past = (*e)->n_past();
  // Rewritten in place, same size (as `cp other.kairox.gguf live.kairox.gguf` does).
  {
    const int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    const uint8_t zero = 0;
    REQUIRE(::pwrite(fd, &zero, 1, 4096 * 3) == 1);
    ::close(fd);
  }
  const std::vector<int32_t> next = {3};
  const absl::Status st = (*e)->Eval(next);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(st.message()), Catch::Contains("written to during the session"));
  CHECK_THAT(std::string(st.message()), Catch::Contains(path));
  CHECK((*e)->n_past() == n_past);  // the token was not kept
}
