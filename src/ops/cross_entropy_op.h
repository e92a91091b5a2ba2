// The cross-entropy ops in the graph: the loss and its backward
// (ops/cross_entropy.h).
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// Mean cross-entropy of logits [..., vocab] over rows whose i32 target is
// >= 0: a one-element value. The node also writes each row's log-sum-exp
// (".lse"), which the backward reads.
graph::Value cross_entropy(graph::Builder& b, graph::Value logits, graph::Value targets,
                           std::string_view name = "cross_entropy");
// The weighted loss (ops/cross_entropy.h): sum over counted rows of
// weights[r] times the row's cross-entropy; `weights` has one element per
// row, in the logits' accumulation dtype, and takes no gradient. The node's
// third input.
graph::Value cross_entropy_weighted(graph::Builder& b, graph::Value logits, graph::Value targets,
                                    graph::Value weights, std::string_view name = "cross_entropy");
// dlogits, from the forward's lse and the loss's gradient dloss (one element);
// `weights` (an invalid Value: none) as the forward's, its fifth input.
graph::Value cross_entropy_backward(graph::Builder& b, graph::Value logits, graph::Value targets, graph::Value lse,
                                    graph::Value dloss, std::string_view name, graph::Value weights = {});

}  // namespace spillway::ops
