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
// (device -> host) of values it produced, device frees, then host frees.
// A store is issued as soon as its value exists, so the copy runs while the
// forward pass goes on; the device copy is freed at the end of its stretch.
struct NodeActions {
  std::vector<graph::Value> load;  // issued here, in this order; each is needed by a later (or this) node
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
  std::vector<bool> resident;  // as requested, sized to the graph's values
};

// What the planner is asked for, beyond the graph.
struct PlacementRequest {
  uint64_t device_budget = UINT64_MAX;  // for the values the plan moves; resident ones are outside it
  uint64_t host_budget = UINT64_MAX;    // for stored copies of computed values
  // Host memory the caller keeps beside host_budget (the training state at
  // home), for saying what the whole budget must hold when it does not.
  uint64_t host_taken = 0;
  // By value id: bound by the caller to device memory for the whole step
  // (weights and gradient accumulators that fit). The plan never moves
  // them and does not count them.
  std::vector<bool> resident;
  // When given (one entry per node, predicted seconds), each load starts
  // as late as it can while still finishing, on a single host->device
  // stream of `h2d_bytes_per_second`, before the node that needs it: the
  // copies hide under compute, and the device holds each loaded value only
  // for the time its copy needs. Where the budget has no room that early,
  // the load starts later (and compute may wait for it). Without node times
  // a load starts at its node.
  std::vector<double> node_seconds;
  double h2d_bytes_per_second = 0;
  // With node times, a value that goes home keeps its device memory until
  // its store (on a single device->host stream of this speed, in the order
  // the values are made) is predicted to be done, so freeing it does not
  // wait, as far as the budget has room for it.
  double d2h_bytes_per_second = 0;
  // The device space is one block served best-fit (the CUDA pool): the plan
  // must also replay in an arena of the budget's size, or the budget is
  // lowered (or refused) until it does. A heap-backed space needs no such
  // check.
  bool best_fit_arena = false;
};

// The least device budget any placement of `graph` can meet: the largest
// set of values one node touches at once (resident values not counted).
uint64_t minimum_device_budget(const graph::Graph& graph, const graph::AllocationCost& cost,
                               const std::vector<bool>& resident = {});

// Throws Error("--device-mem", ...) naming the minimum when the budget is
// below it, and Error("--host-mem", ...) when the stored copies would not
// fit the host budget.
Placement plan_placement(const graph::Graph& graph, const PlacementRequest& request,
                         const graph::AllocationCost& cost);
Placement plan_placement(const graph::Graph& graph, uint64_t device_budget, uint64_t host_budget,
                         const graph::AllocationCost& cost);

}  // namespace spillway::plan
