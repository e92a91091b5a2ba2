// The rmsnorm ops in the graph (ops/rmsnorm.h).
#pragma once

#include <string_view>
#include <vector>

#include "graph/builder.h"

namespace spillway::ops {

// x [..., dim] normalized per row and scaled by weight [dim]; the node also
// writes rstd [rows] (".rstd"), which its backward reads.
graph::Value rmsnorm(graph::Builder& b, graph::Value x, graph::Value weight, double eps,
                     std::string_view name = "rmsnorm");
// {dx, dweight}; dweight in the accumulation dtype.
std::vector<graph::Value> rmsnorm_backward(graph::Builder& b, graph::Value dy, graph::Value x, graph::Value weight,
                                           graph::Value rstd, std::string_view name);

}  // namespace spillway::ops
