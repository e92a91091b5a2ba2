// Runs a step under a placement (plan/placement.h): values move between a
// budgeted device space and a host space exactly as the plan says, so the
// device's measured peak is the plan's predicted peak and never passes the
// budget. The caller's inputs and parameters stay in its own (host) memory
// and are loaded for the stretches that use them. An accumulated value
// (graph::Graph::mark_accumulated) is the caller's too: the placement's
// allocation of it loads the caller's running sum, its producer adds to that
// on the device, and the placement's store writes the sum back to the
// caller's buffer (no host copy of the program's own).
#pragma once

#include <functional>
#include <vector>

#include "exec/executor.h"
#include "plan/placement.h"

namespace spillway::exec {

// What the planned executors (CPU, CUDA) share about the caller's memory:
// only inputs, parameters and accumulated values are bound; a step runs only
// when all of them are; a value's data is the caller's buffer (accumulated),
// its host copy, or its device copy.
void check_bindable(const graph::Graph& graph, graph::Value v);
void check_all_bound(const graph::Graph& graph, const std::vector<void*>& bound);
const void* planned_data(const graph::Graph& graph, graph::Value v, const std::vector<void*>& bound,
                         const std::vector<void*>& on_host, const std::vector<void*>& on_device);

// Copies bytes between the two spaces (memcpy on the CPU backend).
using CopyFn = std::function<void(void* dst, const void* src, uint64_t bytes)>;

class PlannedExecutor final : public StepProgram {
 public:
  PlannedExecutor(const graph::Graph& graph, plan::Placement placement, MemorySpace& device, MemorySpace& host,
                  NodeRunner& runner, CopyFn copy);
  ~PlannedExecutor() override;
  PlannedExecutor(const PlannedExecutor&) = delete;
  PlannedExecutor& operator=(const PlannedExecutor&) = delete;

  using StepProgram::bind;
  void bind(graph::Value v, void* data) override;
  void run() override;
  // Outputs are read from their host copies.
  const void* data(graph::Value v) const override;
  const graph::Graph& graph() const override { return graph_; }
  const plan::Placement& placement() const { return placement_; }

 private:
  void release_all();

  const graph::Graph& graph_;
  const plan::Placement placement_;
  MemorySpace& device_;
  MemorySpace& host_;
  NodeRunner& runner_;
  CopyFn copy_;
  std::vector<void*> bound_;   // the caller's memory, by value id
  std::vector<void*> on_device_;
  std::vector<void*> on_host_;  // host copies of computed values
};

}  // namespace spillway::exec
