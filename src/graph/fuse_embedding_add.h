// Folds the sum of a tied embedding's two gradients into embedding_backward:
// dtable = base + scatter(dout) in one pass, instead of zero-filling the
// whole table, scattering the batch's rows into it, and reading it back to
// add the other part. With lm_head tied to the embedding (LLaMA-3.2-1B), the
// other part is lm_head's weight gradient, and autodiff adds the two
// (graph/autodiff.cc, "<table>.grad_sum"); that add is often the accumulating
// one (out += a + b) that sums micro-batches into the caller's buffer.
//
// An embedding_backward of form Fused::addend adds its third input
// (ops/embedding.h, base),
// rounding as the add did: the results are those of the unfused graph, bit
// for bit.
#pragma once

#include "graph/fold_add.h"

namespace spillway::graph {

// fold_adds (graph/fold_add.h) with this op as the producer.
FusedGraph fuse_embedding_add(const Graph& graph);

}  // namespace spillway::graph
