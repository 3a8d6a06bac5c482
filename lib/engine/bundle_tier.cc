#include "engine/bundle_tier.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/log.h"
#include "base/size_parse.h"
#include "base/timer.h"

namespace kx {
namespace {

constexpr uint64_t kPage = kDirectIoAlign;
constexpr char kSlotsName[] = "resident bundles";
constexpr char kStagingName[] = "bundle staging";
constexpr int kDebugReadDelayUs = 2000;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// An experiment knob from the environment (docs/tiers.md), or null when unset or empty.
const char* Knob(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// One layer's bundles in whole pages: where they start inside their first
// page (the same for every layer, checked in Create; 0 for kairox's
// page-aligned sidecars) and the pages they cover.
struct LayerSpan {
  uint64_t lead = 0;
  uint64_t bytes = 0;
};

LayerSpan SpanOf(const sparse::Sidecar& s) {
  const auto& L = s.layer(0);
  LayerSpan span;
  span.lead = L.bundles_file_offset % kPage;
  span.bytes = RoundUp(span.lead + L.layout.bundle_stride * L.layout.n_groups, kPage);
  return span;
}

}  // namespace

uint64_t BundleTier::SlotBytes(const sparse::Sidecar& s) {
  return s.n_layer() > 0 ? s.layer(0).layout.bundle_stride : 0;
}

int BundleTier::SlotsPerLayer(const sparse::Sidecar& s, uint64_t resident_bytes) {
  if (s.n_layer() == 0) return 0;
  const uint64_t per_layer = resident_bytes / static_cast<uint64_t>(s.n_layer());
  const uint64_t k = per_layer / SlotBytes(s);
  return static_cast<int>(std::min<uint64_t>(k, s.layer(0).layout.n_groups));
}

uint64_t BundleTier::FixedBytes(const sparse::Sidecar& s) {
  const uint64_t n_groups = s.n_layer() > 0 ? s.layer(0).layout.n_groups : 0;
  const uint64_t tables = static_cast<uint64_t>(s.n_layer()) * n_groups * sizeof(void*);
  return 2 * SpanOf(s).bytes + tables;
}

absl::StatusOr<std::unique_ptr<BundleTier>> BundleTier::Create(const sparse::Sidecar& sidecar,
                                                               const TierOptions& options,
                                                               MemoryBudget* budget) {
  if (budget == nullptr) return absl::InvalidArgumentError("BundleTier: no memory budget");
  if (sidecar.n_layer() == 0) return absl::InvalidArgumentError("BundleTier: empty sidecar");
  std::unique_ptr<BundleTier> t(new BundleTier());
  t->sidecar_ = &sidecar;
  t->options_ = options;
  if (const char* e = Knob("KAIROX_TIER_SPECULATE"); e != nullptr && std::string(e) == "0") {
    t->options_.speculate_layer0 = false;
  }
  t->n_layer_ = sidecar.n_layer();
  t->n_groups_ = sidecar.layer(0).layout.n_groups;
  t->gs_ = sidecar.group_size();
  t->stride_ = SlotBytes(sidecar);
  int gap = options.max_gap_pages;
  if (const char* e = Knob("KAIROX_TIER_GAP")) gap = std::atoi(e);
  t->max_gap_pages_ = static_cast<uint64_t>(std::max(0, gap));
  for (int l = 0; l < t->n_layer_; ++l) {
    const auto& L = sidecar.layer(l).layout;
    if (L.n_groups != t->n_groups_ || L.bundle_stride != t->stride_ ||
        sidecar.layer(l).bundles_file_offset % kPage !=
            sidecar.layer(0).bundles_file_offset % kPage) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BundleTier: layer ", l, "'s bundles differ in shape or page alignment from layer 0's"));
    }
  }
  t->slots_per_layer_ = SlotsPerLayer(sidecar, options.resident_bytes);
  t->slot_bytes_total_ = static_cast<uint64_t>(t->slots_per_layer_) * t->n_layer_ * t->stride_;
  const LayerSpan span = SpanOf(sidecar);
  t->mirror_bytes_ = span.bytes;
  t->mirror_lead_ = span.lead;

