#include "sparse/sidecar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "model/gguf_writer.h"
#include "model/llama_ffn_activation.h"
#include "model/model.h"
#include "sparse/group_frequency.h"
#include "sparse/grouping.h"
#include "sparse/sidecar_verify.h"

namespace kx::sparse {
namespace {

std::string LayerKey(int l, std::string_view what) {
  return absl::StrCat("blk.", l, ".kairox.", std::string(what));
}

std::string RebuildHint(const std::string& path, const Model& model) {
  return absl::StrCat("; rebuild it with: kairox-prepare -m ", model.path(), " -o ", path);
}

// A tensor of the sidecar with the expected type and element count.
absl::StatusOr<const uint8_t*> Tensor(const GgufFile& f, const std::string& name, GgmlType type,
                                      int64_t n_elements) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("missing tensor ", name));
  if (t->type != type) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " is ", TypeName(t->type), ", expected ", TypeName(type)));
  }
  if (t->n_elements() != n_elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ", t->n_elements(),
                                                   " elements, expected ", n_elements));
  }
  return f.TensorData(*t);
}

// The hash pass over one layer: value ranges first (a more precise message
// than the digest's), then the digest over the same bytes, still in cache.
absl::Status VerifyLayer(const GgufFile& f, int l) {
  const std::string key = LayerHashKey(l);
  if (!f.HasKey(key)) return absl::InvalidArgumentError(absl::StrCat("no content hash ", key));
  KX_ASSIGN_OR_RETURN(std::string_view want, f.GetString(key));
  LayerDigest digest;
  for (std::string_view what : kLayerHashedTensors) {
    const std::string name = LayerKey(l, what);
    const GgufTensorInfo* t = f.FindTensor(name);
    if (t == nullptr) continue;  // Open required the ones that must exist
    const uint8_t* data = f.TensorData(*t);
    const uint64_t n = static_cast<uint64_t>(t->n_elements());
    // The value checks read n elements of the type the name implies: a tensor of another type
    // under a layer's name (one the digest has not covered yet, e.g. a pred.* tensor in a layer
    // without a predictor) would be read past its end.
    const bool is_f32 = what == "freq" || what == "pred.b1" || what == "pred.b2";
    const bool is_f16 = what == "pred.w1" || what == "pred.w2";
    if ((is_f32 && t->type != GgmlType::kF32) || (is_f16 && t->type != GgmlType::kF16)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is ", TypeName(t->type),
                                                     ", expected ", is_f32 ? "F32" : "F16"));
    }
    if (what == "freq") {
      KX_RETURN_IF_ERROR(CheckFrequencies(reinterpret_cast<const float*>(data), n, name));
    } else if (what == "pred.w1" || what == "pred.w2") {
      KX_RETURN_IF_ERROR(CheckF16Finite(reinterpret_cast<const uint16_t*>(data), n, name));
    } else if (what == "pred.b1" || what == "pred.b2") {
      KX_RETURN_IF_ERROR(CheckF32Finite(reinterpret_cast<const float*>(data), n, name));
    }
    digest.Add(what, data, t->size_bytes);
  }
  if (digest.Hex() != want) {
    return absl::DataLossError(
        absl::StrCat("layer ", l, "'s bytes (blk.", l, ".kairox.*) do not match their hash ", key,
                     ": the file is damaged or was changed after kairox-prepare wrote it"));
  }
  return absl::OkStatus();
}

}  // namespace

Sidecar::~Sidecar() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status Sidecar::CheckUnchanged() const {
  struct stat st;
  if (fd_ < 0) return absl::OkStatus();
  if (::fstat(fd_, &st) != 0) {
    return absl::DataLossError(absl::StrCat("sidecar ", path_, ": ", std::strerror(errno)));
  }
  const int64_t mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (static_cast<uint64_t>(st.st_size) != stamp_size_ || mtime_ns != stamp_mtime_ns_) {
    return absl::DataLossError(absl::StrCat(
        "sidecar ", path_, " was written to during the session (size ", stamp_size_, " -> ",
        st.st_size, " bytes, mtime changed: ", mtime_ns != stamp_mtime_ns_ ? "yes" : "no",
        "); the bytes this session reads are no longer the ones verified when it was opened. "
        "Stop writing to it (kairox-prepare replaces a sidecar by rename, which running sessions "
        "never see) and start again"));
  }
  return absl::OkStatus();
}

