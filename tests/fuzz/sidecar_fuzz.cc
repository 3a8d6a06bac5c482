// libFuzzer target: hostile bytes as a sidecar for a fixed tiny model. Sidecar::Open must refuse
// them with a message or accept them, and everything it accepted must be safe to read in full.
//
// The input is one flag byte and a file. A sidecar checks its own bytes (a digest over the
// metadata, one per layer), so almost every mutation would stop at the first digest; when the
// flag's low bit is set the digests already in the file (64-hex-character strings) are
// recomputed and patched in place first, so that mutated keys, shapes, types and values reach
// the checks behind them. The file goes through /dev/shm because Open takes a path (it maps
// the file and keeps it open to notice changes).
//
// LLVMFuzzerInitialize writes the tiny model and, into the first corpus directory on the
// command line when it has no files yet, valid sidecars for it (rows and blocks layouts, with
// and without predictors), each already prefixed by the flag byte.
#include <dirent.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/tiny_model.h"
#include "model/gguf.h"
#include "model/model.h"
#include "sparse/bundle.h"
#include "sparse/sidecar.h"
#include "sparse/sidecar_verify.h"

namespace {

std::string g_dir;
std::string g_path;
std::shared_ptr<const kx::Model> g_model;
volatile uint64_t g_sink = 0;

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  KX_CHECK(f != nullptr);
  KX_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
  KX_CHECK(std::fclose(f) == 0);
}

// Overwrites the 64 characters of string key `i` (when it has exactly 64) with `hex`.
void Patch(const kx::GgufFile& f, size_t i, uint8_t* base, const std::string& hex) {
  if (f.TypeAt(i) != kx::GgufType::kString || hex.size() != 64) return;
  const std::string_view raw = f.RawValueAt(i);  // u64 length, then the characters
  if (raw.size() != 8 + 64) return;
  const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(raw.data()) - base) + 8;
  std::memcpy(base + at, hex.data(), 64);
}

// Recomputes the layer digests and then the metadata digest of `bytes` in place.
void Reseal(std::vector<uint8_t>& bytes) {
  auto parsed = kx::GgufFile::FromBuffer(bytes.data(), bytes.size());
  if (!parsed.ok()) return;
  const kx::GgufFile& f = *parsed;
  for (size_t i = 0; i < f.num_kv(); ++i) {
    const std::string_view key = f.KeyAt(i);
    // blk.N.kairox.sha256
    if (key.size() < 20 || key.substr(0, 4) != "blk." || key.substr(key.size() - 14) != ".kairox.sha256") {
      continue;
    }
    const std::string prefix(key.substr(0, key.size() - 6));  // "blk.N.kairox."
    kx::sparse::LayerDigest digest;
    for (std::string_view what : kx::sparse::kLayerHashedTensors) {
      const kx::GgufTensorInfo* t = f.FindTensor(prefix + std::string(what));
      if (t != nullptr) digest.Add(what, f.TensorData(*t), t->size_bytes);
    }
    Patch(f, i, bytes.data(), digest.Hex());
  }
  // The metadata digest covers the layer digests just patched: parse again.
  auto again = kx::GgufFile::FromBuffer(bytes.data(), bytes.size());
  if (!again.ok()) return;
  for (size_t i = 0; i < again->num_kv(); ++i) {
    if (again->KeyAt(i) == kx::sparse::kSidecarMetaHashKey) {
      Patch(*again, i, bytes.data(), kx::sparse::MetadataSha256(*again));
    }
  }
}

// Reads the first and last element of a view of n elements.
template <typename T>
void TouchView(const T* p, uint64_t n) {
  if (n == 0) return;
  KX_CHECK(p != nullptr);
  g_sink = g_sink + static_cast<uint64_t>(p[0]) + static_cast<uint64_t>(p[n - 1]);
}

void TouchSidecar(const kx::sparse::Sidecar& s, const kx::LlamaHParams& hp) {
  KX_CHECK(s.n_layer() == hp.n_layer);
  KX_CHECK(!s.sparsity_levels().empty());
  for (float level : s.sparsity_levels()) {
    auto th = s.ThresholdsFor(level);
    KX_CHECK(th.ok());
    KX_CHECK(th->size() == static_cast<size_t>(hp.n_layer));
  }
  g_sink = g_sink + s.PredictorBytes() + s.BundleBytes() + s.calibration_json().size();
  for (int l = 0; l < s.n_layer(); ++l) {
    const kx::sparse::Sidecar::Layer& L = s.layer(l);
    TouchView(L.perm, static_cast<uint64_t>(hp.n_ff));
    for (int i = 0; i < hp.n_ff; ++i) KX_CHECK(L.perm[i] >= 0 && L.perm[i] < hp.n_ff);
    for (int i = 0; i < hp.n_ff; ++i) KX_CHECK(L.freq[i] >= 0.0f && L.freq[i] <= 1.0f);
    KX_CHECK(L.layout.n_groups > 0 && L.layout.bundle_stride > 0);
    TouchView(L.bundles, static_cast<uint64_t>(L.layout.n_groups) * L.layout.bundle_stride);
    if (L.has_predictor) {
      const kx::sparse::PredictorView& p = L.predictor;
      g_sink = g_sink + static_cast<uint64_t>(p.rank);
    }
  }
  KX_CHECK(s.CheckUnchanged().ok());
}

