// Folds the sum of a tied embedding's two gradients into embedding_backward:
// dtable = base + scatter(dout) in one pass, instead of zero-filling the
// whole table, scattering the batch's rows into it, and reading it back to
// add the other part. With lm_head tied to the embedding (LLaMA-3.2-1B), the
// other part is lm_head's weight gradient, and autodiff adds the two
// (graph/autodiff.cc, "<table>.grad_sum"); that add is often the accumulating
// one (out += a + b) that sums micro-batches into the caller's buffer.
//
// An embedding_backward with a third input adds it (ops/embedding.h, base),
// rounding as the add did: the results are those of the unfused graph, bit
// for bit.
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

struct EmbeddingAddFused {
  Graph graph;
  int adds_folded = 0;
};

// A new graph in which every two-input add whose operand is the output of an
// embedding_backward (without a base) that nothing else reads (same dtype and
// shape, not a graph output, not accumulated, the other operand made before
// the embedding_backward) is folded into that embedding_backward, which stays
// where it was: no value lives longer than before. It writes the add's output
// and takes the add's accumulate flag; an accumulated output stays
// accumulated. Every value keeps its id; the old output is left without a
// producer or reader (never allocated).
EmbeddingAddFused fuse_embedding_add(const Graph& graph);

}  // namespace spillway::graph
