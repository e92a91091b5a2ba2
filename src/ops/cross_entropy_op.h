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
// dlogits, from the forward's lse and the loss's gradient dloss (one element).
graph::Value cross_entropy_backward(graph::Builder& b, graph::Value logits, graph::Value targets, graph::Value lse,
                                    graph::Value dloss, std::string_view name);

}  // namespace spillway::ops
