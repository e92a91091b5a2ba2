// Rows of a sequence in the graph (ops/rows.h): a run of a value's rows,
// and values joined along their rows. A value [batch, rows, ...] counts its
// rows along dimension 1.
#pragma once

#include <string_view>
#include <vector>

#include "graph/builder.h"

namespace spillway::ops {

// Rows [first, first + count) of x. Its gradient is dout with zero rows
// around it.
graph::Value take_rows(graph::Builder& b, graph::Value x, int64_t first, int64_t count,
                       std::string_view name = "take_rows");
// The parts one after another along the rows; each part's gradient is its
// rows of dout.
graph::Value concat_rows(graph::Builder& b, const std::vector<graph::Value>& parts,
                         std::string_view name = "concat_rows");

}  // namespace spillway::ops
