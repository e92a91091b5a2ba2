// Folds the loss's backward into its forward: the training step's
// cross_entropy_backward reads the logits again to write their gradient,
// but its dloss is the seed gradient, a constant fill, so the forward node
// can write dlogits in the same pass over the logits while each row is in
// cache. The logits are then read from memory once instead of twice, and
// their last reader is the loss.
//
// A cross_entropy of form Fused::loss_gradient writes dlogits too, as a
// third output, scaled by
// attrs.dloss (ops/cross_entropy.h, cross_entropy_forward_backward). It stays
// a forward node (not `backward`): it runs where the loss ran, and dlogits
// is a forward value the backward pass reads. Recomputation keeps it, as it
// keeps everything made outside the transformer layers.
//
// dlogits is its own value, not written over the logits: values of the IR
// never share memory, and at the fused node both are alive, as they were at
// cross_entropy_backward, so the step's peak memory does not move.
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

struct LossGradientFused {
  Graph graph;
  int fused = 0;  // cross_entropy_backward nodes folded into their forward
};

// A new graph in which every cross_entropy_backward that reads the lse of a
// cross_entropy of the same logits, targets and weights (if any), with a dloss made by a fill
// (the loss's seed) of the loss's dtype, is folded into that cross_entropy,
// which stays where it was. Every value keeps its id; the fill goes too when
// nothing else reads its value, which is then left without a producer or
// reader (never allocated).
LossGradientFused fuse_loss_gradient(const Graph& graph);

}  // namespace spillway::graph
