// Folds an add into the matmul that makes one of its operands: out = a·b + x
// in one pass (cuBLASLt's C input, BLAS's beta = 1) instead of writing a·b
// and reading it back to add x. LLaMA's residual adds after o_proj and
// down_proj, and the backward pass's sums of input gradients (q/k/v, gate/up
// projections), are all of this shape: about 5 adds per layer.
//
// A matmul of form Fused::addend adds its third input: out = op(a)·op(b) + addend.
#pragma once

#include "graph/fold_add.h"

namespace spillway::graph {

// fold_adds (graph/fold_add.h) with this op as the producer.
FusedGraph fuse_matmul_add(const Graph& graph);

}  // namespace spillway::graph
