// Completes a decode graph's device externals (graph/task_graph.h) when the device's events
// complete. The Device interface has no host callbacks (cudaLaunchHostFunc would run on the
// driver's thread and may not call CUDA; sim has none), so one thread per decode graph waits:
// it takes (event, node) pairs in the order they were queued, EventSynchronize's each and then
// Signal's the node. One thread that blocks in the device's own wait was chosen over polling
// EventQuery from the executor's idle loop: the executor stays device-agnostic, the waiting
// thread sleeps instead of spinning on the 2 cores the pool already spins on, and the order of
// the pairs is the order of the events on their streams (a step's upload, kernels, download;
// layer l's before layer l+1's), so waiting for the head of the queue never delays a later
// event that completed first by more than its predecessor's completion.
//
// Usage (engine/decode_graph.cc):
//   DeviceWatch watch(device);
//   per token: g.Reset(); ... in a node: watch.Watch(&ev, &g, node); ... exec.Run(g);
//   watch.Drain();   // every Signal call returned: the graph may be Reset again
//
// Thread-safety: Watch, Drain and the counters may be called from any thread; the events
// and the graph must outlive the pair's Signal (Drain waits for it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "device/device.h"
#include "graph/task_graph.h"

namespace kx {

class DeviceWatch {
 public:
  explicit DeviceWatch(Device& device);
  ~DeviceWatch();  // waits for the queued pairs, then joins the thread
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

  struct Pair {
    const Event* event;
    graph::TaskGraph* g;
    int node;
  };
  // Signals each pair's node once its event completed, in this order after the pairs queued
  // before (one wake-up for all). A failed wait still signals (the run must end; the step's
  // End reports the device error, which is sticky) and is kept in status().
  void Watch(std::initializer_list<Pair> pairs);
  // Returns once every queued pair was signalled and its Signal call returned.
  void Drain();
  // The first failed wait (sticky).
  absl::Status status() const;

  // Tests' negative control: signal without waiting for the event.
  void set_debug_signal_early(bool on) { debug_signal_early_ = on; }

 private:
  void Loop();

  Device& device_;
  mutable std::mutex mu_;
  std::condition_variable queued_cv_, drained_cv_;
  std::vector<Pair> queue_;  // FIFO: [head_, size)
  size_t head_ = 0;
  bool busy_ = false;  // the thread holds a pair not yet signalled
  bool stop_ = false;
  bool debug_signal_early_ = false;
  absl::Status status_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace kx
