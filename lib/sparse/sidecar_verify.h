// What makes a sidecar check its own bytes (format version 3, sidecar.h):
// a SHA-256 per layer over that layer's tensors, one over the metadata, the
// value ranges checked in the same pass, and a cache of sidecars already
// verified so that a normal start does not hash them again.
//
// Why per layer: a layer's tensors (perm, freq, thresholds, bundles,
// predictor) are what one FFN step reads, and they lie together in the file,
// so a tier that brings a whole layer in (the GPU tier, which uploads a
// layer's bundles) can check that layer's digest when it first reads it,
// and an error names the layer. Per tensor would add seven keys per layer
// for no extra reach; one digest over the whole file could only be checked
// by reading all of it.
//
//   LayerDigest d;
//   d.Add("perm", perm_bytes, n);  ...             // in kLayerHashedTensors order
//   w.SetString(LayerHashKey(l), d.Hex());
//   w.SetString(kSidecarMetaHashKey, MetadataSha256(w));  // last, over every other key
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/sha256.h"
#include "base/status.h"

namespace kx::sparse {

// Metadata digest: over every key but itself.
inline constexpr char kSidecarMetaHashKey[] = "kairox.sha256.meta";
// blk.N.kairox.sha256: the digest of layer N's tensors.
std::string LayerHashKey(int layer);
// A layer's tensors (blk.N.kairox.<name>) in the order its digest covers
// them; absent ones (no predictor) are skipped.
inline constexpr std::array<std::string_view, 8> kLayerHashedTensors = {
    "perm", "freq", "thresholds", "bundles", "pred.w1", "pred.b1", "pred.w2", "pred.b2"};

// CATS thresholds are activation magnitudes |act(gate·x)| at a calibration
// quantile: well below 100 in every model measured. A threshold above this
// switches every neuron off, so it can only be damage; refused.
inline constexpr float kMaxSidecarThreshold = 1e4f;

// The digest of one layer: for each tensor, its name, byte count and bytes.
class LayerDigest {
 public:
  void Add(std::string_view name, const void* data, uint64_t bytes);
  std::string Hex() { return DigestHex(hasher_.Finish()); }

 private:
  Sha256 hasher_;
};

// The metadata digest of anything with num_kv/KeyAt/TypeAt/RawValueAt (a
// GgufWriter before it writes, a GgufFile after): each key but
// kSidecarMetaHashKey, in order, with its type and raw value bytes.
template <typename Kvs>
std::string MetadataSha256(const Kvs& kvs) {
  Sha256 h;
  for (size_t i = 0; i < kvs.num_kv(); ++i) {
    const std::string_view key = kvs.KeyAt(i);
    if (key == kSidecarMetaHashKey) continue;
    const uint64_t key_len = key.size();
    const uint32_t type = static_cast<uint32_t>(kvs.TypeAt(i));
    const std::string_view value = kvs.RawValueAt(i);
    const uint64_t value_len = value.size();
    h.Update(&key_len, sizeof(key_len));
    h.Update(key);
    h.Update(&type, sizeof(type));
    h.Update(&value_len, sizeof(value_len));
    h.Update(value);
  }
  return DigestHex(h.Finish());
}

// Value ranges, checked during the hash pass. OK, or InvalidArgument naming
// the first bad element.
absl::Status CheckF16Finite(const uint16_t* v, uint64_t n, std::string_view name);
absl::Status CheckF32Finite(const float* v, uint64_t n, std::string_view name);
absl::Status CheckFrequencies(const float* v, uint64_t n, std::string_view name);

// Identity of a file's current contents, as far as the file system tells:
// a rewrite in place changes mtime (and maybe size), a replacement the inode.
struct FileStamp {
  std::string abs_path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  bool operator==(const FileStamp& o) const {
    return abs_path == o.abs_path && size == o.size && mtime_ns == o.mtime_ns && inode == o.inode;
  }
};
absl::StatusOr<FileStamp> StampOf(int fd, const std::string& path);

// The cache of verified sidecars: `sidecar-verified.txt` beside the sha256
// cache (Sha256CachePath()), one line per file: meta digest, size, mtime,
// inode, absolute path. A file modified within the last 2 s is not stored
// (a same-size rewrite in the same mtime tick would go unnoticed). Any
// failure to read or write it only means hashing again.
bool VerifiedCacheContains(const FileStamp& stamp, std::string_view meta_hex);
void VerifiedCacheAdd(const FileStamp& stamp, std::string_view meta_hex);
std::string VerifiedCachePath();

// How many times a sidecar's layers were hashed in this process (tests:
// the second open of an unchanged file must not add one).
uint64_t SidecarHashPasses();
void CountSidecarHashPass();

}  // namespace kx::sparse
