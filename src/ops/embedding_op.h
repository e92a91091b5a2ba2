// The embedding ops in the graph: token lookup and its scatter-add backward
// (ops/embedding.h).
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// Rows of table [vocab, dim] picked by i32 ids [...]: [..., dim]. With
// table_rows > 0 the table holds rows [first_row, first_row + vocab) of a
// table of table_rows rows (graph::NodeAttrs).
graph::Value embedding(graph::Builder& b, graph::Value table, graph::Value ids, std::string_view name = "embedding",
                       int64_t first_row = 0, int64_t table_rows = 0);
// dtable [vocab, dim] in the accumulation dtype.
graph::Value embedding_backward(graph::Builder& b, graph::Value ids, graph::Value dout, int64_t vocab,
                                std::string_view name, int64_t first_row = 0, int64_t table_rows = 0);

}  // namespace spillway::ops
