// Model validation (issue #15 item 7): what the engine relies on is checked
// at load, each hostile model refused with an error naming the key; NaN/inf
// weights are caught at run time as non-finite logits at the first token.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "kairox/kairox.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model.h"
#include "test_util.h"

namespace {

std::string TempDir() { return kx::test::TempDir("model_validation"); }

const std::string& TinyPath() {
  static const std::string path = [] {
    const std::string p = TempDir() + "/tiny.gguf";
    kx::test::TinyModelSpec spec;
    spec.seed = 4242;
    REQUIRE(kx::test::WriteTinyModel(p, spec, nullptr).ok());
    return p;
  }();
  return path;
}

// A copy of the tiny model with `edit_kv` applied to its metadata and
// `edit_tensor` to its tensors' bytes.
std::string Hostile(const std::string& name, const std::function<void(kx::GgufWriter&)>& edit_kv,
                    const std::function<void(const std::string&, std::vector<uint8_t>&)>&
                        edit_tensor = nullptr) {
  auto f = kx::GgufFile::Open(TinyPath());
  REQUIRE(f.ok());
  kx::GgufWriter w;
  for (size_t i = 0; i < f->num_kv(); ++i) {
    const std::string_view raw = f->RawValueAt(i);
    w.SetRaw(f->KeyAt(i), f->TypeAt(i), std::vector<uint8_t>(raw.begin(), raw.end()));
  }
  if (edit_kv) edit_kv(w);
  for (const kx::GgufTensorInfo& t : f->tensors()) {
    const uint8_t* d = f->TensorData(t);
    std::vector<uint8_t> b(d, d + t.size_bytes);
    if (edit_tensor) edit_tensor(t.name, b);
    REQUIRE(w.AddTensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), b.data(),
                        b.size())
                .ok());
  }
  const std::string path = TempDir() + "/" + name + ".gguf";
  REQUIRE(w.WriteFile(path).ok());
  return path;
}

std::vector<std::string> Tokens() {
  auto f = kx::GgufFile::Open(TinyPath());
  REQUIRE(f.ok());
  auto a = f->GetArray("tokenizer.ggml.tokens");
  REQUIRE(a.ok());
  auto v = a->ToStrings();
  REQUIRE(v.ok());
  return std::vector<std::string>(v->begin(), v->end());
}

std::string LoadError(const std::string& path) {
  auto m = kx::Model::Load(path);
  REQUIRE_FALSE(m.ok());
  return std::string(m.status().message());
}

}  // namespace

TEST_CASE("the unedited copy loads") {
  auto m = kx::Model::Load(Hostile("same", nullptr));
  INFO(m.status().message());
  CHECK(m.ok());
}

TEST_CASE("hyperparameters out of range are refused by key") {
  CHECK_THAT(LoadError(Hostile("rope-inf",
                               [](kx::GgufWriter& w) {
                                 w.SetF32("llama.rope.freq_base", INFINITY);
                               })),
             Catch::Contains("llama.rope.freq_base = inf is out of range"));
  CHECK_THAT(LoadError(Hostile("rope-nan",
                               [](kx::GgufWriter& w) { w.SetF32("llama.rope.freq_base", NAN); })),
             Catch::Contains("llama.rope.freq_base"));
  CHECK_THAT(LoadError(Hostile("eps-inf",
                               [](kx::GgufWriter& w) {
                                 w.SetF32("llama.attention.layer_norm_rms_epsilon", INFINITY);
                               })),
             Catch::Contains("llama.attention.layer_norm_rms_epsilon = inf"));
  CHECK_THAT(
      LoadError(Hostile("vocab0", [](kx::GgufWriter& w) { w.SetU32("llama.vocab_size", 0); })),
      Catch::Contains("llama.vocab_size = 0 is out of range"));
  CHECK_THAT(LoadError(Hostile("vocab2e30",
                               [](kx::GgufWriter& w) { w.SetU32("llama.vocab_size", 1u << 30); })),
             Catch::Contains("llama.vocab_size = 1073741824 is out of range"));
  CHECK_THAT(
      LoadError(Hostile("vocab255", [](kx::GgufWriter& w) { w.SetU32("llama.vocab_size", 255); })),
      Catch::Contains("llama.vocab_size = 255, but token_embd.weight has 256 rows"));
  // The right value is accepted.
  auto ok = kx::Model::Load(
      Hostile("vocab256", [](kx::GgufWriter& w) { w.SetU32("llama.vocab_size", 256); }));
  INFO(ok.status().message());
  CHECK(ok.ok());
}

