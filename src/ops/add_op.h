// The add op in the graph: elementwise sums (ops/add.h).
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// a + b, of one shape and dtype.
graph::Value add(graph::Builder& b, graph::Value a, graph::Value c, std::string_view name = "add");

}  // namespace spillway::ops
