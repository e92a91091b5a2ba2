// Reverse-mode automatic differentiation: appends to a graph the nodes that
// compute d loss / d value for the values asked for, from each op's
// vector-Jacobian product rule (autodiff.cc, one rule per op, in the order of
// graph.h's OpKind).
#pragma once

#include <unordered_map>
#include <vector>

#include "graph/builder.h"

namespace spillway::graph {

struct Gradients {
  std::unordered_map<int32_t, Value> of;  // value id -> its gradient
  Value operator[](Value v) const;        // throws when v has no gradient
};

// `loss` must hold one element. Every value in `wrt` gets a gradient (zeros
// when the loss does not depend on it), marked as a graph output so that it
// lives to the end of the step.
Gradients append_backward(Builder& b, Value loss, const std::vector<Value>& wrt);

}  // namespace spillway::graph