TEST_CASE("hostile vocabularies are refused by key and index") {
  auto with_tokens = [](const std::string& name, int at, const std::string& spelling) {
    std::vector<std::string> t = Tokens();
    t[at] = spelling;
    return Hostile(name, [t](kx::GgufWriter& w) { w.SetArrayString("tokenizer.ggml.tokens", t); });
  };
  CHECK_THAT(LoadError(with_tokens("empty-token", 5, "")),
             Catch::Contains("tokenizer.ggml.tokens[5] is an empty string"));
  CHECK_THAT(LoadError(with_tokens("nul-token", 7, std::string("a\0b", 3))),
             Catch::Contains("tokenizer.ggml.tokens[7] contains a NUL byte"));
  for (int bad : {99, -1}) {
    std::vector<int32_t> types(256, 1);
    types[3] = bad;
    CHECK_THAT(LoadError(Hostile("type" + std::to_string(bad),
                                 [types](kx::GgufWriter& w) {
                                   w.SetArrayI32("tokenizer.ggml.token_type", types);
                                 })),
               Catch::Contains("tokenizer.ggml.token_type[3] = " + std::to_string(bad) +
                               " is not a known token type (0..6)"));
  }
  const std::vector<std::string> tokens = Tokens();
  const std::string good = tokens[70] + " " + tokens[71];
  for (const std::string& merge : {std::string("ab"), std::string(" ab"), std::string("ab "),
                                   tokens[70] + "  " + tokens[71], tokens[70] + " x y"}) {
    INFO("merge '" << merge << "'");
    CHECK_THAT(LoadError(Hostile("merge", [&](kx::GgufWriter& w) {
                 w.SetArrayString("tokenizer.ggml.merges", {good, merge});
               })),
               Catch::Contains("tokenizer.ggml.merges[1] is not two tokens separated by one space"));
  }
  auto ok = kx::Model::Load(Hostile("merge-ok", [&](kx::GgufWriter& w) {
    w.SetArrayString("tokenizer.ggml.merges", {good});
  }));
  INFO(ok.status().message());
  CHECK(ok.ok());
}

TEST_CASE("NaN or inf in output_norm stops evaluation at the first token with an error") {
  for (float poison : {NAN, INFINITY}) {
    const std::string path =
        Hostile("norm-poison", nullptr, [poison](const std::string& name, std::vector<uint8_t>& b) {
          if (name == "output_norm.weight") std::memcpy(b.data() + 4 * 9, &poison, 4);
        });
    kx::EngineOptions o;
    o.n_threads = 2;
    o.sparse = false;
    auto e = kx::Engine::Load(path, o);
    INFO(e.status().message());
    REQUIRE(e.ok());  // weights are not scanned at load: that would read the whole file
    const std::vector<int32_t> prompt = {1, 40, 41, 42};
    const absl::Status st = (*e)->Eval(prompt);
    REQUIRE_FALSE(st.ok());
    CHECK(kx::IsNonFiniteLogits(st));
    CHECK_THAT(std::string(st.message()),
               Catch::Contains("non-finite logits (NaN or inf) for the token at position 3"));
    CHECK((*e)->n_past() == 0);
    // With every position's logits kept, the first bad one is named.
    const absl::Status all = (*e)->Eval(prompt, /*all_logits=*/true);
    CHECK(kx::IsNonFiniteLogits(all));
    CHECK_THAT(std::string(all.message()), Catch::Contains("at position 0"));
  }
  // The negative control: the same file unpoisoned evaluates, and its
  // error status is not mistaken for one.
  kx::EngineOptions o;
  o.n_threads = 2;
  o.sparse = false;
  auto e = kx::Engine::Load(TinyPath(), o);
  REQUIRE(e.ok());
  REQUIRE((*e)->Eval(std::vector<int32_t>{1, 40, 41, 42}).ok());
  CHECK_FALSE(kx::IsNonFiniteLogits(absl::DataLossError("other")));
}

TEST_CASE("the C ABI reports NaN logits as KX_STATUS_INVALID_MODEL with the message") {
  const std::string path =
      Hostile("norm-nan-capi", nullptr, [](const std::string& name, std::vector<uint8_t>& b) {
        if (name == "output_norm.weight") {
          const float nan = NAN;
          std::memcpy(b.data(), &nan, 4);
        }
      });
  kx_model* model = nullptr;
  REQUIRE(kx_model_load(path.c_str(), nullptr, &model) == KX_STATUS_OK);
  kx_session* session = nullptr;
  REQUIRE(kx_session_create(model, nullptr, &session) == KX_STATUS_OK);
  const int32_t prompt[] = {1, 40, 41};
  CHECK(kx_session_eval(session, prompt, 3, 0) == KX_STATUS_INVALID_MODEL);
  CHECK_THAT(std::string(kx_last_error()), Catch::Contains("non-finite logits"));
  kx_session_free(session);
  kx_model_free(model);
}
