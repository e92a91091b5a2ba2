// Folds an add into the rmsnorm_backward that makes one of its operands:
// dx = (the norm's input gradient) + addend in one pass, instead of writing
// dx and reading it back to add the addend. In LLaMA's backward pass the
// residual stream's gradient is exactly that sum at both norms of every
// layer: the skip path's gradient plus the gradient through the norm, which
// autodiff adds (graph/autodiff.cc) because the stream feeds both.
//
// An rmsnorm_backward of form Fused::addend adds its fifth input to dx
// (ops/rmsnorm.h,
// dx_addend).
#pragma once

#include "graph/fold_add.h"

namespace spillway::graph {

// fold_adds (graph/fold_add.h) with this op as the producer.
FusedGraph fuse_rmsnorm_add(const Graph& graph);

}  // namespace spillway::graph
