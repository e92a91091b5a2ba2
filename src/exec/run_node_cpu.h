// Runs one graph node on the CPU, through its op's definition
// (graph::OpDef::cpu, beside the op's kernels in src/ops/).
#pragma once

#include <vector>

#include "graph/graph.h"
#include "ops/collective_groups.h"

namespace spillway::exec {

// `data[v]` is the memory of value id v (all of the node's inputs and
// outputs must be there). Collectives go through `groups` (none: a graph
// without collectives).
void run_node_cpu(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data,
                  const ops::CollectiveGroups* groups = nullptr);

}  // namespace spillway::exec
