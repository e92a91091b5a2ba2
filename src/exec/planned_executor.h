// Runs a step under a placement (plan/placement.h) on three streams of a
// device, the GPU's or the CPU backend's (whose streams are threads of their
// own): kernels on the compute stream, loads on a host->device stream and
// stores on a device->host stream, ordered by events only where data or
// memory is shared, so copies run under the compute of other nodes:
//  - a load may reuse memory the compute stream just gave back, so its
//    stream first waits for the compute work issued so far;
//  - a node waits for the loads of its operands, and nothing else;
//  - a store waits for the node that made its value; the device copy is
//    freed (for the compute stream to reuse) once the store is done;
//  - host memory of a released copy is reused by a store only after the
//    load that read it last.
// Values marked resident in the placement are bound to device memory by the
// caller and never move; other bound values (parameters at home) are host
// memory, pinned, and are loaded where the plan says; so are accumulated
// values that are not resident (gradient sums at home): the placement's load
// of such a value brings the caller's running sum, its producer adds to it
// on the device, and its store writes the sum back to the caller's buffer.
// Memory is allocated and freed as work is issued, and the streams' order
// makes the reuse safe, so the device space's peak is the plan's.
//
// The runner must enqueue each node's work on the device's compute stream
// (the CUDA runner does; exec/streamed_runner.h makes a CPU runner do so).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "exec/executor.h"
#include "plan/placement.h"

namespace spillway::exec {

// One stretch of work on one stream of a measured step.
struct StreamInterval {
  StreamKind stream = StreamKind::compute;
  double start = 0, end = 0;  // seconds from the start of the step
  std::string label;
};

class PlannedExecutor final : public StepProgram {
 public:
  // Runs on `device`'s compute, h2d and d2h streams; the runner's kernels
  // go to its compute stream. Values going home get memory from `pinned_host`.
  PlannedExecutor(const graph::Graph& graph, plan::Placement placement, Device& device, MemorySpace& pinned_host,
                  NodeRunner& runner);
  ~PlannedExecutor() override;
  PlannedExecutor(const PlannedExecutor&) = delete;
  PlannedExecutor& operator=(const PlannedExecutor&) = delete;

  using StepProgram::bind;
  void bind(graph::Value v, void* data) override;
  // Enqueues the step. When the compute stream reaches its end, every copy
  // of the step has finished too; synchronize it before reading outputs, and
  // before the next run().
  void run() override;
  // Outputs that went home are read from their host copies, others from
  // the device (resident values: the caller's own memory).
  const void* data(graph::Value v) const override;
  const graph::Graph& graph() const override { return graph_; }
  const plan::Placement& placement() const { return placement_; }

  // Accumulated values that are not resident live in the caller's host
  // buffer: each step loads the running sum, its producer adds to it, and
  // it goes back. With this set, the caller promises the sums are zero (a
  // new optimizer step), and the loads become clears.
  void set_accumulators_zero(bool zero) { accumulators_zero_ = zero; }
  // Called while the step is enqueued, for each accumulated value about to
  // go home, with its device copy and the compute stream: work enqueued
  // there reads the sum before the copy starts (and before its memory is
  // reused). Empty: nothing is called.
  using BeforeStore = std::function<void(graph::Value, const void* device, Stream& compute)>;
  void set_before_store(BeforeStore hook) { before_store_ = std::move(hook); }

  // With timing on, run() records an event around every node and copy, and
  // timeline() returns what each stream did in the last step (call it after
  // the compute stream has finished).
  void set_timing(bool on) { timing_ = on; }
  std::vector<StreamInterval> timeline() const;

 private:
  void release_all();
  Event& timing_event();

  const graph::Graph& graph_;
  const plan::Placement placement_;
  Device& device_;
  MemorySpace& device_memory_;
  MemorySpace& host_;
  NodeRunner& runner_;
  Stream &compute_, &h2d_, &d2h_;
  std::vector<void*> bound_;     // the caller's memory, by value id
  std::vector<void*> on_device_;  // what the runner reads: bound device memory or the plan's copies
  std::vector<void*> planned_;    // device memory this executor allocated
  std::vector<void*> on_host_;    // host copies of computed values
  std::vector<std::unique_ptr<Event>> loaded_, stored_;  // by value id, re-recorded each time
  std::vector<bool> load_pending_, store_pending_;
  std::vector<std::unique_ptr<Event>> progress_;  // by node: compute has issued everything before its loads
  std::vector<std::unique_ptr<Event>> made_;      // by node: it has run, its stores may start
  Event* released_load_ = nullptr;  // the last load of the latest host copy given back
  std::unique_ptr<Event> d2h_done_;

  bool accumulators_zero_ = false;
  BeforeStore before_store_;
  bool timing_ = false;
  struct Mark {
    StreamKind stream;
    size_t begin, end;  // indices into events_
    std::string label;
  };
  std::vector<std::unique_ptr<Event>> events_;  // timing events, reused from step to step
  size_t events_used_ = 0;
  std::vector<Mark> marks_;
};

}  // namespace spillway::exec