std::string ActivationRuleFor(FfnActivation act) {
  return IsReluFamily(act) ? std::string(FfnActivationName(act)) : std::string("cats");
}

std::string DefaultSidecarPath(const std::string& model_path) {
  std::string base = model_path;
  if (absl::EndsWithIgnoreCase(base, ".gguf")) base.resize(base.size() - 5);
  return base + ".kairox.gguf";
}

absl::Status WriteSidecar(const SidecarData& d, const std::string& path) {
  GgufWriter w;
  KX_RETURN_IF_ERROR(w.SetAlignment(kSidecarAlignment));
  w.SetString("general.architecture", "kairox.sidecar");
  w.SetU32("kairox.version", kSidecarVersion);
  w.SetString("kairox.model.sha256", d.model_sha256);
  w.SetString("kairox.model.arch", d.model_arch);
  w.SetU32("kairox.model.n_layer", d.n_layer);
  w.SetU32("kairox.model.n_embd", d.n_embd);
  w.SetU32("kairox.model.n_ff", d.n_ff);
  w.SetF32("kairox.sparsity", d.sparsity);
  w.SetArrayF32("kairox.sparsity_levels", d.sparsity_levels);
  w.SetU32("kairox.group_size", d.group_size);
  w.SetString("kairox.down_layout", DownLayoutName(d.down_layout));
  w.SetString("kairox.activation_rule", d.activation_rule);
  w.SetString("kairox.predictor.input", "adjacent");
  w.SetString("kairox.calibration", d.calibration_json);
  if (static_cast<int>(d.layers.size()) != d.n_layer) {
    return absl::InternalError("sidecar data: layer count mismatch");
  }
  for (int l = 0; l < d.n_layer; ++l) {
    const SidecarLayerData& L = d.layers[l];
    const int64_t n_ff = d.n_ff;
    // What Open would refuse is refused here, so prepare fails loudly
    // instead of writing a file no session can open.
    for (float t : L.thresholds) {
      if (!(t >= 0.0f && t <= kMaxSidecarThreshold)) {
        return absl::InternalError(absl::StrCat("sidecar data: layer ", l, " threshold ", t,
                                                " is outside [0, ", kMaxSidecarThreshold, "]"));
      }
    }
    KX_RETURN_IF_ERROR(CheckFrequencies(L.freq.data(), L.freq.size(), LayerKey(l, "freq")));
    if (L.has_predictor) {
      KX_RETURN_IF_ERROR(CheckF16Finite(L.w1.data(), L.w1.size(), LayerKey(l, "pred.w1")));
      KX_RETURN_IF_ERROR(CheckF16Finite(L.w2t.data(), L.w2t.size(), LayerKey(l, "pred.w2")));
      KX_RETURN_IF_ERROR(CheckF32Finite(L.b1.data(), L.b1.size(), LayerKey(l, "pred.b1")));
      KX_RETURN_IF_ERROR(CheckF32Finite(L.b2.data(), L.b2.size(), LayerKey(l, "pred.b2")));
    }
    // The same bytes, in kLayerHashedTensors order, as the tensors below.
    LayerDigest digest;
    digest.Add("perm", L.perm.data(), L.perm.size() * sizeof(int32_t));
    digest.Add("freq", L.freq.data(), L.freq.size() * sizeof(float));
    digest.Add("thresholds", L.thresholds.data(), L.thresholds.size() * sizeof(float));
    digest.Add("bundles", L.bundles.data(), L.bundles.size());
    if (L.has_predictor) {
      digest.Add("pred.w1", L.w1.data(), L.w1.size() * sizeof(uint16_t));
      digest.Add("pred.b1", L.b1.data(), L.b1.size() * sizeof(float));
      digest.Add("pred.w2", L.w2t.data(), L.w2t.size() * sizeof(uint16_t));
      digest.Add("pred.b2", L.b2.data(), L.b2.size() * sizeof(float));
    }
    w.SetString(LayerHashKey(l), digest.Hex());
    KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "perm"), GgmlType::kI32, {n_ff}, L.perm.data(),
                                       n_ff * sizeof(int32_t)));
    KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "freq"), GgmlType::kF32, {n_ff}, L.freq.data(),
                                       n_ff * sizeof(float)));
    const int64_t n_levels = static_cast<int64_t>(L.thresholds.size());
    KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "thresholds"), GgmlType::kF32, {n_levels},
                                       L.thresholds.data(), n_levels * sizeof(float)));
    w.SetArrayU32(LayerKey(l, "bundle_types"), {static_cast<uint32_t>(L.layout.up_type),
                                                static_cast<uint32_t>(L.layout.gate_type),
                                                static_cast<uint32_t>(L.layout.down_type)});
    KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "bundles"), GgmlType::kI8,
                                       {static_cast<int64_t>(L.bundles.size())}, L.bundles.data(),
                                       L.bundles.size()));
    if (L.has_predictor) {
      const int64_t r = L.pred_rank;
      KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "pred.w1"), GgmlType::kF16, {d.n_embd, r},
                                         L.w1.data(), L.w1.size() * sizeof(uint16_t)));
      KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "pred.b1"), GgmlType::kF32, {r}, L.b1.data(),
                                         L.b1.size() * sizeof(float)));
      KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "pred.w2"), GgmlType::kF16, {n_ff, r},
                                         L.w2t.data(), L.w2t.size() * sizeof(uint16_t)));
      KX_RETURN_IF_ERROR(w.AddTensorView(LayerKey(l, "pred.b2"), GgmlType::kF32, {n_ff},
                                         L.b2.data(), L.b2.size() * sizeof(float)));
      w.SetF32(LayerKey(l, "pred.threshold"), L.pred_threshold);
    }
  }
  w.SetString(kSidecarMetaHashKey, MetadataSha256(w));  // last: it covers every other key
  return w.WriteFile(path);
}

