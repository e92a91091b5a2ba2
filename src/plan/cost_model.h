// Predicts how long a step takes from what it does: FLOPs over the measured
// compute rate of each kind of op, bytes over the measured memory and link
// bandwidths. The numbers are the machine's measured ceilings (DESIGN.md),
// so a prediction far from a measured step means the code, or the model, is
// wrong.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "plan/machine_rates.h"
#include "plan/placement.h"

namespace spillway::plan {

struct NodeCost {
  double flops = 0;  // model FLOPs of the node (matmul, attention)
  double bytes = 0;  // device bytes the node reads and writes
  double seconds = 0;
};

NodeCost node_cost(const graph::Graph& graph, const graph::Node& node, const MachineRates& rates);

struct StepPrediction {
  std::vector<double> node_seconds;
  double compute_seconds = 0;  // the nodes' own times, summed
  double h2d_seconds = 0;      // busy time of each copy stream
  double d2h_seconds = 0;
  // The compute stream waiting: for a load its node needs, or for a store
  // before the stored value's memory is freed.
  double wait_seconds = 0;
  // The step replayed on three streams with the planned executor's events:
  // a load starts when its stream is free and the compute stream has
  // reached the node that issues it; a node starts when the loads it reads
  // are done; a store starts when its value is made; freeing a value waits
  // for its store; the step ends when the last store is done.
  double step_seconds = 0;
};

StepPrediction predict_step(const graph::Graph& graph, const Placement& placement, const MachineRates& rates);

// A picture of one predicted step (the same replay as predict_step): a row
// per stream (compute, host→device, device→host), each op or copy a bar.
std::string timeline_svg(const graph::Graph& graph, const Placement& placement, const StepPrediction& prediction,
                         const MachineRates& rates, const std::string& title);

}  // namespace spillway::plan
