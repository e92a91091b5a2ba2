// Every fusion a step graph gets before it runs, in the order they must run.
// Fusion comes before recomputation (graph/recompute.h): a recomputed node
// gives its producer a second reader, which would keep a fusion from applying
// and so change the bf16 rounding of the forward pass.
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

// The step graph with each fusion applied; every value keeps its id.
Graph fuse_step(const Graph& graph);

}  // namespace spillway::graph
