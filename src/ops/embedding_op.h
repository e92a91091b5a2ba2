// The embedding ops in the graph: token lookup and its scatter-add backward
// (ops/embedding.h).
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// Rows of table [vocab, dim] picked by i32 ids [...]: [..., dim].
graph::Value embedding(graph::Builder& b, graph::Value table, graph::Value ids, std::string_view name = "embedding");
// dtable [vocab, dim] in the accumulation dtype.
graph::Value embedding_backward(graph::Builder& b, graph::Value ids, graph::Value dout, int64_t vocab,
                                std::string_view name);

}  // namespace spillway::ops
