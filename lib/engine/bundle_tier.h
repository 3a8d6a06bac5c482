// FFN bundles under a RAM budget: the fast tier (resident slots in RAM) and
// the slow one (the sidecar file on disk), with groups moved between them
// online by a placement policy (policy/policy.h) — ActiveFlow's boundary,
// run by the machinery the GPU tier will use.
//
// Per layer there are K slots (K = the resident budget ÷ (layers × bundle
// bytes)); Residency (policy/residency.h) says which group sits in which.
// One decode step of layer l:
//   Prepare(l, masks)  — as soon as l's predicted-active groups are known
//                        (one layer ahead: adjacent prediction): the policy
//                        plans loads/evictions from the groups' intensities,
//                        and every needed group that is not resident — and
//                        every group the plan loads — is read with O_DIRECT,
//                        as page runs, into a staging mirror of the layer's
//                        bundles on the I/O executor's critical queue;
//   Acquire(l)         — waits for those reads (the stall is measured),
//                        copies admitted groups from the mirror into their
//                        slots, and returns the bundle pointer of each needed
//                        group (its slot, or the mirror for a one-shot read);
//   Release(l)         — the layer's compute is done: slots may be reused,
//                        and the I/O wait vs compute time of this step is
//                        the feedback the adaptive policy moves λ with.
// Two mirrors alternate, so layer l+1's reads land while layer l computes.
// What is computed never depends on where a bundle came from: the tests
// compare logits with the all-in-RAM path bit for bit.
//
//   KX_ASSIGN_OR_RETURN(auto tier, BundleTier::Create(sidecar, opts, &ram_budget));
//   tier->Prepare(l, masks);                   // masks[g]: bits of predicted neurons
//   const uint8_t* const* b = tier->Acquire(l, masks);
//   ... SparseFfn over b ...
//   tier->Release(l);
//
// On the decode graph (engine/decode_graph.h) the wait is not inside Acquire: the graph
// calls NotifyWhenRead(l) once layer l's reads were started, and the read notify it set
// signals the layer's `disk` external when they land, on the I/O completion thread; the
// FFN's first node depends on that external, so Acquire finds the bytes there and the
// executor charges the wait to the disk tag. The tier still measures the same wait (from
// NotifyWhenRead to the landing), so its statistics and the adaptive policy's feedback do
// not depend on the executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/memory_budget.h"
#include "base/status.h"
#include "exec/io_executor.h"
#include "policy/policy.h"
#include "policy/residency.h"
#include "sparse/sidecar.h"

namespace kx {

// A predicted-active group that is not resident: read it (on the critical
// queue; the output equals the all-in-RAM path's) or compute the layer
// without it (only groups the policy admits are read; fewer bytes, a
// different output — the ablation).
enum class TierMiss { kRead, kSkip };

struct TierOptions {
  uint64_t resident_bytes = 0;          // bytes of resident bundle slots, all layers together
  std::string policy = "tam-adaptive";  // policy::MakePolicy name
  bool prefetch = true;                 // false: a layer's reads start only when it runs
  TierMiss miss = TierMiss::kRead;
  // With prefetch: start layer 0's reads of the next token during the last
  // layer, guessed from this token's layer-0 groups (Speculate).
  // KAIROX_TIER_SPECULATE=0 turns it off (the ablation).
  bool speculate_layer0 = true;
  // TAM/LFU: a needed group may take a slot without passing τ (it is read
  // anyway); policy::PolicyOptions::admit_needed.
  bool admit_needed = true;
  // TAM: how much a candidate's score must beat a resident's to take its
  // slot (policy::PolicyOptions::swap_margin; KAIROX_TIER_SWAP_MARGIN overrides).
  double swap_margin = 0.1;
  // Negative control for the tests: Acquire does not wait for the reads, so
  // compute may see stale bytes. Never set outside a test.
  bool debug_skip_wait = false;
  // Tests: every read starts this many microseconds late (the pread backend), so that the
  // tier really waits on any machine. 0 in every real configuration.
  int debug_read_delay_us = 0;
  IoBackend io_backend = IoBackend::kAuto;
  // Page runs closer than this many unneeded pages are read as one (KAIROX_TIER_GAP overrides).
  int max_gap_pages = 2;
  // CSV, one line per layer step (docs/tiers.md): token, layer, λ, resident
  // groups, needed, hits, loads, evictions, reads, bytes, I/O stall and FFN
  // compute ns — the input of the tier's plots (benchmarks/tier/) and, with
  // the activity trace, of the simulator later. "": none.
  std::string log_path;
};

// Counters since the last ResetStats.
struct TierStats {
  int64_t layer_steps = 0;
  int64_t groups_needed = 0;  // predicted-active groups
  int64_t hits = 0;           // of those, resident when the layer was prepared
  int64_t read_ops = 0;       // I/O operations (page runs)
  int64_t bytes_read = 0;
  int64_t loads = 0;    // groups admitted into slots
  int64_t skipped = 0;  // needed groups computed without (TierMiss::kSkip)
  int64_t evictions = 0;
  int64_t io_wait_ns = 0;  // compute waited for reads (the I/O stall)
  int64_t compute_ns = 0;  // Acquire → Release: the layers' FFN compute
  int64_t copy_ns = 0;     // mirror → slot copies of admitted groups
};

class BundleTier {
 public:
  // One layer's last completed step (traces).
  struct LayerStep {
    int resident_groups = 0;  // after the step's plan (resident + loading)
    int64_t groups_needed = 0, hits = 0, loads = 0, evictions = 0;
    int64_t read_ops = 0;
    int64_t bytes_read = 0;
    int64_t io_wait_ns = 0;
    int64_t compute_ns = 0;
    double lambda = 0.0;  // the policy's λ for the layer (0: not TAM)
  };
  // Sizes and reserves its memory from `budget` (slots as "resident bundles",
  // mirrors as "bundle staging"), opens the sidecar for O_DIRECT reads and
  // reads the policy's initial placement. `sidecar` must outlive the tier.
  static absl::StatusOr<std::unique_ptr<BundleTier>> Create(const sparse::Sidecar& sidecar,
                                                            const TierOptions& options,
                                                            MemoryBudget* budget);
  ~BundleTier();

