// Reverse-mode automatic differentiation: appends to a graph the nodes that
// compute d loss / d value for the values asked for, from each op's
// vector-Jacobian product rule (graph::OpDef::backward, beside the op in
// src/ops/<family>_op.cc).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "graph/builder.h"

namespace spillway::graph {

struct Gradients {
  std::unordered_map<int32_t, Value> of;  // value id -> its gradient
  Value operator[](Value v) const;        // throws when v has no gradient
};

// Where the gradients of the values in `wrt` go.
enum class GradientOutput : uint8_t {
  fresh,        // new values the executor allocates, holding this step's gradient
  accumulated,  // caller memory (Graph::mark_accumulated): each step adds its gradient
};

// `loss` must hold one element. Every value in `wrt` gets a gradient (zeros
// when the loss does not depend on it), marked as a graph output so that it
// lives to the end of the step. With GradientOutput::accumulated each
// gradient is a value of its own, accumulated into caller memory: the node
// that computes it adds into the caller's buffer (a fill of zeros, for a
// value the loss does not reach, adds nothing); where that node cannot
// accumulate, or its result is read further on, one add node (result + 0)
// does the accumulating. `seed` is the loss's own gradient: 1, or a rank's
// share where every rank of a group computes the loss alike
// (graph/tensor_parallel.h).
Gradients append_backward(Builder& b, Value loss, const std::vector<Value>& wrt,
                          GradientOutput output = GradientOutput::fresh, double seed = 1.0);

// The same from a gradient given for a value of any shape: `seed` (a value
// of `output`'s shape and dtype, an input of the graph) is d objective /
// d output, as a pipeline stage receives it from the next stage for the
// hidden state it handed on.
Gradients append_backward_from(Builder& b, Value output, Value seed, const std::vector<Value>& wrt,
                               GradientOutput kind = GradientOutput::fresh);

}  // namespace spillway::graph
