// The fill op in the graph: a constant (ops/fill.h).
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// `shape` of `value`, converted to `dtype`.
graph::Value fill(graph::Builder& b, std::string_view name, Shape shape, double value, DType dtype);

}  // namespace spillway::ops
