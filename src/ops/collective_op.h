// Collectives as nodes of a graph: the tensor-parallel pass
// (graph/tensor_parallel.h) places them between the pieces of a layer that
// live on different ranks, and autodiff differentiates them like any op.
// Each rank's gradient of a value every rank holds alike (whole) is its part
// of the gradient, the sum over the ranks being the gradient; so the
// adjoint of an all-reduce is an all-reduce, and all-gather and
// reduce-scatter are each other's.
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// Every rank's x summed, on every rank. `group`: the rank grid dimension
// the collective spans; `ranks`: that group's size, which the planner
// prices it by.
graph::Value all_reduce(graph::Builder& b, graph::Value x, int group, int ranks, std::string_view name);

// Each rank's piece of a value split by rows or by columns (viewed as
// [rows, columns], every dimension but the last flattened into rows),
// concatenated in rank order into the whole `whole_shape`: each piece holds
// ceil(extent / ranks) rows or columns of the whole's `extent`, the last
// pieces padded with zeros (which the whole drops).
graph::Value all_gather(graph::Builder& b, graph::Value piece, int group, int ranks, bool split_columns,
                        Shape whole_shape, std::string_view name);

// The whole x summed over the ranks, of which each rank keeps its piece
// (the all_gather above, backwards): a value of `piece_shape`.
graph::Value reduce_scatter(graph::Builder& b, graph::Value x, int group, int ranks, bool split_columns,
                            Shape piece_shape, std::string_view name);

}  // namespace spillway::ops
