// Recomputation chosen value kind by value kind (graph::recompute_kind), not
// only as the named policies: the planner ranks the kinds of layer values
// by the seconds remaking them costs per byte dropping them saves, and
// plans the steps that drop the cheapest 1, 2, ... kinds, so that at long
// sequences the attention's output (quadratic to remake) is kept or
// offloaded while elementwise values are remade.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "plan/machine_rates.h"

namespace spillway::train {

struct RecomputeKindCost {
  std::string kind;
  uint64_t bytes = 0;    // dropped over all layers
  double seconds = 0;    // to remake them, over all layers (their producers' predicted times)
};

// The kinds of values `layers_step` (a step built with
// graph::RecomputePolicy::layers) remakes, cheapest to remake per byte
// first.
std::vector<RecomputeKindCost> recompute_kinds_by_cost(const graph::Graph& layers_step, const plan::MachineRates& rates);

// "4 kinds of layer values (mlp.act_fn, ...)" for what a plan remakes.
std::string recomputed_kinds_summary(const std::vector<std::string>& kinds);

}  // namespace spillway::train