absl::StatusOr<std::unique_ptr<const Sidecar>> Sidecar::Open(const std::string& path,
                                                             const Model& model,
                                                             const SidecarOptions& options) {
  // Decode streams the bundles through this mapping: 2 MiB pages where the kernel can.
  auto opened = GgufFile::Open(path, MappedFile::Mode::kMapHuge);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("sidecar ", path, ": ", opened.status().message()));
  }
  LogHugePages(opened->mapping());
  std::unique_ptr<Sidecar> s(new Sidecar());
  s->path_ = path;
  s->file_ = std::make_unique<GgufFile>(std::move(*opened));
  const GgufFile& f = *s->file_;
  const LlamaHParams& hp = model.hparams();
  const std::string hint = RebuildHint(path, model);
  auto bad = [&](std::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("sidecar ", path, ": ", std::string(what), hint));
  };

  if (!f.HasKey("kairox.version")) return bad("not a kairox sidecar (no kairox.version)");
  KX_ASSIGN_OR_RETURN(uint64_t version, f.GetUint("kairox.version"));
  if (version != kSidecarVersion) {
    return bad(
        absl::StrCat("format version ", version, ", this kairox reads version ", kSidecarVersion));
  }
  // The metadata digest before any key is interpreted: a changed key (a
  // layout name, a bundle type, a threshold) would otherwise be read as
  // meant. Cheap (the metadata is a few KB), so checked on every open.
  if (!f.HasKey(kSidecarMetaHashKey)) {
    return bad(absl::StrCat("no content hash (", kSidecarMetaHashKey, ")"));
  }
  KX_ASSIGN_OR_RETURN(std::string_view meta_hash, f.GetString(kSidecarMetaHashKey));
  const std::string meta_hex = MetadataSha256(f);
  if (meta_hex != meta_hash) {
    return bad(absl::StrCat("its metadata does not match its hash ", kSidecarMetaHashKey,
                            ": a key was changed after kairox-prepare wrote the file"));
  }
  // The file as it is now; the engine compares against this after every
  // evaluation (CheckUnchanged), and the verified cache is keyed by it.
  s->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s->fd_ < 0) {
    return absl::InternalError(absl::StrCat("sidecar ", path, ": ", std::strerror(errno)));
  }
  KX_ASSIGN_OR_RETURN(FileStamp stamp, StampOf(s->fd_, path));
  if (stamp.size != f.file_size()) {
    return bad("the file changed while it was being opened");
  }
  s->stamp_size_ = stamp.size;
  s->stamp_mtime_ns_ = stamp.mtime_ns;
  s->verified_from_cache_ = VerifiedCacheContains(stamp, meta_hex);
  if (!s->verified_from_cache_) CountSidecarHashPass();
  KX_ASSIGN_OR_RETURN(std::string_view arch, f.GetString("kairox.model.arch"));
  KX_ASSIGN_OR_RETURN(uint64_t n_layer, f.GetUint("kairox.model.n_layer"));
  KX_ASSIGN_OR_RETURN(uint64_t n_embd, f.GetUint("kairox.model.n_embd"));
  KX_ASSIGN_OR_RETURN(uint64_t n_ff, f.GetUint("kairox.model.n_ff"));
  if (arch != hp.arch || n_layer != static_cast<uint64_t>(hp.n_layer) ||
      n_embd != static_cast<uint64_t>(hp.n_embd) || n_ff != static_cast<uint64_t>(hp.n_ff)) {
    return bad(absl::StrCat("built for a ", std::string(arch), " model with ", n_layer,
                            " layers, n_embd ", n_embd, ", n_ff ", n_ff, "; this model is ",
                            hp.arch, " with ", hp.n_layer, " layers, n_embd ", hp.n_embd, ", n_ff ",
                            hp.n_ff));
  }
  KX_ASSIGN_OR_RETURN(std::string_view sha, f.GetString("kairox.model.sha256"));
  if (options.check_model_sha256) {
    KX_ASSIGN_OR_RETURN(std::string model_sha, Sha256FileCached(model.path()));
    if (model_sha != sha) {
      return bad(absl::StrCat("built for a model with sha256 ", std::string(sha), ", but ",
                              model.path(), " has sha256 ", model_sha));
    }
  }
  KX_ASSIGN_OR_RETURN(double sparsity, f.GetFloat("kairox.sparsity"));
  s->sparsity_ = static_cast<float>(sparsity);
  KX_ASSIGN_OR_RETURN(GgufArray levels, f.GetArray("kairox.sparsity_levels"));
  KX_ASSIGN_OR_RETURN(s->levels_, levels.ToFloats());
  if (s->levels_.empty()) return bad("kairox.sparsity_levels is empty");
  for (size_t i = 0; i < s->levels_.size(); ++i) {
    const float v = s->levels_[i];
    if (!(v >= 0.0f && v < 1.0f) || (i > 0 && !(v > s->levels_[i - 1]))) {
      return bad("kairox.sparsity_levels must increase within [0, 1)");
    }
  }
  KX_ASSIGN_OR_RETURN(uint64_t gs, f.GetUint("kairox.group_size"));
  if (gs == 0 || gs > 32 || n_ff % gs != 0) {
    return bad(absl::StrCat("group size ", gs, " does not divide n_ff ", n_ff, " (or is > 32)"));
  }
  s->group_size_ = static_cast<int>(gs);
  KX_ASSIGN_OR_RETURN(std::string_view down_layout, f.GetString("kairox.down_layout"));
  if (down_layout == "blocks") {
    s->down_layout_ = DownLayout::kBlocks;
  } else if (down_layout != "rows") {
    return bad(absl::StrCat("unknown kairox.down_layout '", std::string(down_layout), "'"));
  }
  // Thresholds mean different things under the two rules (a CATS t_l on
  // |act| vs the ReLU family's exact zeros), so a sidecar built for another
  // activation (e.g. the model's activation key was added or changed since)
  // would silently compute a different model.
  const std::string want_rule = ActivationRuleFor(hp.ffn_act);
  s->activation_rule_ = "cats";  // sidecars from before the key always meant CATS
  if (f.HasKey("kairox.activation_rule")) {
    KX_ASSIGN_OR_RETURN(std::string_view rule, f.GetString("kairox.activation_rule"));
    s->activation_rule_ = std::string(rule);
  }
  if (s->activation_rule_ != want_rule) {
    return bad(absl::StrCat("activation rule '", s->activation_rule_, "', but this model's FFN is ",
                            std::string(FfnActivationName(hp.ffn_act)), " (rule '", want_rule,
                            "')"));
  }
  // The ReLU family's rule fixes every threshold: 0, or FATReLU's t.
  const bool rule_fixes_thresholds = IsReluFamily(hp.ffn_act);
  const float rule_threshold = hp.ffn_act == FfnActivation::kFatRelu ? hp.ffn_act_threshold : 0.0f;
  if (f.HasKey("kairox.calibration")) {
    KX_ASSIGN_OR_RETURN(std::string_view calib, f.GetString("kairox.calibration"));
    s->calibration_ = std::string(calib);
  }

  const int n_levels = static_cast<int>(s->levels_.size());
  const int nff = hp.n_ff;
  s->layers_.resize(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    Layer& L = s->layers_[l];
    const LlamaLayerWeights& mw = model.weights().layers[l];
    auto tensor = [&](std::string_view what, GgmlType type, int64_t n) {
      return Tensor(f, LayerKey(l, what), type, n);
    };
    auto wrap = [&](const absl::Status& st) { return bad(std::string(st.message())); };
    {
      auto p = tensor("perm", GgmlType::kI32, nff);
      if (!p.ok()) return wrap(p.status());
      L.perm = reinterpret_cast<const int32_t*>(*p);
      if (auto st = ValidatePermutation({L.perm, static_cast<size_t>(nff)}, nff); !st.ok()) {
        return bad(absl::StrCat(LayerKey(l, "perm"), ": ", std::string(st.message())));
      }
    }
    {
      auto p = tensor("freq", GgmlType::kF32, nff);
      if (!p.ok()) return wrap(p.status());
      L.freq = reinterpret_cast<const float*>(*p);
    }
    {
      auto p = tensor("thresholds", GgmlType::kF32, n_levels);
      if (!p.ok()) return wrap(p.status());
      const auto* t = reinterpret_cast<const float*>(*p);
      L.thresholds.assign(t, t + n_levels);
      for (size_t i = 0; i < L.thresholds.size(); ++i) {
        const float v = L.thresholds[i];
        if (!(v >= 0.0f && v <= kMaxSidecarThreshold)) {
          return bad(absl::StrCat(LayerKey(l, "thresholds"), "[", i, "] is ", v, ", outside [0, ",
                                  kMaxSidecarThreshold, "]"));
        }
        if (rule_fixes_thresholds && v != rule_threshold) {
          return bad(absl::StrCat("layer ", l, ": threshold ", v, ", but the ", s->activation_rule_,
                                  " rule of this model needs ", rule_threshold));
        }
      }
    }
    {
      auto types = f.GetArray(LayerKey(l, "bundle_types"));
      if (!types.ok()) return wrap(types.status());
      auto ints = types->ToInts();
      if (!ints.ok() || ints->size() != 3) {
        return bad(absl::StrCat(LayerKey(l, "bundle_types"),
                                " must be 3 integers (up, gate, down ggml type ids)"));
      }
      // Ids from the file: each must name a known type before it is used as one.
      for (size_t i = 0; i < 3; ++i) {
        const int64_t id = (*ints)[i];
        if (id < 0 || id > std::numeric_limits<uint32_t>::max() ||
            FindTypeInfo(static_cast<uint32_t>(id)) == nullptr) {
          return bad(absl::StrCat(LayerKey(l, "bundle_types"), "[", i, "] is ", id,
                                  ", not a known ggml type id"));
        }
      }
      const GgmlType up = static_cast<GgmlType>((*ints)[0]);
      const GgmlType gate = static_cast<GgmlType>((*ints)[1]);
      const GgmlType down = static_cast<GgmlType>((*ints)[2]);
      if (up != mw.ffn_up.type || gate != mw.ffn_gate.type) {
        return bad(absl::StrCat("layer ", l, ": bundles hold ", TypeName(up), "/", TypeName(gate),
                                " up/gate rows, the model's are ", TypeName(mw.ffn_up.type), "/",
                                TypeName(mw.ffn_gate.type)));
      }
      if (s->down_layout_ == DownLayout::kBlocks) {
        // The bundles hold the model's own ffn_down blocks: same type, and
        // each group one block of consecutive neurons.
        if (down != mw.ffn_down.type) {
          return bad(absl::StrCat("layer ", l, ": down blocks of ", TypeName(down),
                                  ", the model's ffn_down is ", TypeName(mw.ffn_down.type)));
        }
        if (!IsBlockPermutation({L.perm, static_cast<size_t>(nff)}, s->group_size_)) {
          return bad(absl::StrCat(LayerKey(l, "perm"),
                                  ": groups are not whole blocks, as down blocks need"));
        }
      }
      auto layout =
          MakeBundleLayout(hp.n_embd, nff, s->group_size_, up, gate, down, s->down_layout_);
      if (!layout.ok()) return wrap(layout.status());
      L.layout = *layout;
      auto p = tensor("bundles", GgmlType::kI8,
                      static_cast<int64_t>(L.layout.bundle_stride) * L.layout.n_groups);
      if (!p.ok()) return wrap(p.status());
      L.bundles = *p;
      L.bundles_file_offset = static_cast<uint64_t>(L.bundles - f.data());
    }
    if (f.FindTensor(LayerKey(l, "pred.w1")) != nullptr) {
      const GgufTensorInfo* t1 = f.FindTensor(LayerKey(l, "pred.w1"));
      const int64_t rank = t1->ne[1];
      if (t1->ne[0] != hp.n_embd || rank <= 0 || rank > nff) {
        return bad(absl::StrCat("layer ", l, ": predictor w1 has a bad shape"));
      }
      auto w1 = tensor("pred.w1", GgmlType::kF16, hp.n_embd * rank);
      auto b1 = tensor("pred.b1", GgmlType::kF32, rank);
      const GgufTensorInfo* t2 = f.FindTensor(LayerKey(l, "pred.w2"));
      if (t2 == nullptr || t2->ne[0] != nff || t2->ne[1] != rank) {
        return bad(absl::StrCat("layer ", l, ": predictor w2 is not ", rank, " rows of ", nff));
      }
      auto w2 = tensor("pred.w2", GgmlType::kF16, rank * nff);
      auto b2 = tensor("pred.b2", GgmlType::kF32, nff);
      for (const auto* st : {&w1, &b1, &w2, &b2}) {
        if (!st->ok()) return wrap(st->status());
      }
      auto thr = f.GetFloat(LayerKey(l, "pred.threshold"));
      if (!thr.ok()) return wrap(thr.status());
      if (!(*thr > 0.0 && *thr < 1.0))
        return bad(absl::StrCat("layer ", l, ": bad predictor threshold"));
      L.has_predictor = true;
      L.predictor.n_in = hp.n_embd;
      L.predictor.rank = static_cast<int>(rank);
      L.predictor.n_out = nff;
      L.predictor.w1 = reinterpret_cast<const uint16_t*>(*w1);
      L.predictor.b1 = reinterpret_cast<const float*>(*b1);
      L.predictor.w2t = reinterpret_cast<const uint16_t*>(*w2);
      L.predictor.b2 = reinterpret_cast<const float*>(*b2);
      L.predictor.threshold = static_cast<float>(*thr);
    }
    if (!s->verified_from_cache_) {
      if (absl::Status st = VerifyLayer(f, l); !st.ok()) return bad(std::string(st.message()));
    }
  }
  if (!s->verified_from_cache_) VerifiedCacheAdd(stamp, meta_hex);
  return std::unique_ptr<const Sidecar>(std::move(s));
}

