// Folds an add into the matmul that makes one of its operands: out = a·b + x
// in one pass (cuBLASLt's C input, BLAS's beta = 1) instead of writing a·b
// and reading it back to add x. LLaMA's residual adds after o_proj and
// down_proj, and the backward pass's sums of input gradients (q/k/v, gate/up
// projections), are all of this shape: about 5 adds per layer.
//
// A matmul with a third input adds it: out = op(a)·op(b) + addend.
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

struct FusedGraph {
  Graph graph;
  int adds_folded = 0;
};

// A new graph in which every add whose operand comes from a matmul that
// nothing else reads (same dtype and shape, neither accumulating into caller
// memory, the other operand made before the matmul) is folded into that
// matmul, which stays where it was: no value lives longer than before. Every
// value keeps its id; the folded matmuls' old outputs are left without a
// producer or reader (never allocated).
FusedGraph fuse_matmul_add(const Graph& graph);

}  // namespace spillway::graph
