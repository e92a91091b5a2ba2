// Folds an add into the rmsnorm_backward that makes one of its operands:
// dx = (the norm's input gradient) + addend in one pass, instead of writing
// dx and reading it back to add the addend. In LLaMA's backward pass the
// residual stream's gradient is exactly that sum at both norms of every
// layer: the skip path's gradient plus the gradient through the norm, which
// autodiff adds (graph/autodiff.cc) because the stream feeds both.
//
// An rmsnorm_backward with a fifth input adds it to dx (ops/rmsnorm.h,
// dx_addend).
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

struct NormAddFused {
  Graph graph;
  int adds_folded = 0;
};

// A new graph in which every add (not accumulating) whose operand is the dx
// (output 0) of an rmsnorm_backward that nothing else reads (same dtype and
// shape, not a graph output, the other operand made before the
// rmsnorm_backward) is folded into that rmsnorm_backward, which stays where
// it was and writes the add's output: no value lives longer than before.
// Every value keeps its id; the old dx is left without a producer or reader
// (never allocated).
NormAddFused fuse_rmsnorm_add(const Graph& graph);

}  // namespace spillway::graph