  // Memory first: the budget refuses before anything is allocated.
  KX_RETURN_IF_ERROR(budget->Reserve(kStagingName, FixedBytes(sidecar)));
  if (absl::Status st = budget->Reserve(kSlotsName, t->slot_bytes_total_); !st.ok()) {
    budget->Release(kStagingName, FixedBytes(sidecar));
    return st;
  }
  t->budget_ = budget;  // from here on the destructor gives both back
  t->mirrors_ = static_cast<uint8_t*>(std::aligned_alloc(kPage, 2 * t->mirror_bytes_));
  if (t->slot_bytes_total_ > 0) {
    t->slots_ =
        static_cast<uint8_t*>(std::aligned_alloc(kPage, RoundUp(t->slot_bytes_total_, kPage)));
  }
  if (t->mirrors_ == nullptr || (t->slot_bytes_total_ > 0 && t->slots_ == nullptr)) {
    return absl::ResourceExhaustedError("BundleTier: out of memory for bundle slots");
  }
  // Poison: a slot or mirror byte read before a read landed shows up in logits.
  std::memset(t->mirrors_, 0xA5, 2 * t->mirror_bytes_);
  if (t->slots_ != nullptr) std::memset(t->slots_, 0xA5, t->slot_bytes_total_);

  IoOptions io;
  io.backend = options.io_backend;
  if (options.debug_skip_wait) {
    // The negative control: reads that land late, so compute that does not
    // wait for them sees the mirror's stale bytes on any machine.
    io.backend = IoBackend::kPread;
    io.debug_delay_us = kDebugReadDelayUs;
  } else if (options.debug_read_delay_us > 0) {
    io.backend = IoBackend::kPread;
    io.debug_delay_us = options.debug_read_delay_us;
  }
  KX_ASSIGN_OR_RETURN(t->io_, IoExecutor::Create(io));
  KX_RETURN_IF_ERROR(t->io_->RegisterBuffer(t->mirrors_, 2 * t->mirror_bytes_));
  KX_ASSIGN_OR_RETURN(t->fd_, OpenForDirectRead(sidecar.path(), &t->direct_));