// A valid sidecar for g_model: identity permutation, zero bundles, optional predictors.
kx::sparse::SidecarData ValidData(kx::sparse::DownLayout layout, bool predictors) {
  const kx::LlamaHParams& hp = g_model->hparams();
  kx::sparse::SidecarData d;
  d.model_sha256 = std::string(64, '0');  // not compared: check_model_sha256 = false
  d.model_arch = hp.arch;
  d.n_layer = hp.n_layer;
  d.n_embd = hp.n_embd;
  d.n_ff = hp.n_ff;
  d.sparsity = 0.5f;
  d.sparsity_levels = {0.25f, 0.5f};
  d.group_size = layout == kx::sparse::DownLayout::kBlocks ? 32 : 16;  // blocks: 32-neuron blocks
  d.down_layout = layout;
  d.activation_rule = kx::sparse::ActivationRuleFor(hp.ffn_act);
  d.calibration_json = "{\"seed\":1}";
  for (int l = 0; l < hp.n_layer; ++l) {
    const kx::LlamaLayerWeights& w = g_model->weights().layers[l];
    kx::sparse::SidecarLayerData L;
    L.perm.resize(hp.n_ff);
    std::iota(L.perm.begin(), L.perm.end(), 0);
    L.freq.assign(hp.n_ff, 0.5f);
    L.thresholds = {0.05f, 0.1f};
    const kx::GgmlType down = layout == kx::sparse::DownLayout::kRows ? kx::GgmlType::kQ8_0
                                                                      : w.ffn_down.type;
    auto bl = kx::sparse::MakeBundleLayout(hp.n_embd, hp.n_ff, d.group_size, w.ffn_up.type,
                                           w.ffn_gate.type, down, layout);
    if (!bl.ok()) return {};
    L.layout = *bl;
    L.bundles.assign(L.layout.bundle_stride * L.layout.n_groups, 0x11);
    if (predictors) {
      const int rank = 8;
      L.has_predictor = true;
      L.pred_rank = rank;
      L.w1.assign(static_cast<size_t>(hp.n_embd) * rank, 0x3c00);  // F16 1.0
      L.b1.assign(rank, 0.0f);
      L.w2t.assign(static_cast<size_t>(hp.n_ff) * rank, 0);
      L.b2.assign(hp.n_ff, 0.0f);
    }
    d.layers.push_back(std::move(L));
  }
  return d;
}

bool DirHasFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return true;  // not a directory: write nothing there
  bool any = false;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') any = true;
  }
  ::closedir(d);
  return any;
}

void WriteSeeds(const std::string& corpus) {
  int n = 0;
  for (auto layout : {kx::sparse::DownLayout::kRows, kx::sparse::DownLayout::kBlocks}) {
    for (bool pred : {false, true}) {
      const kx::sparse::SidecarData d = ValidData(layout, pred);
      if (d.layers.empty()) continue;
      const std::string tmp = g_dir + "/seed.kairox.gguf";
      KX_CHECK(kx::sparse::WriteSidecar(d, tmp).ok());
      std::vector<uint8_t> bytes = ReadFile(tmp);
      for (uint8_t flag : {uint8_t{1}, uint8_t{0}}) {
        std::vector<uint8_t> seed;
        seed.push_back(flag);
        seed.insert(seed.end(), bytes.begin(), bytes.end());
        const std::string out = absl::StrCat(corpus, "/seed-", n++);
        WriteFile(out, seed.data(), seed.size());
      }
    }
  }
  std::fprintf(stderr, "sidecar_fuzz: wrote %d seeds to %s\n", n, corpus.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  char tmpl[] = "/dev/shm/kx_sidecar_fuzz_XXXXXX";
  const char* made = ::mkdtemp(tmpl);
  if (made == nullptr) {
    char tmpl2[] = "/tmp/kx_sidecar_fuzz_XXXXXX";
    made = ::mkdtemp(tmpl2);
  }
  KX_CHECK(made != nullptr);
  g_dir = made;
  std::atexit([] {  // libFuzzer ends with exit(): the scratch directory goes with it
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
  });
  g_path = g_dir + "/input.kairox.gguf";
  // The verified-sidecar and sha256 caches go under the scratch directory, not ~/.cache.
  ::setenv("XDG_CACHE_HOME", g_dir.c_str(), 1);
  const std::string model_path = g_dir + "/tiny.gguf";
  kx::test::TinyModelSpec spec;  // 2 layers, n_embd 64, n_ff 128
  KX_CHECK(kx::test::WriteTinyModel(model_path, spec, nullptr).ok());
  auto m = kx::Model::Load(model_path);
  KX_CHECK(m.ok());
  g_model = std::shared_ptr<const kx::Model>(std::move(*m));
  for (int i = 1; i < *argc; ++i) {
    const char* a = (*argv)[i];
    if (a[0] == '-') continue;
    if (!DirHasFiles(a)) WriteSeeds(a);
    break;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 1) != 0) Reseal(bytes);
  WriteFile(g_path, bytes.data(), bytes.size());
  kx::sparse::SidecarOptions options;
  options.check_model_sha256 = false;
  auto s = kx::sparse::Sidecar::Open(g_path, *g_model, options);
  if (!s.ok()) {
    KX_CHECK(!s.status().message().empty());
    return 0;
  }
  TouchSidecar(**s, g_model->hparams());
  return 0;
}