  // Bytes the tier needs besides its slots (two staging mirrors, tables).
  static uint64_t FixedBytes(const sparse::Sidecar& sidecar);
  // Bytes of one slot (one bundle) and slots per layer for `resident_bytes`.
  static uint64_t SlotBytes(const sparse::Sidecar& sidecar);
  static int SlotsPerLayer(const sparse::Sidecar& sidecar, uint64_t resident_bytes);

  void Prepare(int layer, const uint32_t* masks);
  // Starts reads for `layer` on a guess (layer 0 of the next token, from the
  // last token's layer-0 groups, during the last layer): the non-resident
  // guessed groups are read now; Prepare with the real masks then plans and
  // reads only what the guess missed.
  void Speculate(int layer, const uint32_t* masks);
  // Prepares first when the layer was not (layer 0, or prefetch off). The
  // bundle of each needed group (null for a group skipped by TierMiss::kSkip).
  const uint8_t* const* Acquire(int layer, const uint32_t* masks);
  void Release(int layer);

  // ---- The decode graph's disk externals (see the file comment).
  // fn(ctx, layer) is called once per NotifyWhenRead(layer), when that layer's reads of
  // the step have landed: on the calling thread when they already have, else on the I/O
  // executor's completion thread (it must not block). Set before the first NotifyWhenRead,
  // and not while one is pending; null clears it.
  using ReadNotify = void (*)(void* ctx, int layer);
  void SetReadNotify(ReadNotify fn, void* ctx);
  const void* read_notify_ctx() const { return notify_ctx_; }
  // Prepares `layer` as Acquire would if it was not, then arranges the read notify. At most
  // once per step of the layer, before its Acquire. With debug_skip_wait it notifies at once.
  // `masks` are read only when the layer was not prepared (may be null otherwise).
  void NotifyWhenRead(int layer, const uint32_t* masks);
  bool prepared(int layer) const { return layers_[layer].mirror >= 0; }
  // The deferred --tier-log line (see SetLogTokenStalls) of the token that just ended, with
  // the decode graph's per-token stalls (ns): cpu, then waits for gpu, h2d critical, h2d
  // background, disk.
  static constexpr int kTokenStallColumns = 5;
  void LogTokenStalls(const int64_t (&stalls)[kTokenStallColumns]);
  // The decode graph writes the token's stalls: the last layer's log line then waits for
  // LogTokenStalls (a line still waiting when the next step logs is written without them).
  void SetLogTokenStalls(bool on) { log_token_stalls_ = on; }

  bool prefetch() const { return options_.prefetch; }
  bool speculate_layer0() const { return options_.prefetch && options_.speculate_layer0; }
  int slots_per_layer() const { return slots_per_layer_; }
  const char* io_backend() const { return io_->backend_name(); }
  bool direct_io() const { return direct_; }
  const policy::Policy& policy() const { return *policy_; }
  const policy::Residency& residency() const { return *residency_; }
  const TierStats& stats() const { return stats_; }
  const LayerStep& last_step(int layer) const { return layers_[layer].step; }
  // The wait for reads of `layer`'s latest Acquire (its step's io_wait_ns, known before
  // Release): the split FFN's disk tag under three tiers.
  int64_t acquire_wait_ns(int layer) const { return layers_[layer].wait_ns; }
  void ResetStats() { stats_ = TierStats{}; }
  // The first read error (sticky; decode results after it are not valid).
  const absl::Status& status() const { return status_; }

