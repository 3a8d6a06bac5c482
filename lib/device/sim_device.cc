#include "device/sim_device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "base/size_parse.h"
#include "device/sim_arena.h"
#include "device/sim_ops.h"

namespace kx {
namespace {

using Clock = std::chrono::steady_clock;

// Largest op argument struct a queue entry holds inline (no allocation per launch).
constexpr size_t kMaxOpArgsBytes = 256;
constexpr size_t kLandingLogCapacity = 4096;
constexpr uint64_t kPinnedAlignment = 4096;
// Address space beyond the budget, so alignment and fragmentation do not refuse what the
// budget allows: the budget is what says no.
constexpr uint64_t kArenaSlackDivisor = 16;
constexpr uint64_t kArenaSlackMin = uint64_t{1} << 20;

// Events: `recorded` is the generation of the latest RecordEvent (set on the calling
// thread), `completed` the highest generation a worker has reached. `pending` counts queued
// records and waits that point at the event, so destroying it waits for them.
struct SimEvent {
  uint64_t recorded = 0;
  uint64_t completed = 0;
  uint64_t pending = 0;
  bool timing = false;
  Clock::time_point completed_at;  // when the latest completed record ran (timing events)
};

enum class CommandType : uint8_t { kCopy, kMemset, kOp, kRecord, kWait };

struct Command {
  CommandType type = CommandType::kCopy;
  CopyDirection direction = CopyDirection::kHostToDevice;
  uint8_t value = 0;
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
  const SimOp* op = nullptr;
  SimEvent* event = nullptr;
  uint64_t generation = 0;
  uint64_t index = 0;
  alignas(std::max_align_t) unsigned char args[kMaxOpArgsBytes];
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stream: a bounded ring of commands and the worker that runs them in order.
// tail - head = commands enqueued and not yet finished (the one running included).
struct SimStream {
  StreamKind kind = StreamKind::kCompute;
  std::mutex mu;
  std::condition_variable work;   // a command was enqueued, or stop
  std::condition_variable space;  // a slot was freed
  std::condition_variable done;   // a command finished
  std::vector<Command> ring;
  uint64_t head = 0;
  uint64_t tail = 0;
  bool stop = false;
  std::mt19937_64 rng;  // the worker's only: copy jitter
  std::thread worker;
};

}  // namespace

struct SimDevice::Impl final : SimMemory {
  SimOptions options;
  SimArena arena;

  // Lock order: mem_mu, then alloc_mu. mem_mu guards the arena's contents (landings,
  // memsets, ops, poison, Peek); alloc_mu guards the arena's block lists.
  std::mutex mem_mu;
  mutable std::mutex alloc_mu;
  std::vector<SimLanding> landings;      // guarded by mem_mu
  std::map<uintptr_t, uint64_t> pinned;  // live pinned buffers: start -> bytes; alloc_mu

  std::mutex events_mu;
  std::condition_variable events_cv;

  std::atomic<uint64_t> wait_calls{0};
  std::atomic<uint64_t> skipped{0};

  std::atomic<bool> failed{false};
  std::mutex status_mu;
  absl::Status sticky;  // the first error of queued work

  SimStream streams[kStreamCount];

  // The shared host-to-device link (profile.shared_h2d_link): one copy holds it at a time;
  // critical-first, so a critical copy waits for at most the one in flight.
  std::mutex link_mu;
  std::condition_variable link_cv;
  bool link_busy = false;
  int critical_waiting = 0;

  void AcquireLink(StreamKind kind) {
    std::unique_lock<std::mutex> lock(link_mu);
    if (kind == StreamKind::kBackground) {
      link_cv.wait(lock, [&] { return !link_busy && critical_waiting == 0; });
    } else {
      ++critical_waiting;
      link_cv.wait(lock, [&] { return !link_busy; });
      --critical_waiting;
    }
    link_busy = true;
  }
  void ReleaseLink() {
    {
      std::lock_guard<std::mutex> lock(link_mu);
      link_busy = false;
    }
    link_cv.notify_all();
  }

  void SetSticky(absl::Status status) {
    std::lock_guard<std::mutex> lock(status_mu);
    if (sticky.ok()) {
      Log().error("sim device: {} (the device now fails every call)", status.ToString());
      sticky = std::move(status);
      failed.store(true, std::memory_order_release);
    }
  }
  absl::Status Sticky() {
    if (!failed.load(std::memory_order_acquire)) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(status_mu);
    return sticky;
  }

