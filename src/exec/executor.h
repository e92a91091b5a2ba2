// Runs a graph node after node, allocating each computed value from a memory
// space just before its producer runs and freeing it right after its last use
// (graph/liveness.h), so the space's peak is exactly the peak liveness
// predicts. A NodeRunner does the work of each node on one backend (CPU
// threads, or a CUDA stream whose in-order execution makes the early frees
// safe).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "device/memory_space.h"
#include "graph/graph.h"
#include "graph/liveness.h"
#include "ops/collective_groups.h"

namespace spillway::exec {

class NodeRunner {
 public:
  virtual ~NodeRunner() = default;
  // `data[v]` holds value v's memory for every input and output of the node.
  virtual void run(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data) = 0;
  // Waits until the work issued so far has finished (for per-node timing).
  virtual void synchronize() {}
};

// A graph made runnable: bind the caller's tensors, run a step, read the
// outputs. Executor keeps everything on the device; PlannedExecutor
// (exec/planned_executor.h) follows a placement across device and host.
class StepProgram {
 public:
  virtual ~StepProgram() = default;

  // Inputs, parameters and accumulated values (graph::Graph::mark_accumulated)
  // live in the caller's memory; bind them before run(). The producer of an
  // accumulated value adds into the bound buffer on every run(): the caller
  // zeroes it to start a new sum, and reads it (there, or through data())
  // after a step. The program never allocates, frees or clears it.
  virtual void bind(graph::Value v, void* data) = 0;
  template <typename T>
  void bind(graph::Value v, std::span<T> data) {
    check_binding(v, data.size() * sizeof(T));
    bind(v, static_cast<void*>(const_cast<std::remove_const_t<T>*>(data.data())));
  }

  // One step. Graph outputs stay readable until the next run() or until the
  // program goes away.
  virtual void run() = 0;

  virtual const void* data(graph::Value v) const = 0;
  template <typename T>
  std::span<const T> read(graph::Value v) const {
    return {static_cast<const T*>(data(v)), static_cast<size_t>(graph().value(v).shape.numel())};
  }
  virtual const graph::Graph& graph() const = 0;

 protected:
  void check_binding(graph::Value v, uint64_t bytes) const;
  // Only inputs, parameters and accumulated values are bound; a step runs
  // only when all of them are (`bound` by value id).
  void check_bindable(graph::Value v) const;
  void check_all_bound(const std::vector<void*>& bound) const;
};

class Executor : public StepProgram {
 public:
  Executor(const graph::Graph& graph, MemorySpace& space, NodeRunner& runner);
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  using StepProgram::bind;
  void bind(graph::Value v, void* data) override;
  // Everything but the outputs is freed as soon as it is dead.
  void run() override;
  const void* data(graph::Value v) const override;
  const graph::Graph& graph() const override { return graph_; }

  const graph::Liveness& liveness() const { return liveness_; }

  // Seconds spent in each node over the steps run while profiling was on,
  // by node index: what `spillway bench` breaks a step down by. Profiling
  // synchronizes after every node, so it slows an asynchronous backend.
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<double>& node_seconds() const { return node_seconds_; }

  // Called with each node's index once the node has been issued (on an
  // asynchronous backend, before it has run): where the caller starts work
  // that follows a node on its own stream, such as a collective over
  // gradient sums the node made final. Empty: none.
  void set_after_node(std::function<void(size_t node)> hook) { after_node_ = std::move(hook); }
  // Called with each node's index just before the node is issued: where
  // the caller makes the node wait for work on its own stream, such as the
  // gather of weights the node reads.
  void set_before_node(std::function<void(size_t node)> hook) { before_node_ = std::move(hook); }

 private:
  void release_outputs();

  const graph::Graph& graph_;
  MemorySpace& space_;
  NodeRunner& runner_;
  graph::Liveness liveness_;
  std::vector<void*> data_;  // by value id
  bool profiling_ = false;
  std::vector<double> node_seconds_;
  std::function<void(size_t)> before_node_, after_node_;
};

class CpuNodeRunner : public NodeRunner {
 public:
  // Collective nodes go through `groups` (must outlive the runner).
  explicit CpuNodeRunner(const ops::CollectiveGroups* groups = nullptr) : groups_(groups) {}
  void run(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data) override;

 private:
  const ops::CollectiveGroups* groups_;
};

// The CPU backend's executor: kernels from src/ops/ on OpenMP threads.
class CpuExecutor : public Executor {
 public:
  CpuExecutor(const graph::Graph& graph, MemorySpace& space, const ops::CollectiveGroups* groups = nullptr)
      : Executor(graph, space, cpu_runner_), cpu_runner_(groups) {}

 private:
  CpuNodeRunner cpu_runner_;
};

}  // namespace spillway::exec