 private:
  struct LayerState {
    int mirror = -1;  // staging mirror holding this step's reads; -1: not prepared
    bool acquired = false;
    std::unique_ptr<IoEvent> event;
    std::unique_ptr<IoEvent> top_up_event;  // reads Prepare adds after Speculate
    bool speculative = false;               // prepared by Speculate, not yet by Prepare
    std::vector<uint8_t> spec_read;         // per group: read by Speculate this step
    int64_t spec_ops = 0, spec_bytes = 0;
    std::vector<std::pair<int32_t, int>> pending_loads;  // (group, slot) admitted this step
    std::vector<int32_t> pinned;                         // slots pinned while the layer computes
    std::vector<const uint8_t*> ptrs;                    // per group: where compute reads it
    policy::Feedback feedback;                           // of the last completed step
    int64_t wait_ns = 0;
    int64_t acquire_ns = 0;
    int64_t notify_ns = 0;  // NotifyWhenRead's time this step (0: not armed)
    LayerStep step;         // filled by Prepare, Acquire and Release
  };
  // Reads of one layer in flight, for NotifyWhenRead: `count` is the events with reads not
  // yet landed, plus kArmed while a notify is pending; the party that brings it to exactly
  // kArmed (NotifyWhenRead, or the last event's completion callback) notifies. One cache
  // line per layer: the completion thread writes it while graph threads run.
  struct alignas(64) Landing {
    BundleTier* tier = nullptr;
    int layer = 0;
    std::atomic<int32_t> count{0};
    std::atomic<int64_t> landed_ns{0};  // when the notify fired
  };
  static constexpr int32_t kArmed = 1 << 24;
  static void OnEventDone(void* ctx);  // an IoEvent callback; ctx is a Landing
  void Land(Landing& s);

  BundleTier() = default;
  int ClaimMirror(int layer);
  absl::Status InitialPlacement();
  // Reads the pages covering `groups` of `layer` into mirror m (critical queue).
  void ReadGroups(int layer, const std::vector<int32_t>& groups, int m, IoEvent* event);
  uint8_t* SlotPtr(int layer, int slot) const {
    return slots_ + (static_cast<uint64_t>(layer) * slots_per_layer_ + slot) * stride_;
  }
  const uint8_t* MirrorGroup(int m, int group) const {
    return mirrors_ + static_cast<uint64_t>(m) * mirror_bytes_ + mirror_lead_ +
           static_cast<uint64_t>(group) * stride_;
  }

  const sparse::Sidecar* sidecar_ = nullptr;
  TierOptions options_;
  MemoryBudget* budget_ = nullptr;
  std::unique_ptr<IoExecutor> io_;
  int fd_ = -1;
  bool direct_ = false;
  std::unique_ptr<policy::Policy> policy_;
  std::unique_ptr<policy::Residency> residency_;
  int n_layer_ = 0, n_groups_ = 0, gs_ = 0, slots_per_layer_ = 0;
  uint64_t stride_ = 0;
  uint64_t max_gap_pages_ = 0;
  // Slots: n_layer × K bundles; mirrors: two copies of a layer's page-aligned span.
  uint8_t* slots_ = nullptr;
  uint64_t slot_bytes_total_ = 0;
  uint8_t* mirrors_ = nullptr;
  uint64_t mirror_bytes_ = 0;  // one mirror, whole pages
  uint64_t mirror_lead_ = 0;   // bundles' offset inside their first page (0 for kairox sidecars)
  int mirror_owner_[2] = {-1, -1};
  int next_mirror_ = 0;
  std::vector<LayerState> layers_;
  std::vector<float> intensity_;
  std::vector<uint8_t> page_marks_;
  std::vector<int32_t> needed_;
  policy::Plan plan_;
  std::vector<IoRead> reads_;
  TierStats stats_;
  absl::Status status_;
  std::unique_ptr<Landing[]> landing_;
  ReadNotify notify_ = nullptr;
  void* notify_ctx_ = nullptr;
  std::FILE* log_ = nullptr;
  int64_t log_tokens_ = 0;
  bool log_token_stalls_ = false;
  bool log_line_waiting_ = false;  // the last layer's line, waiting for LogTokenStalls
  void LogStep(int layer);
  void WriteLogLine(int layer, const int64_t* stalls);
};

}  // namespace kx