  absl::Status CheckDeviceRange(std::string_view op, std::string_view arg, const void* ptr,
                                uint64_t bytes) const override {
    std::lock_guard<std::mutex> lock(alloc_mu);
    if (arena.IsLive(ptr, bytes)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(op), ": ", std::string(arg), " [", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
        ", +", bytes, ") is not inside live device memory"));
  }

  absl::Status CheckMappedRange(std::string_view op, std::string_view arg, const void* ptr,
                                uint64_t bytes) const override {
    {
      std::lock_guard<std::mutex> lock(alloc_mu);
      const auto p = reinterpret_cast<uintptr_t>(ptr);
      auto it = pinned.upper_bound(p);
      if (it != pinned.begin()) {
        --it;
        if (p - it->first <= it->second && bytes <= it->second - (p - it->first)) {
          return absl::OkStatus();
        }
      }
    }
    return CheckDeviceRange(op, arg, ptr, bytes);
  }

  // True when this wait call is to be skipped by the negative-control switches.
  bool SkipThisWait(const char* call) {
    const uint64_t n = wait_calls.fetch_add(1, std::memory_order_relaxed);
    const bool skip = options.debug_skip_all_waits ||
                      (options.debug_skip_wait_index && *options.debug_skip_wait_index == n);
    if (skip) {
      skipped.fetch_add(1, std::memory_order_relaxed);
      Log().warn("sim device: skipping wait #{} ({}): debug negative control", n, call);
    }
    return skip;
  }

  // Puts a command on `stream`'s ring (blocking while it is full).
  template <typename Fill>
  void Enqueue(StreamKind kind, Fill&& fill) {
    SimStream& s = streams[static_cast<int>(kind)];
    std::unique_lock<std::mutex> lock(s.mu);
    s.space.wait(lock, [&] { return s.tail - s.head < s.ring.size(); });
    Command& c = s.ring[s.tail % s.ring.size()];
    fill(c);
    c.index = s.tail;
    ++s.tail;
    s.work.notify_one();
  }

  void Run(SimStream& s) {
    std::unique_lock<std::mutex> lock(s.mu);
    for (;;) {
      s.work.wait(lock, [&] { return s.head != s.tail || s.stop; });
      if (s.head == s.tail) return;  // stopped and drained
      // The slot stays ours until head moves: producers never write it before then.
      const Command& c = s.ring[s.head % s.ring.size()];
      lock.unlock();
      Execute(s, c);
      lock.lock();
      ++s.head;
      s.space.notify_one();
      s.done.notify_all();
    }
  }

  void Execute(SimStream& s, const Command& c) {
    switch (c.type) {
      case CommandType::kCopy:
        return ExecuteCopy(s, c);
      case CommandType::kMemset: {
        if (failed.load(std::memory_order_acquire)) return;
        std::lock_guard<std::mutex> lock(mem_mu);
        if (!CheckDeviceRange("memset", "dst", c.dst, c.bytes).ok()) {
          SetSticky(absl::FailedPreconditionError(
              absl::StrCat("memset on the ", std::string(StreamKindName(s.kind)),
                           " stream: its destination was freed before it ran")));
          return;
        }
        std::memset(c.dst, c.value, c.bytes);
        return;
      }
      case CommandType::kOp: {
        if (failed.load(std::memory_order_acquire)) return;
        absl::Status st;
        {
          std::lock_guard<std::mutex> lock(mem_mu);
          st = c.op->run(c.args, *this);
        }
        if (!st.ok()) {
          SetSticky(absl::Status(
              st.code(),
              absl::StrCat("op '", std::string(c.op->name), "' on the ",
                           std::string(StreamKindName(s.kind)), " stream failed: ", st.message())));
        }
        return;
      }
      case CommandType::kRecord: {
        std::lock_guard<std::mutex> lock(events_mu);
        if (c.generation > c.event->completed) {
          c.event->completed = c.generation;
          if (c.event->timing) c.event->completed_at = Clock::now();
        }
        --c.event->pending;
        events_cv.notify_all();
        return;
      }
      case CommandType::kWait: {
        std::unique_lock<std::mutex> lock(events_mu);
        events_cv.wait(lock, [&] { return c.event->completed >= c.generation; });
        --c.event->pending;
        events_cv.notify_all();
        return;
      }
    }
  }

