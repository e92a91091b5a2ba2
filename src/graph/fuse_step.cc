#include "graph/fuse_step.h"

#include "graph/fuse_matmul_add.h"

namespace spillway::graph {

Graph fuse_step(const Graph& graph) { return fuse_matmul_add(graph).graph; }

}  // namespace spillway::graph
