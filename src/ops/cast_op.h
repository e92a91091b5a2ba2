// The cast op in the graph: conversions between floating dtypes (ops/cast.h).
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

graph::Value cast(graph::Builder& b, graph::Value x, DType to, std::string_view name = "cast");

}  // namespace spillway::ops
