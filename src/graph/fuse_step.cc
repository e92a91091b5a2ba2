#include "graph/fuse_step.h"

#include "graph/fuse_embedding_add.h"
#include "graph/fuse_loss_gradient.h"
#include "graph/fuse_matmul_add.h"
#include "graph/fuse_rmsnorm_add.h"

namespace spillway::graph {

Graph fuse_step(const Graph& graph) {
  Graph g = fuse_matmul_add(graph).graph;
  // After fuse_matmul_add: an add of a matmul's product and a norm's dx
  // (none in LLaMA) stays in the matmul's epilogue, as before this pass.
  g = fuse_rmsnorm_add(g).graph;
  g = fuse_loss_gradient(g).graph;
  g = fuse_embedding_add(g).graph;
  return g;
}

}  // namespace spillway::graph
