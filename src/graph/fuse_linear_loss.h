// Chunks the model's head: lm_head's matmul, the loss after it and, in a
// training step, the loss's folded gradient (graph/fuse_loss_gradient.h) and
// lm_head's two backward matmuls become one linear_cross_entropy node
// (ops/linear_cross_entropy.h) that makes the logits a chunk of rows at a
// time. The logits and their gradient are then never whole: at long
// sequences they are the step's largest values by far.
//
// The node runs where the loss ran; dh and lm_head's gradient sum, which
// the backward matmuls made after it, come out of it, so they are made
// earlier and their readers come after. The pattern is fused only where
// nothing else reads the logits, dlogits or the gradient sum (a tied
// table's is an addend of the embedding's: left as it is) and the products
// are plain. Every value keeps its id; the logits and dlogits are left
// without producer or reader (never allocated).
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace spillway::graph {

struct LinearLossFused {
  Graph graph;
  int fused = 0;  // heads chunked
};

LinearLossFused fuse_linear_loss(const Graph& graph, int64_t chunk_rows);

}  // namespace spillway::graph
