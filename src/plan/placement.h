// Where every value of a step lives at each node, under a device budget.
//
// Parameters and inputs live at home in host memory and are loaded onto the
// device for the stretches of the step that use them. Computed values are
// born on the device; one that is not needed for a while can go home to host
// memory (stored once: values never change) and come back before its next
// use. Graph outputs go home after their last use. The plan is made before
// the step runs by a greedy pass: while the device peak is over budget, the
// largest value resident at the peak but not used there is sent home for
// the gap around the peak. Nothing is decided at out-of-memory time.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "graph/liveness.h"

namespace spillway::plan {

// What happens around one node, in this order: loads (host -> device) and
// allocations of the node's outputs before it runs; after it, stores
// (device -> host), device frees, then host frees.
struct NodeActions {
  std::vector<graph::Value> load;
  std::vector<graph::Value> allocate;
  std::vector<graph::Value> store;
  std::vector<graph::Value> drop;
  std::vector<graph::Value> release_host;
};

struct Placement {
  std::vector<NodeActions> nodes;
  uint64_t device_peak = 0;    // accounted bytes, as the device space counts them
  uint64_t host_peak = 0;      // stored copies of computed values (not the caller's own memory)
  uint64_t bytes_loaded = 0;   // host -> device per step
  uint64_t bytes_stored = 0;   // device -> host per step
  int values_offloaded = 0;    // computed values that went home mid-step
};

// The least device budget any placement of `graph` can meet: the largest
// set of values one node touches at once.
uint64_t minimum_device_budget(const graph::Graph& graph, const graph::AllocationCost& cost);

// Throws Error("--device-mem", ...) naming the minimum when the budget is
// below it, and Error("--host-mem", ...) when the stored copies would not
// fit the host budget.
Placement plan_placement(const graph::Graph& graph, uint64_t device_budget, uint64_t host_budget,
                         const graph::AllocationCost& cost);

}  // namespace spillway::plan
