#include "graph/cpu_executor.h"

#include <thread>

#include "base/check.h"
#include "base/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KX_GRAPH_CPU_RELAX() _mm_pause()
#else
#define KX_GRAPH_CPU_RELAX() std::this_thread::yield()
#endif

namespace kx::graph {
namespace {
// How long a waiting thread spins with pause before it yields its core: the
// gap between dependent tasks inside a token is a few microseconds, while a
// longer wait (an I/O read, more threads than cores on a loaded machine)
// should let the thread being waited for run.
constexpr int64_t kSpinNsBeforeYield = 20'000;
// Pauses between two clock reads while spinning: keeps the wait loop off the
// clock without letting a yield come much later than kSpinNsBeforeYield.
constexpr uint32_t kSpinsPerClockRead = 64;
// A graph with externals whose every thread waits sleeps instead of yielding
// (TaskGraph::SleepForWork), woken when parts are queued; this bounds a sleep
// should a wake-up ever be missed.
constexpr int64_t kSleepTimeoutNs = 1'000'000;
}  // namespace

CpuExecutor::CpuExecutor(ThreadPool& pool)
    : pool_(pool), per_thread_(static_cast<size_t>(pool.size())) {}

RunStats CpuExecutor::Run(TaskGraph& g) {
  const int64_t start = NowNs();
  g.BeginRun();
  // assign() to a size within capacity does not allocate: only a graph with a
  // larger tag range than any before does.
  wait_by_tag_.assign(static_cast<size_t>(g.max_tag() + 1), 0);
  external_wait_ns_ = 0;
  // Every thread starts out waiting; each leaves that state at its first pop.
  waiting_threads_.store(pool_.size(), std::memory_order_relaxed);
  pool_.Run([&](int ith, int nth) { Work(g, ith, nth); });
  g.EndRun();

  RunStats st;
  st.wall_ns = NowNs() - start;
  for (const ThreadStats& t : per_thread_) {
    st.parts_run += t.parts_run;
    st.idle_wait_ns += t.idle_ns;
  }
  st.external_wait_ns = external_wait_ns_;
  return st;
}

void CpuExecutor::Work(TaskGraph& g, int ith, int nth) {
  int64_t parts_run = 0, idle_ns = 0;
  bool waiting = true;
  int64_t wait_start = NowNs();
  uint32_t spins = 0;
  // Thread 0 watches for "every thread waiting" (see the header).
  const bool watcher = ith == 0;
  bool all_waiting = false;
  int64_t all_waiting_start = 0;  // the stall's start, or its last split at a signal
  int signals_read = 0;           // records of g's signal log already split stalls (thread 0)
  const bool can_sleep = g.has_externals();

  auto charge = [&](int64_t until, int tag) {
    const int64_t ns = until - all_waiting_start;
    external_wait_ns_ += ns;
    if (tag != kNoTag) wait_by_tag_[tag] += ns;
    all_waiting_start = until;
  };
  // Splits the stall at the signals logged inside it: the piece before each goes to its tag.
  auto split_at_signals = [&] {
    const int logged = g.signals_logged();
    int64_t t;
    int tag;
    while (signals_read < logged && g.signal_record(signals_read, &t, &tag)) {
      ++signals_read;
      if (all_waiting && t > all_waiting_start) charge(t, tag);
    }
  };
  auto end_all_waiting = [&](int64_t now) {
    split_at_signals();
    // The rest (noticing the last signal) goes to the signal that ended the stall.
    charge(now, g.last_signalled_tag());
    all_waiting = false;
  };
  auto stop_waiting = [&] {
    const int64_t now = NowNs();
    idle_ns += now - wait_start;
    waiting_threads_.fetch_sub(1, std::memory_order_relaxed);
    waiting = false;
    if (watcher && all_waiting) end_all_waiting(now);
  };

  TaskGraph::Part part;
  bool have_part = false;  // a part handed back by the last RunPart
  while (true) {
    if (have_part || g.TryPopPart(&part)) {
      if (waiting) stop_waiting();
      have_part = g.RunPart(part, &part);
      ++parts_run;
      continue;
    }
    if (g.AllDone()) break;
    if (!waiting) {
      waiting = true;
      wait_start = NowNs();
      waiting_threads_.fetch_add(1, std::memory_order_relaxed);
      spins = 0;
    }
    if (watcher) {
      const bool now_all = waiting_threads_.load(std::memory_order_relaxed) == nth;
      if (now_all != all_waiting) {
        const int64_t now = NowNs();
        if (now_all) {
          split_at_signals();  // signals before the stall split nothing
          all_waiting = true;
          all_waiting_start = now;
        } else {
          end_all_waiting(now);
        }
      }
    }
    if (++spins % kSpinsPerClockRead != 0 || NowNs() - wait_start < kSpinNsBeforeYield) {
      KX_GRAPH_CPU_RELAX();
    } else if (can_sleep && waiting_threads_.load(std::memory_order_relaxed) == nth) {
      // Every thread waits: only an external's Signal can make progress (measured: two
      // yielding threads slowed the RAM tier's reads' completion on a loaded machine).
      have_part = g.SleepForWork(kSleepTimeoutNs, &part);
    } else {
      std::this_thread::yield();
    }
  }
  if (waiting) stop_waiting();
  per_thread_[ith].parts_run = parts_run;
  per_thread_[ith].idle_ns = idle_ns;
}

}  // namespace kx::graph