  // Sleeps for the copy's modelled duration, then moves the bytes (the landing).
  void ExecuteCopy(SimStream& s, const Command& c) {
    if (failed.load(std::memory_order_acquire)) return;
    const double jitter = options.jitter;
    std::uniform_real_distribution<double> spread(1.0 - jitter, 1.0 + jitter);
    const double factor = jitter > 0.0 ? spread(s.rng) : 1.0;
    const double seconds = options.profile.CopySeconds(c.bytes, c.direction) * factor;
    const bool on_link =
        options.profile.shared_h2d_link && c.direction == CopyDirection::kHostToDevice;
    if (on_link) AcquireLink(s.kind);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    Land(s, c);
    if (on_link) ReleaseLink();
  }

  void Land(SimStream& s, const Command& c) {
    std::lock_guard<std::mutex> lock(mem_mu);
    const bool dst_device = c.direction != CopyDirection::kDeviceToHost;
    const bool src_device = c.direction != CopyDirection::kHostToDevice;
    if ((dst_device && !CheckDeviceRange("copy", "dst", c.dst, c.bytes).ok()) ||
        (src_device && !CheckDeviceRange("copy", "src", c.src, c.bytes).ok())) {
      SetSticky(absl::FailedPreconditionError(
          absl::StrCat("a copy of ", c.bytes, " bytes on the ", std::string(StreamKindName(s.kind)),
                       " stream landed after its device memory was freed")));
      return;
    }
    std::memmove(c.dst, c.src, c.bytes);
    if (options.record_landings && landings.size() < kLandingLogCapacity) {
      landings.push_back(SimLanding{s.kind, c.direction, c.index, c.bytes});
    }
  }
};

// ---- Creation ------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<SimDevice>> SimDevice::Create(const SimOptions& options) {
  const DeviceProfile& p = options.profile;
  if (p.memory_bytes == 0 || !(p.h2d_bytes_per_s > 0) || !(p.d2h_bytes_per_s > 0) ||
      !(p.device_bytes_per_s > 0) || !(p.copy_latency_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("sim device: profile '", p.name,
                                                   "' is incomplete (memory and bandwidths "
                                                   "must be positive, latency non-negative)"));
  }
  if (!(options.jitter >= 0.0 && options.jitter < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim device: jitter ", options.jitter, " is outside [0, 1)"));
  }
  if (options.queue_capacity == 0) {
    return absl::InvalidArgumentError("sim device: queue_capacity must be positive");
  }
  const uint64_t limit = options.vram_limit == 0 ? p.memory_bytes : options.vram_limit;
  if (limit > p.memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("sim device: VRAM budget ", FormatBytes(limit),
                                                   " exceeds profile '", p.name, "''s ",
                                                   FormatBytes(p.memory_bytes)));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  KX_ASSIGN_OR_RETURN(
      impl->arena, SimArena::Reserve(limit + std::max(limit / kArenaSlackDivisor, kArenaSlackMin)));
  if (options.record_landings) impl->landings.reserve(kLandingLogCapacity);
  std::unique_ptr<SimDevice> dev(new SimDevice(options, std::move(impl)));
  Impl& m = *dev->impl_;
  for (int i = 0; i < kStreamCount; ++i) {
    SimStream& s = m.streams[i];
    s.kind = static_cast<StreamKind>(i);
    s.ring.resize(options.queue_capacity);
    s.rng.seed(SplitMix64(options.seed * kStreamCount + static_cast<uint64_t>(i)));
  }
  for (SimStream& s : m.streams) s.worker = std::thread([&m, &s] { m.Run(s); });
  return dev;
}

SimDevice::SimDevice(const SimOptions& options, std::unique_ptr<Impl> impl)
    : Device(DeviceKind::kSim, "sim:" + options.profile.name,
             options.vram_limit == 0 ? options.profile.memory_bytes : options.vram_limit,
             options.host_budget),
      impl_(std::move(impl)) {}

SimDevice::~SimDevice() {
  CheckNoLiveHandles();
  for (SimStream& s : impl_->streams) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stop = true;
    }
    s.work.notify_one();
  }
  for (SimStream& s : impl_->streams) {
    if (s.worker.joinable()) s.worker.join();
  }
}

// ---- Memory --------------------------------------------------------------------------------

absl::StatusOr<DeviceInfo> SimDevice::DoInfo() {
  const DeviceProfile& p = impl_->options.profile;
  DeviceInfo info;
  info.name = name();
  info.total_bytes = p.memory_bytes;
  info.free_bytes = p.memory_bytes - std::min(p.memory_bytes, vram().used());
  info.h2d_bytes_per_s = p.h2d_bytes_per_s;
  info.d2h_bytes_per_s = p.d2h_bytes_per_s;
  info.device_bytes_per_s = p.device_bytes_per_s;
  info.copy_latency_s = p.copy_latency_s;
  return info;
}

