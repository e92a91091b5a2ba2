// Folds the MLP's SwiGLU gate into the gate|up projection that feeds it: a
// matmul with a second output writes swiglu_packed(product) there too. On
// Hopper the GPU computes it in the product's epilogue (ops/gemm_hopper.h)
// from the product still in registers, instead of reading the [tokens,
// 2 * ffn] product back from memory; elsewhere it runs the two ops as before.
// The product stays a value of its own: the backward reads it.
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
  int fused = 0;  // swiglu nodes folded into their projection
};

// A new graph in which every packed swiglu whose input is the only output of
// a two-input matmul that overwrites it (no accumulation) is folded into that
// matmul, which stays where it was (so the gate's output is made earlier,
// before all of its readers). Every value keeps its id.
SwigluFused fuse_matmul_swiglu(const Graph& graph);

}  // namespace spillway::graph