std::vector<float> Sidecar::GroupFrequency() const {
  if (layers_.empty()) return {};
  const int n_groups = layers_[0].layout.n_groups;
  std::vector<float> freq(layers_.size() * static_cast<size_t>(n_groups));
  for (size_t l = 0; l < layers_.size(); ++l) {
    GroupMeanFrequency(layers_[l].freq, int64_t{n_groups} * group_size_, group_size_,
                       &freq[l * n_groups]);
  }
  return freq;
}

absl::StatusOr<std::vector<float>> Sidecar::ThresholdsFor(float s) const {
  if (!(s >= 0.0f && s < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("sparsity ", s, " is outside [0, 1)"));
  }
  int best = 0;
  for (int i = 1; i < static_cast<int>(levels_.size()); ++i) {
    if (std::fabs(levels_[i] - s) < std::fabs(levels_[best] - s)) best = i;
  }
  std::vector<float> out(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) out[l] = layers_[l].thresholds[best];
  return out;
}

uint64_t Sidecar::PredictorBytes() const {
  uint64_t total = 0;
  for (const Layer& L : layers_) {
    if (!L.has_predictor) continue;
    const uint64_t r = L.predictor.rank;
    total += 2 * r * (L.predictor.n_in + L.predictor.n_out) + 4 * (r + L.predictor.n_out);
  }
  return total;
}

uint64_t Sidecar::BundleBytes() const {
  uint64_t total = 0;
  for (const Layer& L : layers_) total += L.layout.bundle_stride * L.layout.n_groups;
  return total;
}

}  // namespace kx::sparse