absl::StatusOr<void*> SimDevice::DoAlloc(uint64_t bytes) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  // mem_mu: the fresh block is poisoned while no landing or op can touch the arena.
  std::lock_guard<std::mutex> mem(impl_->mem_mu);
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  void* p = impl_->arena.Alloc(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError("the sim arena has no free block that large");
  }
  return p;
}

void SimDevice::DoFree(void* ptr, uint64_t bytes) {
  std::lock_guard<std::mutex> mem(impl_->mem_mu);
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  const uint64_t freed = impl_->arena.Free(ptr);
  KX_CHECK(freed == bytes);
}

absl::StatusOr<void*> SimDevice::DoAllocPinned(uint64_t bytes) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  const uint64_t rounded = (bytes + kPinnedAlignment - 1) / kPinnedAlignment * kPinnedAlignment;
  void* p = std::aligned_alloc(kPinnedAlignment, rounded);
  if (p == nullptr) return absl::ResourceExhaustedError("host allocation failed");
  std::memset(p, kSimPoisonByte, rounded);  // staging buffers start as garbage, visibly
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  impl_->pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void SimDevice::DoFreePinned(void* ptr, uint64_t bytes) {
  {
    // mem_mu too: an op reading the buffer (mapped, as sparse_ffn_merge's host_partial) runs
    // whole before or after the free, never across it.
    std::lock_guard<std::mutex> mem(impl_->mem_mu);
    std::lock_guard<std::mutex> lock(impl_->alloc_mu);
    impl_->pinned.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  std::free(ptr);
}

absl::Status SimDevice::DoPoison(void* ptr, uint64_t bytes) {
  std::lock_guard<std::mutex> mem(impl_->mem_mu);
  std::memset(ptr, kSimPoisonByte, bytes);
  return absl::OkStatus();
}

absl::Status SimDevice::Peek(void* dst_host, const void* src_device, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> mem(impl_->mem_mu);
  if (dst_host == nullptr || !impl_->arena.Contains(src_device, bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": Peek outside the arena"));
  }
  std::memcpy(dst_host, src_device, bytes);
  return absl::OkStatus();
}

std::vector<SimLanding> SimDevice::Landings() const {
  std::lock_guard<std::mutex> mem(impl_->mem_mu);
  return impl_->landings;
}

uint64_t SimDevice::skipped_waits() const { return impl_->skipped.load(); }

// ---- Events and streams --------------------------------------------------------------------

absl::StatusOr<void*> SimDevice::DoCreateEvent(bool timing) {
  auto* e = new SimEvent();
  e->timing = timing;
  return e;
}

absl::StatusOr<double> SimDevice::DoEventElapsedSeconds(void* start, void* end) {
  const auto* a = static_cast<const SimEvent*>(start);
  const auto* b = static_cast<const SimEvent*>(end);
  if (!a->timing || !b->timing) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(),
                     ": EventElapsedSeconds: an event without timing (CreateEvent); "
                     "use CreateTimingEvent"));
  }
  std::lock_guard<std::mutex> lock(impl_->events_mu);
  for (const SimEvent* e : {a, b}) {
    if (e->recorded == 0 || e->completed < e->recorded) {
      return absl::FailedPreconditionError(absl::StrCat(
          name(), ": EventElapsedSeconds: an event ",
          e->recorded == 0 ? "that was never recorded" : "whose latest record is pending"));
    }
  }
  return std::chrono::duration<double>(b->completed_at - a->completed_at).count();
}

void SimDevice::DoDestroyEvent(void* event) {
  auto* e = static_cast<SimEvent*>(event);
  {
    // Queued records and waits still point at it.
    std::unique_lock<std::mutex> lock(impl_->events_mu);
    impl_->events_cv.wait(lock, [&] { return e->pending == 0; });
  }
  delete e;
}

absl::Status SimDevice::DoRecordEvent(StreamKind stream, void* event) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  auto* e = static_cast<SimEvent*>(event);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->events_mu);
    generation = ++e->recorded;
    ++e->pending;
  }
  impl_->Enqueue(stream, [&](Command& c) {
    c.type = CommandType::kRecord;
    c.event = e;
    c.generation = generation;
  });
  return absl::OkStatus();
}

