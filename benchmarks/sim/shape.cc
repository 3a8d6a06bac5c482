#include "shape.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "model/gguf.h"
#include "sparse/group_frequency.h"

namespace kx::sim_cli {
namespace {

absl::StatusOr<const GgufTensorInfo*> Tensor(const GgufFile& f, const std::string& path,
                                             const std::string& name) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no tensor ", name, " (kairox-sim reads llama-family FFN shapes)"));
  }
  return t;
}

}  // namespace

absl::StatusOr<ModelShape> ReadModelShape(const std::string& model_path,
                                          const std::string& sidecar_path, int n_groups,
                                          int group_size) {
  ModelShape s;
  s.model_path = model_path;
  KX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(model_path));
  KX_ASSIGN_OR_RETURN(const GgufTensorInfo* up, Tensor(f, model_path, "blk.0.ffn_up.weight"));
  KX_ASSIGN_OR_RETURN(const GgufTensorInfo* gate, Tensor(f, model_path, "blk.0.ffn_gate.weight"));
  KX_ASSIGN_OR_RETURN(const GgufTensorInfo* down, Tensor(f, model_path, "blk.0.ffn_down.weight"));
  s.n_embd = up->ne[0];
  s.n_ff = up->ne[1];
  if (s.n_ff <= 0 || s.n_embd <= 0) return absl::InvalidArgumentError(model_path + ": empty FFN");
  s.neuron_bytes =
      (up->size_bytes + gate->size_bytes + down->size_bytes) / static_cast<uint64_t>(s.n_ff);
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string_view name = t.name;
    if (name.starts_with("blk.0.") && !name.starts_with("blk.0.ffn_")) s.attn_bytes += t.size_bytes;
    int layer = -1;
    if (name.starts_with("blk.") && std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1)
      s.n_layer = std::max(s.n_layer, layer + 1);
  }
  // The K/V cache row of one token: n_embd · n_head_kv / n_head elements each, f16.
  if (auto arch = f.GetString("general.architecture"); arch.ok()) {
    const std::string a(*arch);
    auto heads = f.GetUint(a + ".attention.head_count");
    auto kv_heads = f.GetUint(a + ".attention.head_count_kv");
    if (heads.ok() && kv_heads.ok() && *heads > 0) {
      constexpr uint64_t kF16Bytes = 2;
      s.kv_bytes_per_ctx = 2 * static_cast<uint64_t>(s.n_embd) * *kv_heads / *heads * kF16Bytes;
    }
  }
  const GgufTensorInfo* head = f.FindTensor("output.weight");
  if (head == nullptr) head = f.FindTensor("token_embd.weight");  // tied embeddings
  if (head != nullptr) s.head_bytes += head->size_bytes;
  if (const GgufTensorInfo* norm = f.FindTensor("output_norm.weight"))
    s.head_bytes += norm->size_bytes;

  if (sidecar_path.empty()) return s;
  s.sidecar_path = sidecar_path;
  KX_ASSIGN_OR_RETURN(GgufFile sc, GgufFile::Open(sidecar_path));
  KX_ASSIGN_OR_RETURN(uint64_t gs, sc.GetUint("kairox.group_size"));
  KX_ASSIGN_OR_RETURN(uint64_t sc_n_ff, sc.GetUint("kairox.model.n_ff"));
  if (static_cast<int64_t>(sc_n_ff) != s.n_ff || gs == 0) {
    return absl::FailedPreconditionError(absl::StrCat(sidecar_path, ": sidecar of n_ff ", sc_n_ff,
                                                      " does not match the model's ", s.n_ff));
  }
  s.sidecar_group_size = static_cast<int>(gs);
  KX_ASSIGN_OR_RETURN(const GgufTensorInfo* bundles,
                      Tensor(sc, sidecar_path, "blk.0.kairox.bundles"));
  s.neuron_bytes = bundles->size_bytes / static_cast<uint64_t>(s.n_ff);  // stride included
  const uint64_t sc_groups = (static_cast<uint64_t>(s.n_ff) + gs - 1) / gs;
  s.bundle_stride = bundles->size_bytes / sc_groups;
  constexpr uint64_t kPage = 4096;  // kDirectIoAlign
  s.bundle_lead = (sc.data_offset() + bundles->offset) % kPage;
  s.group_frequency.assign(static_cast<size_t>(s.n_layer) * n_groups, 0.0f);
  const int replay_gs = group_size > 0 ? group_size : static_cast<int>(gs);
  std::vector<float> layer_freq(static_cast<size_t>((s.n_ff + replay_gs - 1) / replay_gs));
  for (int l = 0; l < s.n_layer; ++l) {
    KX_ASSIGN_OR_RETURN(const GgufTensorInfo* freq,
                        Tensor(sc, sidecar_path, absl::StrCat("blk.", l, ".kairox.freq")));
    if (freq->type != GgmlType::kF32 || freq->n_elements() != s.n_ff) {
      return absl::InvalidArgumentError(
          absl::StrCat(sidecar_path, ": blk.", l, ".kairox.freq is not ", s.n_ff, " floats"));
    }
    const float* p = reinterpret_cast<const float*>(sc.TensorData(*freq));
    sparse::GroupMeanFrequency(p, s.n_ff, replay_gs, layer_freq.data());
    // The trace's group count (n_groups) is what the simulation uses; extra groups stay 0.
    std::copy_n(layer_freq.begin(), std::min<size_t>(layer_freq.size(), n_groups),
                s.group_frequency.begin() + static_cast<size_t>(l) * n_groups);
  }
  return s;
}

}  // namespace kx::sim_cli