  policy::PolicyOptions po;
  // From storage a miss costs a whole bundle read whatever its intensity,
  // and a needed group is read anyway: caching it costs only a copy.
  po.activity = policy::ActivityInput::kBinary;
  po.admit_needed = options.admit_needed;
  po.swap_margin = options.swap_margin;
  if (const char* e = Knob("KAIROX_TIER_SWAP_MARGIN")) po.swap_margin = std::atof(e);
  KX_ASSIGN_OR_RETURN(t->policy_, policy::MakePolicy(options.policy, po));
  t->residency_ =
      std::make_unique<policy::Residency>(t->n_layer_, t->n_groups_, t->slots_per_layer_);
  t->layers_.resize(t->n_layer_);
  t->landing_ = std::make_unique<Landing[]>(t->n_layer_);
  for (int l = 0; l < t->n_layer_; ++l) {
    LayerState& L = t->layers_[l];
    Landing& s = t->landing_[l];
    s.tier = t.get();
    s.layer = l;
    // Set before any read is submitted (IoEvent::SetCallback must not race a completion).
    L.event = std::make_unique<IoEvent>();
    L.event->SetCallback(&OnEventDone, &s);
    L.top_up_event = std::make_unique<IoEvent>();
    L.top_up_event->SetCallback(&OnEventDone, &s);
    L.spec_read.assign(t->n_groups_, 0);
    L.ptrs.assign(t->n_groups_, nullptr);
    L.pending_loads.reserve(t->n_groups_);
    L.pinned.reserve(t->n_groups_);
  }
  t->intensity_.resize(t->n_groups_);
  t->page_marks_.resize(t->mirror_bytes_ / kPage);
  t->needed_.reserve(t->n_groups_);
  t->plan_.load.reserve(t->n_groups_);
  t->plan_.evict.reserve(t->n_groups_);
  t->reads_.reserve(t->page_marks_.size());
  KX_RETURN_IF_ERROR(t->InitialPlacement());
  if (!options.log_path.empty()) {
    t->log_ = std::fopen(options.log_path.c_str(), "w");
    if (t->log_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write the tier log '", options.log_path, "'"));
    }
    std::fprintf(t->log_,
                 "token,layer,lambda,resident,groups_needed,hits,loads,evictions,read_ops,"
                 "bytes_read,io_wait_ns,compute_ns,graph_cpu_ns,graph_gpu_ns,"
                 "graph_h2d_critical_ns,graph_h2d_background_ns,graph_disk_ns\n");
  }
  Log().info(
      "bundle tier: {} of {} groups per layer resident ({}), policy {}, {} reads{}, "
      "prefetch {}",
      t->slots_per_layer_, t->n_groups_, FormatBytes(t->slot_bytes_total_), t->policy_->name(),
      t->io_->backend_name(), t->direct_ ? " (O_DIRECT)" : "", options.prefetch ? "on" : "off");
  return t;
}

void BundleTier::LogStep(int layer) {
  if (log_line_waiting_) {  // the decode graph did not end the last token (the pool path ran)
    log_line_waiting_ = false;
    WriteLogLine(n_layer_ - 1, nullptr);
  }
  if (layer == n_layer_ - 1 && log_token_stalls_) {
    log_line_waiting_ = true;  // LogTokenStalls writes it
    return;
  }
  WriteLogLine(layer, nullptr);
}

void BundleTier::LogTokenStalls(const int64_t (&stalls)[kTokenStallColumns]) {
  if (log_ == nullptr || !log_line_waiting_) return;
  log_line_waiting_ = false;
  WriteLogLine(n_layer_ - 1, stalls);
}

void BundleTier::WriteLogLine(int layer, const int64_t* stalls) {
  const LayerStep& t = layers_[layer].step;
  std::fprintf(log_, "%lld,%d,%.5f,%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld",
               static_cast<long long>(log_tokens_), layer, t.lambda, t.resident_groups,
               static_cast<long long>(t.groups_needed), static_cast<long long>(t.hits),
               static_cast<long long>(t.loads), static_cast<long long>(t.evictions),
               static_cast<long long>(t.read_ops), static_cast<long long>(t.bytes_read),
               static_cast<long long>(t.io_wait_ns), static_cast<long long>(t.compute_ns));
  // The graph's per-token stalls, on the token's last line only (so a column sums to the
  // run's total); empty on the other lines and on the pool path.
  for (int i = 0; i < kTokenStallColumns; ++i) {
    if (stalls != nullptr) {
      std::fprintf(log_, ",%lld", static_cast<long long>(stalls[i]));
    } else {
      std::fputc(',', log_);
    }
  }
  std::fputc('\n', log_);
  if (layer == n_layer_ - 1) ++log_tokens_;
}

BundleTier::~BundleTier() {
  if (log_ != nullptr) {
    if (log_line_waiting_) WriteLogLine(n_layer_ - 1, nullptr);
    std::fclose(log_);
  }
  // Drain in-flight reads before their buffers go.
  for (LayerState& L : layers_) {
    if (L.event != nullptr) L.event->Wait();
    if (L.top_up_event != nullptr) L.top_up_event->Wait();
  }
  io_.reset();
  if (fd_ >= 0) ::close(fd_);
  std::free(slots_);
  std::free(mirrors_);
  if (budget_ != nullptr) {
    budget_->Release(kSlotsName, slot_bytes_total_);
    budget_->Release(kStagingName, FixedBytes(*sidecar_));
  }
}

absl::Status BundleTier::InitialPlacement() {
  policy::PlacementStats ps;
  ps.n_layer = n_layer_;
  ps.n_groups = n_groups_;
  ps.bundle_bytes = stride_;
  ps.frequency = sidecar_->GroupFrequency();
  std::vector<std::pair<int, int>> loads;
  policy_->Place(ps, *residency_, &loads);
  std::vector<std::vector<int32_t>> per_layer(n_layer_);
  for (const auto& [l, g] : loads) per_layer[l].push_back(g);
  for (int l = 0; l < n_layer_; ++l) {
    if (per_layer[l].empty()) continue;
    IoEvent* ev = layers_[l].event.get();
    ReadGroups(l, per_layer[l], 0, ev);
    ev->Wait();
    KX_RETURN_IF_ERROR(ev->status());
    for (int32_t g : per_layer[l]) {
      int slot = residency_->free_slot(l);
      KX_CHECK_MSG(slot >= 0, "initial placement exceeds the slots");
      residency_->BeginLoad(l, g, slot);
      std::memcpy(SlotPtr(l, slot), MirrorGroup(0, g), stride_);
      residency_->CompleteLoad(l, g);
    }
  }
  stats_ = TierStats{};
  return absl::OkStatus();
}

void BundleTier::ReadGroups(int layer, const std::vector<int32_t>& groups, int m, IoEvent* event) {
  std::fill(page_marks_.begin(), page_marks_.end(), 0);
  for (int32_t g : groups) {
    const uint64_t begin = mirror_lead_ + static_cast<uint64_t>(g) * stride_;
    const uint64_t end = begin + stride_;
    for (uint64_t p = begin / kPage; p < RoundUp(end, kPage) / kPage; ++p) page_marks_[p] = 1;
  }
  // The mirror's page p holds the file page at file_first + p pages.
  const uint64_t file_first = sidecar_->layer(layer).bundles_file_offset - mirror_lead_;
  reads_.clear();
  const uint64_t n_pages = page_marks_.size();
  for (uint64_t p = 0; p < n_pages;) {
    if (!page_marks_[p]) {
      ++p;
      continue;
    }
    // The run, extended through gaps of at most max_gap_pages unneeded pages:
    // one larger read costs less than two operations (the gap lands in the
    // mirror, which nothing reads there).
    uint64_t q = p;
    for (;;) {
      while (q < n_pages && page_marks_[q]) ++q;
      uint64_t next = q;
      while (next < n_pages && !page_marks_[next] && next - q < max_gap_pages_) ++next;
      if (next < n_pages && page_marks_[next] && next > q) {
        q = next;
        continue;
      }
      break;
    }
    IoRead r;
    r.fd = fd_;
    r.offset = file_first + p * kPage;
    r.length = (q - p) * kPage;
    r.dst = mirrors_ + static_cast<uint64_t>(m) * mirror_bytes_ + p * kPage;
    r.event = event;
    reads_.push_back(r);
    stats_.bytes_read += static_cast<int64_t>(r.length);
    p = q;
  }
  event->Reset();
  if (reads_.empty()) return;
  event->Add(static_cast<int>(reads_.size()));
  // One more event in flight for NotifyWhenRead (its callback counts it down).
  landing_[layer].count.fetch_add(1, std::memory_order_acq_rel);
  stats_.read_ops += static_cast<int64_t>(reads_.size());
  io_->Submit(IoPriority::kCritical, reads_.data(), static_cast<int>(reads_.size()));
}

int BundleTier::ClaimMirror(int layer) {
  const int m = next_mirror_;
  KX_CHECK_MSG(mirror_owner_[m] < 0, "bundle tier: both staging mirrors are in use");
  next_mirror_ ^= 1;
  mirror_owner_[m] = layer;
  layers_[layer].mirror = m;
  return m;
}

void BundleTier::Speculate(int layer, const uint32_t* masks) {
  LayerState& L = layers_[layer];
  // Skipping misses reads only admitted groups, which only a plan decides.
  if (L.mirror >= 0 || options_.miss == TierMiss::kSkip) return;
  const int m = ClaimMirror(layer);
  L.speculative = true;
  needed_.clear();
  for (int g = 0; g < n_groups_; ++g) {
    L.spec_read[g] =
        masks[g] != 0 && residency_->slot_of(layer, g) < 0 && !residency_->loading(layer, g);
    if (L.spec_read[g]) needed_.push_back(g);
  }
  const int64_t ops_before = stats_.read_ops, bytes_before = stats_.bytes_read;
  ReadGroups(layer, needed_, m, L.event.get());
  L.spec_ops = stats_.read_ops - ops_before;
  L.spec_bytes = stats_.bytes_read - bytes_before;
}

void BundleTier::Prepare(int layer, const uint32_t* masks) {
  LayerState& L = layers_[layer];
  if (L.mirror >= 0 && !L.speculative) return;  // already prepared for this step
  // After Speculate, the mirror already holds (or is receiving) the guessed
  // groups: plan with the real masks and read only what the guess missed.
  const bool top_up = L.mirror >= 0;
  const int m = top_up ? L.mirror : ClaimMirror(layer);
  L.speculative = false;
  if (!top_up) std::fill(L.spec_read.begin(), L.spec_read.end(), 0);

  for (int g = 0; g < n_groups_; ++g) {
    intensity_[g] = static_cast<float>(__builtin_popcount(masks[g])) / static_cast<float>(gs_);
  }
  policy::Window window;
  policy_->PlanLayer(layer, intensity_.data(), L.feedback, window, *residency_, &plan_);
  for (int32_t g : plan_.evict) {
    residency_->Evict(layer, g);
    ++stats_.evictions;
  }
  L.pending_loads.clear();
  for (int32_t g : plan_.load) {
    const int slot = residency_->free_slot(layer);
    KX_CHECK_MSG(slot >= 0, "bundle tier: the policy's plan exceeds the slots");
    residency_->BeginLoad(layer, g, slot);
    L.pending_loads.push_back({g, slot});
  }
  stats_.loads += static_cast<int64_t>(plan_.load.size());

  // Needed groups: resident ones are read in place, the rest come through the mirror.
  const int64_t needed_before = stats_.groups_needed, hits_before = stats_.hits;
  needed_.clear();
  for (int g = 0; g < n_groups_; ++g) {
    if (masks[g] == 0) {
      L.ptrs[g] = nullptr;
      continue;
    }
    ++stats_.groups_needed;
    const int slot = residency_->slot_of(layer, g);
    if (slot >= 0) {
      ++stats_.hits;
      L.ptrs[g] = SlotPtr(layer, slot);
    } else if (options_.miss == TierMiss::kSkip && !residency_->loading(layer, g)) {
      L.ptrs[g] = nullptr;  // computed without it
      ++stats_.skipped;
    } else {
      L.ptrs[g] = MirrorGroup(m, g);
      if (!L.spec_read[g]) needed_.push_back(g);
    }
  }
  for (const auto& [g, slot] : L.pending_loads) {
    // Admitted but not needed now: read it too.
    if (masks[g] == 0 && !L.spec_read[g]) needed_.push_back(g);
  }
  const int64_t ops_before = stats_.read_ops, bytes_before = stats_.bytes_read;
  L.step.groups_needed = stats_.groups_needed - needed_before;
  L.step.hits = stats_.hits - hits_before;
  L.step.loads = static_cast<int64_t>(plan_.load.size());
  L.step.evictions = static_cast<int64_t>(plan_.evict.size());
  ReadGroups(layer, needed_, m, top_up ? L.top_up_event.get() : L.event.get());
  L.step.read_ops = stats_.read_ops - ops_before + (top_up ? L.spec_ops : 0);
  L.step.bytes_read = stats_.bytes_read - bytes_before + (top_up ? L.spec_bytes : 0);
  L.step.resident_groups = residency_->resident_count(layer) + residency_->loading_count(layer);
}

const uint8_t* const* BundleTier::Acquire(int layer, const uint32_t* masks) {
  LayerState& L = layers_[layer];
  if (L.mirror < 0) Prepare(layer, masks);
  const int64_t t0 = NowNs();
  if (!options_.debug_skip_wait) {
    L.event->Wait();
    L.top_up_event->Wait();
  }
  const int64_t t1 = NowNs();
  L.wait_ns = t1 - t0;
  if (L.notify_ns != 0) {
    // On the graph the wait happened before this node ran: from NotifyWhenRead (where the
    // pool path would have called Acquire) to the landing.
    L.wait_ns += std::max<int64_t>(
        0, landing_[layer].landed_ns.load(std::memory_order_acquire) - L.notify_ns);
    L.notify_ns = 0;
  }
  stats_.io_wait_ns += L.wait_ns;
  absl::Status read_status = L.event->status();
  if (read_status.ok()) read_status = L.top_up_event->status();
  if (!read_status.ok() && status_.ok()) status_ = read_status;
  for (const auto& [g, slot] : L.pending_loads) {
    if (!read_status.ok()) {  // never cache bytes that did not arrive
      residency_->CancelLoad(layer, g);
      continue;
    }
    std::memcpy(SlotPtr(layer, slot), MirrorGroup(L.mirror, g), stride_);
    residency_->CompleteLoad(layer, g);
  }
  L.pending_loads.clear();
  const int64_t t2 = NowNs();
  stats_.copy_ns += t2 - t1;
  // Pin the slots compute reads, so no plan can evict them mid-layer.
  L.pinned.clear();
  for (int g = 0; g < n_groups_; ++g) {
    if (masks[g] == 0) continue;
    const int slot = residency_->slot_of(layer, g);
    if (slot >= 0 && L.ptrs[g] == SlotPtr(layer, slot)) {
      residency_->Pin(layer, slot);
      L.pinned.push_back(slot);
    }
  }
  L.acquired = true;
  L.acquire_ns = t2;
  return L.ptrs.data();
}

void BundleTier::SetReadNotify(ReadNotify fn, void* ctx) {
  notify_ = fn;
  notify_ctx_ = ctx;
}

void BundleTier::NotifyWhenRead(int layer, const uint32_t* masks) {
  LayerState& L = layers_[layer];
  if (L.mirror < 0) Prepare(layer, masks);
  KX_CHECK_MSG(notify_ != nullptr, "bundle tier: NotifyWhenRead without a read notify");
  L.notify_ns = NowNs();
  Landing& s = landing_[layer];
  if (options_.debug_skip_wait) {  // the negative control must not wait here either
    s.landed_ns.store(L.notify_ns, std::memory_order_release);
    notify_(notify_ctx_, layer);
    return;
  }
  // Nothing in flight (count 0): this call reaches kArmed and notifies; otherwise the last
  // event's callback will.
  if (s.count.fetch_add(kArmed, std::memory_order_acq_rel) == 0) Land(s);
}

void BundleTier::OnEventDone(void* ctx) {
  Landing& s = *static_cast<Landing*>(ctx);
  if (s.count.fetch_sub(1, std::memory_order_acq_rel) - 1 == kArmed) s.tier->Land(s);
}

void BundleTier::Land(Landing& s) {
  // Only the party that reached kArmed gets here, and nothing else changes the count until
  // the layer's next reads, which come after its Acquire (after this notify).
  s.count.store(0, std::memory_order_relaxed);
  s.landed_ns.store(NowNs(), std::memory_order_release);
  notify_(notify_ctx_, s.layer);
}

void BundleTier::Release(int layer) {
  LayerState& L = layers_[layer];
  KX_CHECK_MSG(L.acquired, "bundle tier: Release without Acquire");
  const int64_t compute = NowNs() - L.acquire_ns;
  stats_.compute_ns += compute;
  ++stats_.layer_steps;
  for (int slot : L.pinned) residency_->Unpin(layer, slot);
  L.pinned.clear();
  L.step.io_wait_ns = L.wait_ns;
  L.step.compute_ns = compute;
  L.step.lambda = policy_->lambda(layer);
  L.feedback.io_wait_s = static_cast<double>(L.wait_ns) * 1e-9;
  L.feedback.cpu_s = static_cast<double>(compute) * 1e-9;
  mirror_owner_[L.mirror] = -1;
  L.mirror = -1;
  L.acquired = false;
  if (log_ != nullptr) LogStep(layer);
}

}  // namespace kx