absl::Status SimDevice::DoStreamWaitEvent(StreamKind stream, void* event) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  if (impl_->SkipThisWait("StreamWaitEvent")) return absl::OkStatus();
  auto* e = static_cast<SimEvent*>(event);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->events_mu);
    generation = e->recorded;  // the latest record as of now (0: never recorded, no wait)
    if (generation == 0) return absl::OkStatus();
    ++e->pending;
  }
  impl_->Enqueue(stream, [&](Command& c) {
    c.type = CommandType::kWait;
    c.event = e;
    c.generation = generation;
  });
  return absl::OkStatus();
}

absl::Status SimDevice::DoEventSynchronize(void* event) {
  if (impl_->SkipThisWait("EventSynchronize")) return impl_->Sticky();
  auto* e = static_cast<SimEvent*>(event);
  {
    std::unique_lock<std::mutex> lock(impl_->events_mu);
    const uint64_t generation = e->recorded;
    impl_->events_cv.wait(lock, [&] { return e->completed >= generation; });
  }
  return impl_->Sticky();
}

absl::StatusOr<bool> SimDevice::DoEventQuery(void* event) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  auto* e = static_cast<SimEvent*>(event);
  std::lock_guard<std::mutex> lock(impl_->events_mu);
  return e->completed >= e->recorded;
}

absl::Status SimDevice::DoStreamSynchronize(StreamKind stream) {
  SimStream& s = impl_->streams[static_cast<int>(stream)];
  {
    std::unique_lock<std::mutex> lock(s.mu);
    const uint64_t target = s.tail;
    s.done.wait(lock, [&] { return s.head >= target; });
  }
  return impl_->Sticky();
}

// ---- Copies and ops ------------------------------------------------------------------------

absl::Status SimDevice::DoCopy(StreamKind stream, CopyDirection direction, void* dst,
                               const void* src, uint64_t bytes) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  const bool dst_device = direction != CopyDirection::kDeviceToHost;
  const bool src_device = direction != CopyDirection::kHostToDevice;
  const char* call = direction == CopyDirection::kHostToDevice   ? "CopyH2D"
                     : direction == CopyDirection::kDeviceToHost ? "CopyD2H"
                                                                 : "CopyD2D";
  {
    std::lock_guard<std::mutex> lock(impl_->alloc_mu);
    const auto check = [&](const void* p, bool device, const char* which) -> absl::Status {
      if (device ? impl_->arena.IsLive(p, bytes) : !impl_->arena.Overlaps(p, bytes)) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": ", call, ": ", which, " [", absl::Hex(reinterpret_cast<uintptr_t>(p)), ", +",
          bytes, ") is ", device ? "not inside a live device buffer" : "device memory, not host"));
    };
    KX_RETURN_IF_ERROR(check(dst, dst_device, "dst"));
    KX_RETURN_IF_ERROR(check(src, src_device, "src"));
  }
  impl_->Enqueue(stream, [&](Command& c) {
    c.type = CommandType::kCopy;
    c.direction = direction;
    c.dst = dst;
    c.src = src;
    c.bytes = bytes;
  });
  return absl::OkStatus();
}

absl::Status SimDevice::DoMemset(StreamKind stream, void* dst, uint8_t value, uint64_t bytes) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  KX_RETURN_IF_ERROR(impl_->CheckDeviceRange("Memset", "dst", dst, bytes));
  impl_->Enqueue(stream, [&](Command& c) {
    c.type = CommandType::kMemset;
    c.dst = dst;
    c.value = value;
    c.bytes = bytes;
  });
  return absl::OkStatus();
}

const void* SimDevice::DoFindOp(std::string_view op) { return FindSimOp(op); }

absl::Status SimDevice::DoLaunch(StreamKind stream, const OpRef& ref, const void* args) {
  KX_RETURN_IF_ERROR(impl_->Sticky());
  const auto* op = static_cast<const SimOp*>(ref.impl);
  KX_CHECK_MSG(op->args_bytes <= kMaxOpArgsBytes, "a sim op's arguments exceed kMaxOpArgsBytes");
  // Every kx_cuda_<op>_args starts with its struct_size: a caller built against an older,
  // shorter struct must not have the newer fields read past its end.
  uint32_t struct_size = 0;
  std::memcpy(&struct_size, args, sizeof(struct_size));
  if (struct_size < op->args_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": Launch '", std::string(op->name),
                                                   "': args struct_size ", struct_size, " < ",
                                                   op->args_bytes));
  }
  impl_->Enqueue(stream, [&](Command& c) {
    c.type = CommandType::kOp;
    c.op = op;
    std::memcpy(c.args, args, op->args_bytes);
  });
  return absl::OkStatus();
}

}  // namespace kx
