// Folds the MLP's SwiGLU into the matrix products around it.
//
// Forward: the gate into the gate|up projection that feeds it: a matmul of
// form Fused::swiglu_gate writes swiglu_packed(product) too, as a second
// output. On Hopper the GPU computes it in the product's epilogue
// (ops/gemm_hopper.h) from the product still in shared memory, instead of
// reading the [tokens, 2 * ffn] product back from memory; elsewhere it runs
// the two ops as before. The product stays a value of its own: the backward
// reads it.
//
// Backward: the gate's backward into down_proj's dX product, its only
// reader (Fused::swiglu_backward): the matmul takes the forward's
// gate|up as a third input and writes d(gate|up) instead of the product,
// which no longer exists as a value. On Hopper the product never leaves
// the GPU's shared memory; elsewhere the runner makes it in scratch memory
// and runs the separate backward.
//
// Not part of fuse_step: recomputation (graph/recompute.h) remakes a dropped
// SwiGLU output cheaply from the kept product, which it could not do once the
// projection makes it. The resident GPU engine, which keeps every
// activation, applies it.
#pragma once

#include "graph/graph.h"

namespace spillway::graph {

struct SwigluFused {
  Graph graph;
  int fused = 0;           // swiglu nodes folded into their projection
  int fused_backward = 0;  // swiglu_backward nodes folded into the product of their dout
};

// A new graph in which
// - every packed swiglu whose input is the only output of a two-input
//   matmul that overwrites it (no accumulation) is folded into that matmul;
// - every packed swiglu_backward whose dout is such a matmul's output, read
//   by nothing else and not a graph output, is folded into that matmul.
// The matmul stays where it was (so the fused op's output is made earlier,
// before all of its readers). Every value keeps its id; a folded dout is
// left without a producer or readers.
SwigluFused fuse_matmul_swiglu(const Graph& graph);

}  // namespace spillway::graph
